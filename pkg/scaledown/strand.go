package scaledown

import (
	"context"
	"errors"
	"log/slog"
	"strconv"

	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/queue"
	"github.com/skiffci/skiff/pkg/scaledown/decide"
	"github.com/skiffci/skiff/pkg/store"
)

// rerun reports whether the pool re-runs its interrupted runners' jobs.
func (s *Service) rerun(name string) bool { return pool.Listed(s.o.RerunInterrupted, name) }

// strand checks whether the action's job is still queued on GitHub and,
// if so, launches a replacement. It reports whether the action may go on
// (false: the check is left for the next pass).
func (p *pass) strand(ctx context.Context, a *decide.Action, claims map[int64]ledger.Claim) bool {
	c, hasClaim := claims[a.JobID]
	job, queued, ok := p.stillQueued(ctx, a, c, hasClaim)
	if !queued {
		return ok
	}
	log := p.log.With("job_id", a.JobID, "runner_name", a.Runner, "rule", string(a.Rule))
	failed := 0
	if hasClaim {
		failed = p.failedRunners(ctx, a.JobID, c.Gen)
	}
	if failed > a.MaxReplacements {
		p.count(MetricReplacements, "limit")
		log.Warn("stranded job reached its replacement limit; not launching again", "failed_runners", failed,
			"max", a.MaxReplacements)
		return true
	}
	if hasClaim {
		if moved, ok := p.moveClaim(ctx, a, c); !moved {
			return ok
		}
	}
	return p.replace(ctx, log, a, job, failed)
}

// stillQueued reads the action's job and reports whether it is still
// queued, so stranded; when it is not, ok says whether the action may go
// on (false: the check is left for the next pass).
func (p *pass) stillQueued(ctx context.Context, a *decide.Action, c ledger.Claim, hasClaim bool) (job store.JobRecord, queued, ok bool) {
	if hasClaim && a.Gen > 0 && c.Gen > a.Gen {
		return job, false, true // replaced already (or launched again by scale-up)
	}
	job, err := p.s.o.Jobs.Job(ctx, a.JobID)
	if errors.Is(err, store.ErrNotFound) {
		return job, false, true // the record expired: nothing to launch for
	}
	if err != nil {
		p.fail("reading job record", err, "job_id", a.JobID)
		return job, false, false
	}
	if job.Status == store.StatusCompleted || job.Status == store.StatusInProgress {
		// The webhook saw the job start (on this runner or another one):
		// GitHub never queues a started job again, so no GitHub call is
		// needed to know it is not stranded. In a burst whose runners take
		// each other's jobs, that is most of them.
		return job, false, true
	}
	if p.s.o.ScaleUpChecksQueued {
		return job, true, true
	}
	if !p.takeJobCheck(a.Runner) {
		p.defer1("job_checks", "rule", string(a.Rule), "job_id", a.JobID)
		return job, false, false
	}
	owner, repo := splitRepo(job.Repository)
	gj, err := p.s.o.GitHub.GetJob(ctx, job.InstallationID, owner, repo, a.JobID)
	if errors.Is(err, github.ErrNotFound) {
		return job, false, true
	}
	if err != nil {
		p.fail("getting job", err, "job_id", a.JobID)
		return job, false, false
	}
	return job, gj.Status == "queued", true
}

// failedRunners counts the job's runners up to generation gen that failed
// it. The replacement limit guards against a launch loop: each runner
// that failed the job — launched, and never ran any job (a failed boot, a
// lost registration) — earns one replacement, up to the limit. A runner
// another job took did useful work and is no failure: in a busy pool
// whose runners can take less specific jobs, a job may lose several that
// way.
func (p *pass) failedRunners(ctx context.Context, jobID int64, gen int) int {
	failed := 0
	for g := 1; g <= gen; g++ {
		if r, err := p.s.o.Ledger.Runner(ctx, names.RunnerName(p.s.o.Deployment, jobID, g)); err == nil && !r.LaunchedAt.IsZero() && r.BusyJob == 0 {
			failed++
		}
	}
	return failed
}

// moveClaim moves the job's claim past the lost runner: a claim whose
// lease is over and whose token names no launch makes scale-up launch the
// next attempt. When it did not move it, ok says whether the action may
// go on (scale-up moved it meanwhile) or is left for the next pass.
func (p *pass) moveClaim(ctx context.Context, a *decide.Action, c ledger.Claim) (moved, ok bool) {
	next := c
	next.Gen, next.Token, next.LeaseUntil, next.UpdatedAt = c.Gen+1, "replace-"+strconv.FormatInt(a.JobID, 10)+"-"+strconv.Itoa(c.Gen+1), p.now, p.now
	next.ExpiresAt = p.now.Add(p.s.o.ClaimTTL)
	err := p.s.o.Claims.ClaimLaunch(ctx, next, c.Gen, p.now)
	switch {
	case errors.Is(err, store.ErrConflict):
		return false, true // scale-up moved it meanwhile
	case err != nil:
		p.fail("claiming the replacement", err, "job_id", a.JobID)
		return false, false
	}
	return true, true
}

