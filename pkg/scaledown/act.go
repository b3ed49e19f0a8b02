package scaledown

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"

	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/metrics/writer"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/scaledown/decide"
	"github.com/skiffci/skiff/pkg/store"
)

// advance writes the pass's ledger advances (what GitHub and the hooks
// showed and the ledger had not recorded, and the instances found by their
// runner's name), at most MaxAdvances.
func (p *pass) advance(ctx context.Context, as []decide.Advance) {
	if len(as) > p.s.o.MaxAdvances {
		p.defer1("advances", "left", len(as)-p.s.o.MaxAdvances)
		as = as[:p.s.o.MaxAdvances]
	}
	var n atomic.Int64
	p.each(ctx, len(as), func(i int) {
		a := as[i]
		var err error
		if a.To == ledger.StateLaunched {
			err = p.s.o.Ledger.Launched(ctx, a.Runner, a.Launch)
		} else {
			err = p.s.o.Ledger.Advance(ctx, a.Runner, a.To, a.At, 0)
		}
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			p.fail("advancing runner", err, "runner_name", a.Runner, "to", a.To.String())
			return
		}
		n.Add(1)
	})
	p.rep.Advances = int(n.Load())
}

// apply carries out the actions in three phases: GitHub first (confirm a
// missing runner, delete runners; a runner GitHub says is running a job
// stops its action), then one Terminate for every instance, then the jobs
// (stranded, interrupted, metrics) and the ledger.
func (p *pass) apply(ctx context.Context, actions []decide.Action) {
	p.fairOrder(actions)
	ok := make([]bool, len(actions))
	p.each(ctx, len(actions), func(i int) {
		if p.late(ctx) {
			return
		}
		ok[i] = p.github(ctx, &actions[i])
	})
	var ids []string
	for i, a := range actions {
		if ok[i] && a.Terminate && a.InstanceID != "" {
			ids = append(ids, a.InstanceID)
		}
	}
	if len(ids) > 0 {
		if err := p.s.o.Provider.Terminate(ctx, ids); err != nil {
			p.fail("terminating instances", err, "instances", len(ids))
			for i, a := range actions {
				if a.Terminate {
					ok[i] = false
				}
			}
		}
	}
	for i, a := range actions {
		if ok[i] && (a.Terminate || a.Delete) {
			p.count(MetricActions, string(a.Rule))
			p.log.Info("scale-down action", "rule", string(a.Rule), "reason", a.Reason, "pool", a.Pool, "runner_name", a.Runner,
				"instance_id", a.InstanceID, "job_id", a.JobID, "deleted_runner", a.Delete, "terminated", a.Terminate)
			p.mu.Lock()
			p.rep.Actions[a.Rule]++
			p.mu.Unlock()
		}
	}
	p.jobs(ctx, actions, ok)
}

// github runs an action's GitHub steps; false stops the action.
func (p *pass) github(ctx context.Context, a *decide.Action) bool {
	if a.ConfirmUnrecorded && p.recordedSince(ctx, a.Runner) {
		return false
	}
	if a.ConfirmAbsent {
		if !p.takeJobCheck(a.Runner) {
			p.defer1("job_checks", "rule", string(a.Rule), "runner_name", a.Runner)
			return false
		}
		inst := p.instances[a.InstanceID]
		sc := github.OrgScope(inst.Tags[names.TagOwner])
		if p.s.o.RepoScope {
			sc = scopeOf(inst.Tags[names.TagRepository])
		}
		if sc.Owner != "" {
			rs, err := p.s.o.GitHub.ListRunners(ctx, 0, sc, a.Runner)
			if err != nil {
				p.fail("confirming a runner is gone", err, "runner_name", a.Runner)
				return false
			}
			if len(rs) > 0 {
				p.log.Info("runner is on GitHub after all; deciding again next pass", "runner_name", a.Runner)
				return false
			}
		}
	}
	if a.Delete && a.RunnerID != 0 {
		if !p.takeDelete() {
			if !a.Terminate && a.End {
				// The instance is gone: the record ends now, and its pool's
				// count with it; the offline runner is deleted as a ghost by a
				// later pass (or by GitHub, a day offline).
				a.Delete = false
				p.count(MetricDeferred, "github_calls")
				return true
			}
			p.defer1("github_calls", "rule", string(a.Rule), "runner_name", a.Runner)
			return false
		}
		err := p.s.o.GitHub.DeleteRunner(ctx, 0, scopeOf(a.Scope), a.RunnerID)
		switch {
		case errors.Is(err, github.ErrRunnerBusy):
			p.count(MetricKept, "github_refused")
			p.log.Info("GitHub says the runner is running a job: kept", "rule", string(a.Rule), "runner_name", a.Runner)
			return false
		case err != nil:
			p.fail("deleting runner", err, "runner_name", a.Runner, "rule", string(a.Rule))
			return false
		}
	}
	return true
}

