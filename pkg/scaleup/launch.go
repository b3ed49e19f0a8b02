package scaleup

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/scaler"
	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/userdata"
)

// groupKey is equal for jobs that can share one launch: same pool, same
// launch spec, same registration scope and labels.
func (s *Service) groupKey(w *work) string {
	sp := w.spec
	scope := w.job.Owner
	if s.o.Scope == ScopeRepo {
		scope = w.job.Repository
	}
	req, _ := json.Marshal(sp.Requirements)
	return strings.Join([]string{
		sp.Pool, strings.ToLower(scope), strings.Join(sp.Labels, ","), strings.Join(sp.InstanceTypes, ","),
		string(req), string(sp.Capacity), strconv.Itoa(sp.DiskGiB), sp.Image.String(), strings.Join(sp.Subnets, ","),
		sp.RunnerGroup, strconv.FormatInt(w.job.InstallationID, 10),
	}, "\x00")
}

// launch reserves runners, groups the jobs and launches each group.
func (s *Service) launch(ctx context.Context, items []*work, now time.Time) {
	if len(items) == 0 {
		return
	}
	// Reserve per pool, in order of first appearance: one write per pool.
	var pools []string
	byPool := map[string][]*work{}
	for _, w := range items {
		if byPool[w.spec.Pool] == nil {
			pools = append(pools, w.spec.Pool)
		}
		byPool[w.spec.Pool] = append(byPool[w.spec.Pool], w)
	}
	var admitted []*work
	for _, p := range pools {
		ws := byPool[p]
		granted, err := s.o.Launches.ReserveRunners(ctx, p, len(ws), ws[0].spec.MaxRunners)
		if err != nil {
			s.o.Logger.Error("reserving runners", "pool", p, "err", err)
			for _, w := range ws {
				w.finish(scaler.OutcomeRetry, "store")
			}
			continue
		}
		n, _ := scaler.Admit(len(ws), granted)
		admitted = append(admitted, ws[:n]...)
		for _, w := range ws[n:] {
			w.log.Info("pool is at its max runners; retrying later", "max_runners", w.spec.MaxRunners)
			w.finish(scaler.OutcomeRetry, "max_runners")
		}
	}
	keys := make([]string, len(admitted))
	for i, w := range admitted {
		keys[i] = w.key
	}
	var wg sync.WaitGroup
	for _, g := range scaler.Group(keys, s.o.MaxFleetSize) {
		ws := make([]*work, len(g))
		for i, idx := range g {
			ws[i] = admitted[idx]
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.launchGroup(ctx, ws, now)
		}()
	}
	wg.Wait()
	// Give back what did not launch: one write per pool with a shortfall.
	unused := map[string]int{}
	for _, w := range admitted {
		if w.instance == "" {
			unused[w.spec.Pool]++
		}
	}
	for _, p := range pools {
		if n := unused[p]; n > 0 {
			if err := s.o.Launches.ReleaseRunners(ctx, p, n); err != nil {
				s.o.Logger.Error("releasing unused runner reservations", "pool", p, "count", n, "err", err)
			}
		}
	}
}

