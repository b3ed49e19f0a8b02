package listener

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/github/scaleset"
)

// A job message's jobId is the workflow job's number where the scale-set
// service sends that (the simulator by default, older services); github.com
// sends its own opaque id (a GUID) instead, and a workflow job id nowhere
// in the message. skiff's records, launch claims, ledger and REST checks
// are keyed by the workflow job id, so the listener finds it in the run's
// jobs (GET .../actions/runs/{run_id}/jobs, once per run per message
// batch): the job its runner runs for a start or an end, else the
// not-yet-matched job of the message's name and labels. It keeps each match
// until the job completes, so a job's later messages cost no call.

// errNoMatch: no job of the run fits the message.
var errNoMatch = errors.New("no job of the run fits the message")

// batchJobs are the runs' jobs as one message batch read them: one REST
// call per run per batch, however many of its jobs the batch names.
type batchJobs map[int64][]github.WorkflowJob

// workflowJob returns the workflow job id of message j.
func (l *Listener) workflowJob(ctx context.Context, b batchJobs, j scaleset.JobMessage) (int64, error) {
	if id, err := strconv.ParseInt(j.JobID, 10, 64); err == nil && id > 0 {
		return id, nil
	}
	if j.JobID == "" {
		return 0, errors.New("the message names no job")
	}
	l.mu.Lock()
	id, ok := l.byMessage[j.JobID]
	l.mu.Unlock()
	if ok {
		return id, nil
	}
	if j.WorkflowRunID <= 0 {
		return 0, fmt.Errorf("job %s: the message names no workflow run", j.JobID)
	}
	jobs, ok := b[j.WorkflowRunID]
	if !ok {
		var err error
		if jobs, err = l.o.GitHub.RunJobs(ctx, l.o.Installation, j.OwnerName, j.RepositoryName, j.WorkflowRunID); err != nil {
			return 0, fmt.Errorf("job %s: %w", j.JobID, err)
		}
		b[j.WorkflowRunID] = jobs
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	id, byRunner := match(jobs, j, l.matched)
	if id == 0 {
		return 0, fmt.Errorf("job %s (%q, run %d): %w", j.JobID, j.DisplayName, j.WorkflowRunID, errNoMatch)
	}
	if j.RunnerName != "" && !byRunner {
		// A start or an end matched by name only (the run's jobs do not
		// name its runner yet): not kept, so the next message of the job
		// looks for its runner again.
		return id, nil
	}
	now := l.o.Now()
	l.byMessage[j.JobID], l.matched[id] = id, matchedJob{message: j.JobID, at: now}
	l.forgetOldLocked(now)
	return id, nil
}

// matchedJob is a workflow job a message's job id was matched to: that id,
// and when.
type matchedJob struct {
	message string
	at      time.Time
}

// forgetJob drops message job id's match once its job completed.
func (l *Listener) forgetJob(jobID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if id, ok := l.byMessage[jobID]; ok {
		delete(l.byMessage, jobID)
		delete(l.matched, id)
	}
}

// match picks the workflow job of message j among a run's jobs (0: none):
// the one whose runner is the message's (a runner runs one job; byRunner),
// else the first, by id, of the message's name and labels that no other
// message matched (jobs alike in both are alike to a scale set's runners
// too).
func match(jobs []github.WorkflowJob, j scaleset.JobMessage, matched map[int64]matchedJob) (id int64, byRunner bool) {
	if j.RunnerName != "" {
		for _, c := range jobs {
			if c.RunnerName == j.RunnerName {
				return c.ID, true
			}
		}
	}
	var best int64
	for _, c := range jobs {
		if _, other := matched[c.ID]; other || c.Name != j.DisplayName ||
			(len(j.RequestLabels) > 0 && !sameLabels(c.Labels, j.RequestLabels)) {
			continue
		}
		if j.Type == scaleset.JobAvailable && c.Status != "queued" {
			continue
		}
		if best == 0 || c.ID < best {
			best = c.ID
		}
	}
	return best, false
}