// jobs runs the job steps of the actions still going, then ends their records.
func (p *pass) jobs(ctx context.Context, actions []decide.Action, ok []bool) {
	// Jobs already replaced (their claim moved past the runner) need no check.
	var strandIDs []int64
	for i, a := range actions {
		if ok[i] && a.Strand && a.JobID != 0 {
			strandIDs = append(strandIDs, a.JobID)
		}
	}
	claims := map[int64]ledger.Claim{}
	if len(strandIDs) > 0 {
		var err error
		if claims, err = p.s.o.Claims.LaunchClaims(ctx, strandIDs, p.now); err != nil {
			p.fail("reading launch claims", err)
			for i, a := range actions {
				if a.Strand {
					ok[i] = false
				}
			}
		}
	}
	var metrics []*decide.Action
	p.each(ctx, len(actions), func(i int) {
		a := &actions[i]
		if !ok[i] || p.late(ctx) {
			ok[i] = false
			return
		}
		if a.Strand && a.JobID != 0 {
			if !p.strand(ctx, a, claims) {
				ok[i] = false
				return
			}
		}
		if a.Interrupted && a.End {
			if !p.rerun(ctx, a) {
				ok[i] = false
				return
			}
		}
		if a.End && p.s.o.Metrics.Enabled(a.Pool) && a.JobID != 0 {
			p.mu.Lock()
			metrics = append(metrics, a)
			p.mu.Unlock()
		}
	})
	jobs := append(metricsJobs(metrics, p), p.awaiting(ctx)...)
	p.backfill(ctx, jobs)
	outcome := p.s.o.Metrics.Write(ctx, p.now, jobs)
	p.stopAwaiting(ctx, jobs, outcome)
	p.each(ctx, len(actions), func(i int) {
		a := actions[i]
		if !ok[i] || !a.End || a.Runner == "" || p.late(ctx) {
			return
		}
		if p.s.o.Metrics.Enabled(a.Pool) && a.JobID != 0 && outcome[a.Runner] == writer.Wait {
			return // its record waits out CloudWatch's metric lag
		}
		end := p.s.o.Ledger.End
		if outcome[a.Runner] == writer.Await {
			end = p.s.o.Ledger.EndAwaiting
		}
		if _, err := end(ctx, a.Runner, p.now, string(a.Rule)); err != nil && !errors.Is(err, store.ErrNotFound) {
			p.fail("ending runner", err, "runner_name", a.Runner)
			return
		}
		if !a.Terminate && !a.Delete {
			p.count(MetricActions, string(a.Rule))
			p.log.Info("scale-down action", "rule", string(a.Rule), "reason", a.Reason, "pool", a.Pool, "runner_name", a.Runner,
				"instance_id", a.InstanceID, "job_id", a.JobID, "ended", true)
			p.mu.Lock()
			p.rep.Actions[a.Rule]++
			p.mu.Unlock()
		}
	})
}

func splitRepo(full string) (string, string) {
	o, r, _ := strings.Cut(full, "/")
	return o, r
}

// recordedSince reports whether a runner the pass found no record of has
// one now (Action.ConfirmUnrecorded): a runner registered after the pass
// read the ledger (and launched after it listed the instances) looks like
// a ghost to it. One ledger read per such action keeps the pass from
// deleting the registration the new runner is about to use; a failed read
// keeps the runner for the next pass too.
func (p *pass) recordedSince(ctx context.Context, name string) bool {
	r, err := p.s.o.Ledger.Runner(ctx, name)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return false
	case err != nil:
		p.fail("reading a ghost's record", err, "runner_name", name)
		return true
	case r.State.Live():
		p.log.Info("runner was reserved after the pass read the ledger: not a ghost", "runner_name", name)
		return true
	}
	return false
}