// launchGroup claims, registers and launches jobs that share one launch.
func (s *Service) launchGroup(ctx context.Context, ws []*work, now time.Time) {
	spec := ws[0].spec
	sort.Slice(ws, func(i, j int) bool { return ws[i].job.JobID < ws[j].job.JobID })
	planned := make([]store.FleetMember, len(ws))
	for i, w := range ws {
		planned[i] = store.FleetMember{JobID: w.job.JobID, Attempt: w.decision.Attempt}
	}
	token := scaler.Token(spec.Pool, planned)
	log := s.o.Logger.With("pool", spec.Pool, "fleet_token", token)

	claimed := s.claim(ctx, ws, token, now)
	if len(claimed) == 0 {
		return
	}
	// Registrations, in parallel (one GitHub call each in JIT mode).
	sem := make(chan struct{}, registrationConcurrency)
	var wg sync.WaitGroup
	for _, w := range claimed {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			s.register(ctx, w)
		}()
	}
	wg.Wait()
	var members []*work
	fleet := store.Fleet{Token: token, Pool: spec.Pool, CreatedAt: now, ExpiresAt: now.Add(s.o.ClaimTTL)}
	for _, w := range claimed {
		if !w.finished {
			members = append(members, w)
			fleet.Members = append(fleet.Members, store.FleetMember{JobID: w.job.JobID, Attempt: w.decision.Attempt})
		}
	}
	if len(members) == 0 {
		// Settle the claims: the next delivery starts a new attempt at once.
		fleet.State, fleet.Reason = store.FleetDone, "registration"
		if err := s.o.Launches.PutFleet(ctx, fleet); err != nil {
			log.Error("recording the unlaunched fleet", "err", err)
		}
		return
	}

	l := provider.Launch{Token: token, Spec: spec, Runners: make([]provider.Runner, len(members))}
	regs := make([]userdata.Registration, len(members))
	for i, w := range members {
		l.Runners[i] = provider.Runner{Name: scaler.RunnerName(w.job.JobID, w.gen), JobID: w.job.JobID, RunID: w.job.RunID,
			Repository: w.job.Repository, Owner: w.job.Owner}
		regs[i] = w.reg
	}
	plan, err := s.o.Provider.Plan(ctx, l)
	if err != nil {
		log.Error("planning the launch", "err", err)
		s.fail(members, err)
		return
	}
	fleet.State, fleet.Plan = store.FleetIntent, string(plan)
	if err := s.o.Launches.PutFleet(ctx, fleet); err != nil {
		// A concurrent invocation that planned the same jobs at the same
		// attempts derived the same token and recorded its fleet first: it
		// owns the token. These jobs are not its members, so their next
		// delivery starts a new attempt.
		reason := "store"
		if errors.Is(err, store.ErrConflict) {
			reason = "claim_conflict"
		}
		log.Warn("recording the fleet's intent", "err", err, "reason", reason)
		for _, w := range members {
			w.finish(scaler.OutcomeRetry, reason)
		}
		return
	}

	res, err := s.o.Provider.Launch(ctx, plan, regs)
	launched := s.o.Now()
	instances := make([]string, len(members))
	if err != nil {
		log.Error("launching", "err", err, "reason", launchReason(err))
		if ferr := s.o.Launches.FinishFleet(ctx, token, instances, launchReason(err)); ferr != nil {
			log.Error("recording the failed fleet", "err", ferr)
		}
		s.fail(members, err)
		return
	}
	if res.FellBack {
		s.o.Counter.Count(MetricFallbacks, spec.Pool)
	}
	var reason string
	for i, r := range res.Runners {
		if i >= len(members) {
			break
		}
		if r.Err == nil {
			instances[i] = r.Instance.ID
		} else if reason == "" {
			reason = launchReason(r.Err)
		}
	}
	if err := s.o.Launches.FinishFleet(ctx, token, instances, reason); err != nil {
		// The claims' lease will end and a later delivery recovers the fleet.
		log.Error("recording the launched fleet", "err", err)
	}
	for i, w := range members {
		if instances[i] == "" {
			rerr := errors.New("the provider returned no answer for the runner")
			if i < len(res.Runners) && res.Runners[i].Err != nil {
				rerr = res.Runners[i].Err
			}
			w.log.Warn("the job's runner did not launch", "reason", launchReason(rerr), "err", rerr)
			s.fail([]*work{w}, rerr)
			continue
		}
		w.instance = instances[i]
		latency := launched.Sub(w.job.ReceivedAt)
		s.o.Counter.Count(MetricLaunched, spec.Pool)
		s.o.Timings.Observe(MetricLaunchLatency, spec.Pool, latency)
		w.log.Info("runner launched", "instance_id", w.instance, "launch_latency_ms", latency.Milliseconds(), "fell_back", res.FellBack)
		w.finish(scaler.OutcomeLaunched, "launched")
	}
}

// claim takes each job's launch claim (a conditional write per job) before
// any GitHub or provider call, and returns the jobs claimed.
func (s *Service) claim(ctx context.Context, ws []*work, token string, now time.Time) []*work {
	var claimed []*work
	for _, w := range ws {
		w.gen = w.decision.PrevGen + 1
		c := store.LaunchClaim{
			JobID: w.job.JobID, Attempt: w.decision.Attempt, Gen: w.gen, Token: token, Pool: w.spec.Pool,
			LeaseUntil: now.Add(s.o.ClaimLease), UpdatedAt: now, ExpiresAt: now.Add(s.o.ClaimTTL),
		}
		err := s.o.Launches.ClaimLaunch(ctx, c, w.decision.PrevGen, now)
		switch {
		case errors.Is(err, store.ErrConflict):
			s.o.Counter.Count(MetricDuplicates, "claim_conflict")
			w.log.Info("another invocation claimed the job first")
			w.finish(scaler.OutcomeRetry, "claim_conflict")
		case err != nil:
			w.log.Error("claiming the job", "err", err)
			w.finish(scaler.OutcomeRetry, "store")
		default:
			w.log = w.log.With("attempt", c.Attempt, "runner_name", scaler.RunnerName(w.job.JobID, w.gen))
			claimed = append(claimed, w)
		}
	}
	return claimed
}

// fail finishes jobs whose launch failed with a provider error: a
// permanent one (an invalid request, a zero quota) is dead-lettered at
// once with the operator's detail, the rest retried.
func (s *Service) fail(ws []*work, err error) {
	outcome := scaler.OutcomeRetry
	if provider.Permanent(err) {
		outcome = scaler.OutcomePermanent
	}
	for _, w := range ws {
		w.finish(outcome, launchReason(err))
		w.detail = provider.Detail(err)
	}
}
