package ghsim

import (
	"net/http"
	"strconv"
	"strings"
)

// OpRerunFailedJobs re-runs the failed and cancelled jobs of a completed
// run as a new attempt (GitHub's "Re-run failed jobs").
const OpRerunFailedJobs = "POST /repos/{owner}/{repo}/actions/runs/{run_id}/rerun-failed-jobs"

// RunState is a workflow run as the simulator sees it.
type RunState struct {
	ID         int64
	Attempt    int
	Status     string // queued, in_progress, completed
	Conclusion string
	// JobIDs are the run's jobs, of every attempt, in creation order.
	JobIDs []int64
}

// Run returns a run's state.
func (s *Server) Run(id int64) (RunState, bool) {
	s.Step()
	s.mu.Lock()
	defer s.mu.Unlock()
	run := s.runs[id]
	if run == nil {
		return RunState{}, false
	}
	out := RunState{ID: run.id, Attempt: run.attempt, Status: run.status, Conclusion: run.conclusion}
	for _, j := range run.jobs {
		out.JobIDs = append(out.JobIDs, j.id)
	}
	return out, true
}

// rerunFailedJobs answers 201 with an empty object and starts the run's
// next attempt: each job of the last attempt that failed or was cancelled
// is queued again as a new job (new id, same name, labels, duration and
// outcome), with workflow_run requested and workflow_job queued webhooks.
// A run that has not completed, or has no failed job, is refused with 403,
// as GitHub does.
func (s *Server) rerunFailedJobs(c *call) {
	s.mu.Lock()
	id, _ := strconv.ParseInt(c.r.PathValue("run_id"), 10, 64)
	run := s.runs[id]
	if run == nil || !strings.EqualFold(run.repo.fullName(), c.r.PathValue("owner")+"/"+c.r.PathValue("repo")) {
		s.mu.Unlock()
		c.fail(http.StatusNotFound, "Not Found")
		return
	}
	if run.status != "completed" {
		s.mu.Unlock()
		c.fail(http.StatusForbidden, "This workflow run is not completed")
		return
	}
	var failed []*simJob
	for _, j := range run.jobs {
		if j.attempt == run.attempt && (j.conclusion == "failure" || j.conclusion == "cancelled") {
			failed = append(failed, j)
		}
	}
	if len(failed) == 0 {
		s.mu.Unlock()
		c.fail(http.StatusForbidden, "This workflow run has no failed jobs to re-run")
		return
	}
	now := s.now()
	run.attempt++
	run.status, run.conclusion, run.updated = "queued", "", now
	s.webhookLocked(run, "workflow_run", "requested", nil)
	for _, old := range failed {
		j := &simJob{id: s.nextID(), run: run, attempt: run.attempt, name: old.name, labels: append([]string{}, old.labels...),
			duration: old.duration, outcome: old.outcome, status: "queued", created: now}
		s.jobs[j.id] = j
		run.jobs = append(run.jobs, j)
		s.queued = append(s.queued, j)
		s.webhookLocked(run, "workflow_job", "queued", j)
	}
	s.dispatchLocked()
	s.mu.Unlock()
	s.pump()
	c.json(http.StatusCreated, obj{})
}
