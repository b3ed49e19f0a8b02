package webhook

import (
	"encoding/json/jsontext"
	"encoding/json/v2"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/skiffci/skiff/pkg/allow"
)

// ErrMalformed wraps every reason a payload cannot be used: not JSON, or a
// field skiff needs is missing. The handler answers 400.
var ErrMalformed = errors.New("malformed payload")

// Bounds on webhook input, each with its reason. A payload past one is
// answered 400 and counted as malformed.
const (
	// MaxLabels is the most runs-on labels a job may have: a runner takes at
	// most 100 labels, so a job with more can never be served.
	MaxLabels = 100
	// MaxLabelBytes bounds one label. GitHub's runner labels are short words;
	// 256 bytes leaves room for a long dynamic label (skiff/...) while 100 of
	// them stay far below the queue's 64 KiB message limit.
	MaxLabelBytes = 256
	// MaxID bounds job, run, runner and installation ids: GitHub's ids are
	// positive and far below 2^53, the largest integer every JSON reader
	// keeps exactly.
	MaxID = 1<<53 - 1
	// MaxRunAttempt bounds run_attempt: GitHub allows a run to be re-run 50
	// times; 100 leaves a margin without admitting nonsense.
	MaxRunAttempt = 100
)

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
	Repository   repository    `json:"repository"`
	Installation *installation `json:"installation"`
}

type installation struct {
	ID int64 `json:"id"`
}

// installationPayload is the part of an installation webhook skiff reads.
type installationPayload struct {
	Action       string `json:"action"`
	Installation struct {
		ID      int64 `json:"id"`
		AppID   int64 `json:"app_id"`
		Account struct {
			Login string `json:"login"`
			Type  string `json:"type"`
		} `json:"account"`
	} `json:"installation"`
}

func parseInstallationEvent(body []byte) (*installationPayload, error) {
	var p installationPayload
	if err := decode(body, &p); err != nil {
		return nil, fmt.Errorf("%w: %s", ErrMalformed, jsonProblem(err))
	}
	in := &p.Installation
	switch {
	case p.Action == "":
		return nil, fmt.Errorf("%w: action is missing", ErrMalformed)
	case in.Account.Login != "" && !allow.ValidOwner(in.Account.Login):
		return nil, fmt.Errorf("%w: installation.account.login %s is not a GitHub account name", ErrMalformed, quoteShort(in.Account.Login))
	case in.Account.Type != "" && in.Account.Type != "Organization" && in.Account.Type != "User" && in.Account.Type != "Enterprise":
		return nil, fmt.Errorf("%w: installation.account.type %s", ErrMalformed, quoteShort(in.Account.Type))
	}
	if err := errors.Join(checkID("installation.id", in.ID, true), checkID("installation.app_id", in.AppID, false)); err != nil {
		return nil, err
	}
	return &p, nil
}

// workflowRunPayload is the part of a workflow_run webhook skiff reads: the
// event that triggered the run, which workflow_job payloads do not carry.
type workflowRunPayload struct {
	Action      string `json:"action"`
	WorkflowRun struct {
		ID             int64       `json:"id"`
		RunAttempt     int         `json:"run_attempt"`
		Event          string      `json:"event"`
		Name           string      `json:"name"`
		HeadRepository *repository `json:"head_repository"`
		Actor          *account    `json:"actor"`
		TriggerActor   *account    `json:"triggering_actor"`
	} `json:"workflow_run"`
	Workflow *struct {
		Name string `json:"name"`
	} `json:"workflow"`
	Repository   repository    `json:"repository"`
	Installation *installation `json:"installation"`
}

type account struct {
	Login string `json:"login"`
}

type repository struct {
	FullName   string `json:"full_name"`
	Visibility string `json:"visibility"`
	Private    *bool  `json:"private"`
}

func (r repository) validate(field string) error {
	owner, name, ok := strings.Cut(r.FullName, "/")
	switch {
	case !ok || owner == "" || name == "":
		return fmt.Errorf("%w: %s.full_name %s is not owner/name", ErrMalformed, field, quoteShort(r.FullName))
	case !allow.ValidOwner(owner):
		return fmt.Errorf("%w: %s.full_name %s: the owner must be 1-%d letters, digits and single hyphens, not starting or ending with one", ErrMalformed, field, quoteShort(r.FullName), allow.MaxOwnerLen)
	case !allow.ValidRepoName(name):
		//lint:ignore ST1005 it ends naming the two names refused, "." and "..", not with a full stop
		return fmt.Errorf("%w: %s.full_name %s: the name must be 1-%d letters, digits, '.', '-' or '_', and not . or ..", ErrMalformed, field, quoteShort(r.FullName), allow.MaxRepoNameLen)
	}
	return nil
}

// visibility returns the repository's visibility: visibility when GitHub
// sent it, else private or public from private, else "" (unknown, which the
// pool policy treats as public).
func (r repository) visibility() string {
	switch {
	case r.Visibility != "":
		return r.Visibility
	case r.Private == nil:
		return ""
	case *r.Private:
		return "private"
	}
	return "public"
}

// checkID reports an id that is absent, negative or past MaxID.
func checkID(field string, id int64, required bool) error {
	switch {
	case id == 0 && !required:
		return nil
	case id <= 0:
		return fmt.Errorf("%w: %s is missing", ErrMalformed, field)
	case id > MaxID:
		return fmt.Errorf("%w: %s %d is past %d", ErrMalformed, field, id, int64(MaxID))
	}
	return nil
}

