package scaleup

import (
	"context"
	"errors"
	"time"

	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/scaler"
	"github.com/skiffci/skiff/pkg/store"
)

// decide reads the jobs' claims and the fleets they name, and finishes the
// jobs that are launched or in flight; it recovers crashed fleets.
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
			w.finish(scaler.OutcomeRetry, "store")
		}
		return
	}
	fleets := map[string]*store.Fleet{}
	recover := map[string][]*work{}
	for _, w := range items {
		c, ok := claims[w.job.JobID]
		if !ok {
			w.decision = scaler.DecideClaim(w.job.JobID, nil, nil, now)
			continue
		}
		w.claim = &c
		f, known := fleets[c.Token]
		if !known {
			got, err := s.o.Launches.Fleet(ctx, c.Token, now)
			switch {
			case err == nil:
				f = &got
			case errors.Is(err, store.ErrNotFound):
			default:
				w.log.Error("reading fleet", "err", err)
				w.finish(scaler.OutcomeRetry, "store")
				continue
			}
			fleets[c.Token] = f
		}
		w.decision = scaler.DecideClaim(w.job.JobID, w.claim, f, now)
		switch w.decision.Action {
		case scaler.Launched:
			s.o.Counter.Count(MetricDuplicates, "launched")
			w.log.Info("job already has its runner", "instance_id", w.decision.Instance, "attempt", c.Attempt)
			w.finish(scaler.OutcomeLaunched, "duplicate")
		case scaler.InFlight:
			s.o.Counter.Count(MetricDuplicates, "in_flight")
			w.log.Info("job is being launched by another invocation", "attempt", c.Attempt)
			w.finish(scaler.OutcomeRetry, "in_flight")
		case scaler.Recover:
			recover[c.Token] = append(recover[c.Token], w)
		}
	}
	for token, ws := range recover {
		s.recoverFleet(ctx, fleets[token], ws, now)
	}
}

// recoverFleet settles a fleet recorded by an invocation that died before
// finishing it. Replaying its plan (without registrations) makes the
// provider answer with what it launched then: the instances still alive
// that had their registration. The fleet is then done, and its members are
// decided again. A plan the provider refuses as invalid launched nothing.
func (s *Service) recoverFleet(ctx context.Context, f *store.Fleet, ws []*work, now time.Time) {
	log := s.o.Logger.With("fleet_token", f.Token, "pool", f.Pool)
	instances := make([]string, len(f.Members))
	res, err := s.o.Provider.Launch(ctx, provider.Plan(f.Plan), nil)
	switch {
	case err != nil && provider.Permanent(err):
		log.Error("the crashed invocation's plan cannot be replayed; settling the fleet as not launched", "err", err)
	case err != nil:
		log.Warn("replaying the fleet of a crashed invocation", "err", err)
		for _, w := range ws {
			w.finish(scaler.OutcomeRetry, launchReason(err))
		}
		return
	default:
		for i, r := range res.Runners {
			if i < len(instances) && r.Err == nil {
				instances[i] = r.Instance.ID
			}
		}
	}
	if err := s.o.Launches.FinishFleet(ctx, f.Token, instances, "recovered"); err != nil {
		log.Error("finishing the recovered fleet", "err", err)
		for _, w := range ws {
			w.finish(scaler.OutcomeRetry, "store")
		}
		return
	}
	s.o.Counter.Count(MetricRecovered, f.Pool)
	log.Warn("recovered the fleet of a crashed invocation", "instances", instances)
	done := *f
	done.State, done.Instances = store.FleetDone, instances
	for _, w := range ws {
		w.decision = scaler.DecideClaim(w.job.JobID, w.claim, &done, now)
		if w.decision.Action == scaler.Launched {
			s.o.Counter.Count(MetricDuplicates, "launched")
			w.finish(scaler.OutcomeLaunched, "recovered")
		}
	}
}

// launchReason is the reason of a provider failure: launch_ and its kind
// (launch_capacity, launch_quota, launch_invalid, launch_throttled,
// launch_transient).
func launchReason(err error) string { return "launch_" + provider.Reason(err) }