// replace sends the stranded job to scale-up again and reports whether the
// action may go on.
func (p *pass) replace(ctx context.Context, log *slog.Logger, a *decide.Action, job store.JobRecord, failed int) bool {
	msg := queue.Job{JobID: job.ID, RunID: job.RunID, Attempt: job.Attempt, Repository: job.Repository, Owner: job.Owner,
		InstallationID: job.InstallationID, Labels: job.Labels, Pool: job.Pool, DeliveryID: "scaledown-" + string(a.Rule), ReceivedAt: p.now}
	if msg.Pool == "" {
		msg.Pool = a.Pool
	}
	if err := p.s.o.Queue.Send(ctx, msg); err != nil {
		p.fail("sending the replacement", err, "job_id", a.JobID)
		return false
	}
	p.count(MetricReplacements, string(a.Rule))
	log.Info("stranded job: replacement launched", "failed_runners", failed, "max", a.MaxReplacements, "reason", a.Reason)
	p.mu.Lock()
	p.rep.Replacements++
	p.mu.Unlock()
	return true
}

// rerun re-runs, once, the failed jobs of the run of a job its spot
// interruption failed, after the run completed. It reports whether the
// record may be ended (false: the run is still going; ask again later).
func (p *pass) rerun(ctx context.Context, a *decide.Action) bool {
	jobID := a.JobID
	if a.RanJob != 0 {
		jobID = a.RanJob // another job took the runner: that job failed
	}
	if !a.RanUnknownSince.IsZero() && p.now.Sub(a.RanUnknownSince) < p.s.o.RedeliverWindow {
		// The runner started a job no event has named yet (late, or lost and
		// to be redelivered): re-running the job it was launched for could
		// re-run the wrong one, or nothing. Wait for the event, within the
		// redelivery window; past it, the runner's own job is assumed.
		p.defer1("job_unknown", "rule", "rerun", "runner_name", a.Runner)
		return false
	}
	job, err := p.s.o.Jobs.Job(ctx, jobID)
	if err != nil {
		return errors.Is(err, store.ErrNotFound)
	}
	failed := job.Conclusion == "failure" || job.Conclusion == "cancelled"
	if job.Status == store.StatusCompleted && job.Conclusion != "" && !failed {
		return true // the webhook saw it end well: nothing to re-run, no GitHub call
	}
	// The job's end as the webhook saw it spares GitHub's job read; the run's
	// state is asked every time. Both reads are taken from the budget
	// together: one without the other decides nothing, and passes whose
	// concurrent actions each got half would never re-run anything.
	known := job.Status == store.StatusCompleted && failed && job.RunID != 0
	need := 2
	if known {
		need = 1
	}
	if !p.takeJobChecks(a.Runner, need) {
		p.defer1("job_checks", "rule", "rerun", "job_id", jobID)
		return false
	}
	owner, repo := splitRepo(job.Repository)
	gj := &github.WorkflowJob{ID: jobID, RunID: job.RunID, RunAttempt: max(job.Attempt, 1), Status: "completed", Conclusion: job.Conclusion}
	if !known {
		if gj, err = p.s.o.GitHub.GetJob(ctx, job.InstallationID, owner, repo, jobID); err != nil {
			p.fail("getting job", err, "job_id", jobID)
			return errors.Is(err, github.ErrNotFound)
		}
		switch {
		case gj.Status != "completed":
			return false
		case gj.Conclusion != "failure" && gj.Conclusion != "cancelled":
			return true
		}
	}
	run, err := p.s.o.GitHub.GetWorkflowRun(ctx, job.InstallationID, owner, repo, gj.RunID)
	if err != nil {
		p.fail("getting workflow run", err, "run_id", gj.RunID)
		return false
	}
	if run.Status != "completed" {
		return false
	}
	if run.RunAttempt != gj.RunAttempt {
		return true // re-run already (by us or by someone)
	}
	// The mark comes first: a re-run whose jobs were queued before it would
	// go to spot again. Both are retried on the next pass if either fails.
	if err := p.s.o.Claims.MarkOnDemand(ctx, gj.RunID, a.Pool, run.RunAttempt+1, p.now.Add(ledger.OnDemandTTL)); err != nil {
		p.fail("marking the re-run on-demand", err, "run_id", gj.RunID)
		return false
	}
	p.ghCalls.Add(1)
	if err := p.s.o.GitHub.RerunFailedJobs(ctx, job.InstallationID, owner, repo, gj.RunID); err != nil {
		p.fail("re-running failed jobs", err, "run_id", gj.RunID)
		return false
	}
	p.count(MetricReruns, "spot")
	p.log.Info("re-ran the failed jobs of a run a spot interruption failed, on on-demand capacity", "run_id", gj.RunID,
		"job_id", jobID, "pool", a.Pool, "attempt", run.RunAttempt+1)
	p.mu.Lock()
	p.rep.Reruns++
	p.mu.Unlock()
	return true
}
