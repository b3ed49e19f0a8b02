package scaleup

import (
	"context"
	"errors"
	"github.com/skiffci/skiff/pkg/ledger"
	"time"

	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/scaleup/decide"
	"github.com/skiffci/skiff/pkg/store"
)

// decide reads the jobs' claims and the launches they name, and finishes the
// jobs that are launched or in flight; it recovers crashed launches.
func (s *Service) decide(ctx context.Context, items []*work, now time.Time) {
	if len(items) == 0 {
		return
	}
	ids := make([]int64, len(items))
	for i, w := range items {
		ids[i] = w.job.JobID
	}
	claims, err := s.o.Launches.LaunchClaims(ctx, ids, now)
	if err != nil {
		s.o.Logger.Error("reading launch claims", "err", err)
		for _, w := range items {
			w.finish(decide.OutcomeRetry, "store")
		}
		return
	}
	launches := map[string]*ledger.Launch{}
	recover := map[string][]*work{}
	for _, w := range items {
		c, ok := claims[w.job.JobID]
		if !ok {
			w.decision = decide.DecideClaim(w.job.JobID, nil, nil, now)
			continue
		}
		w.claim = &c
		f, known := launches[c.Token]
		if !known {
			got, err := s.o.Launches.Launch(ctx, c.Token, now)
			switch {
			case err == nil:
				f = &got
			case errors.Is(err, store.ErrNotFound):
			default:
				w.log.Error("reading launch", "err", err)
				w.finish(decide.OutcomeRetry, "store")
				continue
			}
			launches[c.Token] = f
		}
		w.decision = decide.DecideClaim(w.job.JobID, w.claim, f, now)
		switch w.decision.Action {
		case decide.Launched:
			s.o.Counter.Count(MetricDuplicates, "launched")
			w.log.Info("job already has its runner", "instance_id", w.decision.Instance, "attempt", c.Attempt)
			w.finish(decide.OutcomeLaunched, "duplicate")
		case decide.InFlight:
			s.o.Counter.Count(MetricDuplicates, "in_flight")
			w.log.Info("job is being launched by another invocation", "attempt", c.Attempt)
			w.finish(decide.OutcomeWait, "in_flight")
		case decide.Recover:
			recover[c.Token] = append(recover[c.Token], w)
		case decide.NextAttempt:
			s.supersede(ctx, w)
		}
	}
	for token, ws := range recover {
		s.recoverLaunch(ctx, launches[token], ws, now)
	}
}

// recoverLaunch ends a launch recorded by an invocation that died before
// finishing it. Replaying its plan (without registrations) makes the
// provider answer with what it launched then: the instances still alive
// that had their registration. The launch is then done, and its members are
// decided again. A plan the provider refuses as invalid launched nothing.
func (s *Service) recoverLaunch(ctx context.Context, f *ledger.Launch, ws []*work, now time.Time) {
	log := s.o.Logger.With("launch_token", f.Token, "pool", f.Pool)
	instances := make([]string, len(f.Members))
	res, err := s.o.Provider.Launch(ctx, provider.Plan(f.Plan), nil)
	switch {
	case err != nil && provider.Permanent(err):
		log.Error("the crashed invocation's plan cannot be replayed; ending the launch with nothing launched", "err", err)
	case err != nil:
		log.Warn("replaying the launch of a crashed invocation", "err", err)
		for _, w := range ws {
			w.finish(decide.OutcomeRetry, launchReason(err))
		}
		return
	default:
		byJob := map[int64]*work{}
		for _, w := range ws {
			byJob[w.job.JobID] = w
		}
		gens := s.memberGens(ctx, f, byJob, now)
		for i, r := range res.Runners {
			if i >= len(instances) {
				break
			}
			switch job := f.Members[i].JobID; {
			case r.Err == nil:
				instances[i] = r.Instance.ID
				if gens[job] > 0 {
					s.recordLaunched(ctx, s.runnerName(job, gens[job]), log, r.Instance, ledger.StartCold)
				}
			default:
				job := f.Members[i].JobID
				if id, ok := s.ran(ctx, job, gens[job]); ok {
					log.Info("the job's runner ran and ended; not launching again", "job_id", job, "ran_on", id)
					instances[i] = id
					// Its instance is gone: the runner leaves the pool's count
					// (a state-change event may have come before the ledger knew
					// the instance).
					name := s.runnerName(job, gens[job])
					if _, err := s.o.Ledger.End(ctx, name, s.o.Now(), "ran"); err != nil && !errors.Is(err, store.ErrNotFound) {
						log.Error("ending the runner that ran", "runner_name", name, "err", err)
					}
				}
			}
		}
	}
	if err := s.o.Launches.FinishLaunch(ctx, f.Token, instances, "recovered"); err != nil {
		log.Error("finishing the recovered launch", "err", err)
		for _, w := range ws {
			w.finish(decide.OutcomeRetry, "store")
		}
		return
	}
	s.o.Counter.Count(MetricRecovered, f.Pool)
	log.Warn("recovered the launch of a crashed invocation", "instances", instances)
	done := *f
	done.State, done.Instances = ledger.LaunchDone, instances
	for _, w := range ws {
		w.decision = decide.DecideClaim(w.job.JobID, w.claim, &done, now)
		switch w.decision.Action {
		case decide.Launched:
			s.o.Counter.Count(MetricDuplicates, "launched")
			w.finish(decide.OutcomeLaunched, "recovered")
		case decide.NextAttempt:
			s.supersede(ctx, w)
		}
	}
}

