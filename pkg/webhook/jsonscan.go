package webhook

import (
	"strconv"

	"github.com/skiffci/skiff/internal/jsonscan"
)

// decodeWorkflowJob reads a workflow_job payload into p in one pass over
// the body, reading the fields skiff needs and checking that the rest is
// valid JSON, with no reflection (package jsonscan). It decodes exactly as encoding/json's
// Unmarshal into *workflowJobPayload would (FuzzDecodeWorkflowJob checks
// it against encoding/json): member names match exactly, else without
// regard to case; a repeated member is decoded again over the first; null
// leaves a value as it is but empties a pointer or a slice; a number must
// fit its integer field; and any syntax or type error is an error. It is
// the webhook's hot path: encoding/json spends about 50 µs on a 10 KB
// payload, most of it walking the parts skiff does not read, twice.
func decodeWorkflowJob(body []byte, p *workflowJobPayload) error {
	d := jsonscan.NewReader(body)
	d.Space()
	c, ok := d.Peek()
	if !ok {
		return d.Truncated()
	}
	switch c {
	case '{':
		if err := d.Object(func(key []byte) error {
			switch {
			case jsonscan.FieldIs(key, "action"):
				return d.Str(&p.Action)
			case jsonscan.FieldIs(key, "workflow_job"):
				return readWorkflowJob(d, p)
			case jsonscan.FieldIs(key, "repository"):
				return readRepository(d, &p.Repository)
			case jsonscan.FieldIs(key, "installation"):
				return readInstallation(d, &p.Installation)
			}
			return d.Skip()
		}); err != nil {
			return err
		}
	case 'n':
		if err := d.Literal("null"); err != nil {
			return err
		}
	default:
		if err := d.Skip(); err != nil {
			return err
		}
		return jsonscan.TypeError("")
	}
	return d.End()
}

func readWorkflowJob(d *jsonscan.Reader, p *workflowJobPayload) error {
	if d.Null() {
		return nil
	}
	wj := &p.WorkflowJob
	return d.Object(func(key []byte) error {
		switch {
		case jsonscan.FieldIs(key, "id"):
			return d.Int64(&wj.ID, "workflow_job.id")
		case jsonscan.FieldIs(key, "run_id"):
			return d.Int64(&wj.RunID, "workflow_job.run_id")
		case jsonscan.FieldIs(key, "run_attempt"):
			n := int64(wj.RunAttempt)
			err := d.IntN(&n, strconv.IntSize, "workflow_job.run_attempt")
			wj.RunAttempt = int(n)
			return err
		case jsonscan.FieldIs(key, "name"):
			return d.Str(&wj.Name)
		case jsonscan.FieldIs(key, "workflow_name"):
			return d.StrPtr(&wj.WorkflowName)
		case jsonscan.FieldIs(key, "head_branch"):
			return d.StrPtr(&wj.HeadBranch)
		case jsonscan.FieldIs(key, "conclusion"):
			return d.StrPtr(&wj.Conclusion)
		case jsonscan.FieldIs(key, "labels"):
			return d.Strs(&wj.Labels, "workflow_job.labels")
		case jsonscan.FieldIs(key, "runner_id"):
			if d.Null() {
				wj.RunnerID = nil
				return nil
			}
			if wj.RunnerID == nil {
				wj.RunnerID = new(int64)
			}
			return d.Int64(wj.RunnerID, "workflow_job.runner_id")
		case jsonscan.FieldIs(key, "runner_name"):
			return d.StrPtr(&wj.RunnerName)
		case jsonscan.FieldIs(key, "created_at"):
			return d.Time(&wj.CreatedAt)
		case jsonscan.FieldIs(key, "started_at"):
			return d.Time(&wj.StartedAt)
		case jsonscan.FieldIs(key, "completed_at"):
			return d.Time(&wj.CompletedAt)
		}
		return d.Skip()
	})
}

func readRepository(d *jsonscan.Reader, r *repository) error {
	if d.Null() {
		return nil
	}
	return d.Object(func(key []byte) error {
		switch {
		case jsonscan.FieldIs(key, "full_name"):
			return d.Str(&r.FullName)
		case jsonscan.FieldIs(key, "visibility"):
			return d.Str(&r.Visibility)
		case jsonscan.FieldIs(key, "private"):
			return d.BoolPtr(&r.Private)
		}
		return d.Skip()
	})
}

func readInstallation(d *jsonscan.Reader, p **installation) error {
	if d.Null() {
		*p = nil
		return nil
	}
	if c, ok := d.Peek(); ok && c != '{' {
		if err := d.Skip(); err != nil {
			return err
		}
		return jsonscan.TypeError("installation")
	}
	if *p == nil {
		*p = &installation{}
	}
	return d.Object(func(key []byte) error {
		if jsonscan.FieldIs(key, "id") {
			return d.Int64(&(*p).ID, "installation.id")
		}
		return d.Skip()
	})
}