// checkAttempt reports a run_attempt outside 1..MaxRunAttempt; 0 means
// GitHub left it out (older payloads), which reads as the first attempt.
func checkAttempt(field string, n int) error {
	if n < 0 || n > MaxRunAttempt {
		return fmt.Errorf("%w: %s %d is outside 1-%d", ErrMalformed, field, n, MaxRunAttempt)
	}
	return nil
}

func (i *installation) check() error {
	if i == nil {
		return nil
	}
	return checkID("installation.id", i.ID, true)
}

// checkLabels applies MaxLabels and MaxLabelBytes.
func checkLabels(labels []string) error {
	if len(labels) > MaxLabels {
		return fmt.Errorf("%w: workflow_job.labels has %d labels; a runner takes at most %d", ErrMalformed, len(labels), MaxLabels)
	}
	for i, l := range labels {
		if len(l) > MaxLabelBytes {
			return fmt.Errorf("%w: workflow_job.labels[%d] is %d bytes, more than %d", ErrMalformed, i, len(l), MaxLabelBytes)
		}
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
	if err := decode(body, &p); err != nil {
		return nil, fmt.Errorf("%w: %s", ErrMalformed, jsonProblem(err))
	}
	if p.Action == "" {
		return nil, fmt.Errorf("%w: action is missing", ErrMalformed)
	}
	wj := &p.WorkflowJob
	if err := errors.Join(
		checkID("workflow_job.id", wj.ID, true),
		checkID("workflow_job.run_id", wj.RunID, true),
		checkAttempt("workflow_job.run_attempt", wj.RunAttempt),
		checkID("workflow_job.runner_id", i64(wj.RunnerID), false),
		checkLabels(wj.Labels),
		p.Repository.validate("repository"),
		p.Installation.check(),
	); err != nil {
		return nil, err
	}
	return &p, nil
}

func parseWorkflowRun(body []byte) (*workflowRunPayload, error) {
	var p workflowRunPayload
	if err := decode(body, &p); err != nil {
		return nil, fmt.Errorf("%w: %s", ErrMalformed, jsonProblem(err))
	}
	wr := &p.WorkflowRun
	switch {
	case p.Action == "":
		return nil, fmt.Errorf("%w: action is missing", ErrMalformed)
	case wr.Event == "":
		return nil, fmt.Errorf("%w: workflow_run.event is missing", ErrMalformed)
	case len(wr.Event) > maxEventLen:
		return nil, fmt.Errorf("%w: workflow_run.event is %d bytes, more than %d", ErrMalformed, len(wr.Event), maxEventLen)
	}
	errs := []error{
		checkID("workflow_run.id", wr.ID, true),
		checkAttempt("workflow_run.run_attempt", wr.RunAttempt),
		p.Repository.validate("repository"),
		p.Installation.check(),
	}
	if wr.HeadRepository != nil && wr.HeadRepository.FullName != "" {
		errs = append(errs, wr.HeadRepository.validate("workflow_run.head_repository"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &p, nil
}

// maxEventLen bounds workflow_run.event: GitHub's event names are short
// words (the longest, pull_request_review_comment, has 27 bytes).
const maxEventLen = 64

// fromFork reports whether the run's code comes from another repository
// than the one it runs in: its head repository differs (a pull request
// from a fork, or a pull_request_target or workflow_run chain started by
// one). A missing head repository (the fork was deleted) counts as a fork.
// head_repository.fork is not used: it is true for every run of a
// repository that is itself a fork.
func (p *workflowRunPayload) fromFork() bool {
	h := p.WorkflowRun.HeadRepository
	return h == nil || !strings.EqualFold(h.FullName, p.Repository.FullName)
}

// actor returns who triggered the run: triggering_actor, else actor.
func (p *workflowRunPayload) actor() string {
	for _, a := range []*account{p.WorkflowRun.TriggerActor, p.WorkflowRun.Actor} {
		if a != nil && a.Login != "" {
			return a.Login
		}
	}
	return ""
}

// maxQuoted bounds how much of an outside value an error message quotes.
const maxQuoted = 64

// quoteShort quotes s for a message, cut to maxQuoted bytes.
func quoteShort(s string) string {
	if len(s) <= maxQuoted {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q… (%d bytes)", s[:maxQuoted], len(s))
}

// jsonProblem describes a decoding error without quoting the payload.
func jsonProblem(err error) string {
	var syn *jsontext.SyntacticError
	var sem *json.SemanticError
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "truncated JSON"
	case errors.As(err, &syn):
		return fmt.Sprintf("invalid JSON at byte %d", syn.ByteOffset)
	case errors.As(err, &sem) && sem.JSONPointer != "":
		return fmt.Sprintf("field %s has the wrong type", strings.ReplaceAll(strings.TrimPrefix(string(sem.JSONPointer), "/"), "/", "."))
	}
	return "invalid JSON"
}

// decode reads a verified payload into v with encoding/json/v2: member
// names match exactly, as GitHub writes them, and a repeated name is not
// looked for (the payload is GitHub's, checked by its signature). That is
// about 30 % less CPU than encoding/json's v1 rules for the 8 KB of a
// workflow_job payload, most of which skiff skips.
func decode(body []byte, v any) error {
	return json.Unmarshal(body, v, jsontext.AllowDuplicateNames(true))
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
