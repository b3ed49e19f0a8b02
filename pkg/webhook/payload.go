package webhook

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrMalformed wraps every reason a payload cannot be used: not JSON, or a
// field skiff needs is missing. The handler answers 400.
var ErrMalformed = errors.New("malformed payload")

// workflowJobPayload is the part of a workflow_job webhook skiff reads.
// Field names follow GitHub's published webhook schema.
type workflowJobPayload struct {
	Action      string `json:"action"`
	WorkflowJob struct {
		ID           int64      `json:"id"`
		RunID        int64      `json:"run_id"`
		RunAttempt   int        `json:"run_attempt"`
		Name         string     `json:"name"`
		WorkflowName *string    `json:"workflow_name"`
		HeadBranch   *string    `json:"head_branch"`
		Conclusion   *string    `json:"conclusion"`
		Labels       []string   `json:"labels"`
		RunnerID     *int64     `json:"runner_id"`
		RunnerName   *string    `json:"runner_name"`
		CreatedAt    *time.Time `json:"created_at"`
		StartedAt    *time.Time `json:"started_at"`
		CompletedAt  *time.Time `json:"completed_at"`
	} `json:"workflow_job"`
	Repository   repository `json:"repository"`
	Installation *struct {
		ID int64 `json:"id"`
	} `json:"installation"`
}

// workflowRunPayload is the part of a workflow_run webhook skiff reads: the
// event that triggered the run, which workflow_job payloads do not carry.
type workflowRunPayload struct {
	Action      string `json:"action"`
	WorkflowRun struct {
		ID         int64  `json:"id"`
		RunAttempt int    `json:"run_attempt"`
		Event      string `json:"event"`
		Name       string `json:"name"`
	} `json:"workflow_run"`
	Workflow *struct {
		Name string `json:"name"`
	} `json:"workflow"`
	Repository repository `json:"repository"`
}

type repository struct {
	FullName string `json:"full_name"`
}

func (r repository) validate() error {
	owner, name, ok := strings.Cut(r.FullName, "/")
	if !ok || owner == "" || name == "" {
		return fmt.Errorf("%w: repository.full_name must be owner/name", ErrMalformed)
	}
	return nil
}

// owner returns the repository's owner as its full name spells it: the
// account the REST API paths (/repos/{owner}/{repo}, /orgs/{org}) name.
func (r repository) owner() string {
	o, _, _ := strings.Cut(r.FullName, "/")
	return o
}

func parseWorkflowJob(body []byte) (*workflowJobPayload, error) {
	var p workflowJobPayload
	if err := json.Unmarshal(body, &p); err != nil {
		return nil, fmt.Errorf("%w: %s", ErrMalformed, jsonProblem(err))
	}
	switch {
	case p.Action == "":
		return nil, fmt.Errorf("%w: action is missing", ErrMalformed)
	case p.WorkflowJob.ID <= 0:
		return nil, fmt.Errorf("%w: workflow_job.id is missing", ErrMalformed)
	case p.WorkflowJob.RunID <= 0:
		return nil, fmt.Errorf("%w: workflow_job.run_id is missing", ErrMalformed)
	}
	if err := p.Repository.validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

func parseWorkflowRun(body []byte) (*workflowRunPayload, error) {
	var p workflowRunPayload
	if err := json.Unmarshal(body, &p); err != nil {
		return nil, fmt.Errorf("%w: %s", ErrMalformed, jsonProblem(err))
	}
	switch {
	case p.Action == "":
		return nil, fmt.Errorf("%w: action is missing", ErrMalformed)
	case p.WorkflowRun.ID <= 0:
		return nil, fmt.Errorf("%w: workflow_run.id is missing", ErrMalformed)
	case p.WorkflowRun.Event == "":
		return nil, fmt.Errorf("%w: workflow_run.event is missing", ErrMalformed)
	}
	if err := p.Repository.validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

// jsonProblem describes a decoding error without quoting the payload.
func jsonProblem(err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn) && strings.Contains(syn.Error(), "unexpected end"):
		return "truncated JSON"
	case errors.As(err, &syn):
		return fmt.Sprintf("invalid JSON at byte %d", syn.Offset)
	case errors.As(err, &typ):
		return fmt.Sprintf("field %s has the wrong type", typ.Field)
	}
	return "invalid JSON"
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func i64(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

func tm(p *time.Time) time.Time {
	if p == nil {
		return time.Time{}
	}
	return p.UTC()
}