// memberGens returns the claim generation of every member of the launch:
// from the batch's claims, and one read for members outside the batch.
func (s *Service) memberGens(ctx context.Context, f *ledger.Launch, byJob map[int64]*work, now time.Time) map[int64]int {
	gens := map[int64]int{}
	var others []int64
	for _, m := range f.Members {
		if w := byJob[m.JobID]; w != nil {
			gens[m.JobID] = w.claim.Gen
		} else {
			others = append(others, m.JobID)
		}
	}
	if len(others) > 0 {
		claims, err := s.o.Launches.LaunchClaims(ctx, others, now)
		if err != nil {
			s.o.Logger.Warn("reading the claims of a recovered launch's other members", "launch_token", f.Token, "err", err)
		}
		for id, c := range claims {
			if c.Token == f.Token {
				gens[id] = c.Gen
			}
		}
	}
	return gens
}

// supersede ends the reservation of the claim's previous runner, which
// never became a runner (its launch says so, or it never reached the
// provider), before the job's next attempt reserves a new one.
func (s *Service) supersede(ctx context.Context, w *work) {
	name := s.runnerName(w.job.JobID, w.claim.Gen)
	if _, err := s.o.Ledger.End(ctx, name, s.o.Now(), "superseded"); err != nil && !errors.Is(err, store.ErrNotFound) {
		w.log.Error("ending the previous attempt's reservation", "runner_name", name, "err", err)
	}
}

// ran reports whether a launch member whose instance is not alive had its
// runner all the same — the ledger saw it register or start a job, or the
// job record says the job started — and names the instance or runner that
// ran it. Such a job is not launched again: its runner did its work and
// powered off.
func (s *Service) ran(ctx context.Context, jobID int64, gen int) (string, bool) {
	name := s.runnerName(jobID, gen)
	if r, err := s.o.Ledger.Runner(ctx, name); err == nil && (r.RegisteredAt != time.Time{} || r.StartedAt != time.Time{} ||
		r.CompletedAt != time.Time{}) {
		if r.InstanceID != "" {
			return r.InstanceID, true
		}
		return name, true
	}
	if j, err := s.o.Jobs.Job(ctx, jobID); err == nil && j.Status >= store.StatusInProgress {
		if j.RunnerName != "" {
			return j.RunnerName, true
		}
		return name, true
	}
	return "", false
}

// launchReason is the reason of a provider failure: launch_ and its kind
// (launch_capacity, launch_quota, launch_invalid, launch_throttled,
// launch_transient).
func launchReason(err error) string { return "launch_" + provider.Reason(err) }
