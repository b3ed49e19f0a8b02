package scaleup

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/scaleup/decide"
	"github.com/skiffci/skiff/pkg/store"
)

// groupKey is equal for jobs that can share one launch: same pool, same
// launch spec, same registration scope and labels.
func (s *Service) groupKey(w *work) string {
	sp := w.spec
	scope := w.job.Owner
	if s.o.Scope == ScopeRepo {
		scope = w.job.Repository
	}
	// The backend's part and the sizes, whatever the backend: plain data
	// whose encoding (map keys sorted) is equal exactly when they are.
	part, _ := json.Marshal(struct {
		EC2        *pool.EC2
		Slurm      *pool.Slurm
		Kubernetes *pool.Kubernetes
		Sizes      pool.Sizes
	}{sp.EC2, sp.Slurm, sp.Kubernetes, sp.Sizes})
	return strings.Join([]string{
		sp.Pool, strings.ToLower(scope), strings.Join(sp.Labels, ","), string(part),
		sp.RunnerGroup, strconv.FormatInt(w.job.InstallationID, 10),
	}, "\x00")
}

// launch groups the jobs and launches each group; what did not launch
// gives its reservation back.
func (s *Service) launch(ctx context.Context, items []*work, now time.Time) {
	if len(items) == 0 {
		return
	}
	keys := make([]string, len(items))
	s.markWarm(ctx, items)
	for i, w := range items {
		w.gen = w.decision.PrevGen + 1
		w.runner = s.runnerName(w.job.JobID, w.gen)
		keys[i] = w.key
		if w.tryWarm {
			keys[i] = warmGroupKey(w.key, i)
		}
	}
	groups := decide.Group(keys, s.o.MaxLaunchSize)
	s.o.Executor.Run(len(groups), 0, func(gi int) {
		ws := make([]*work, len(groups[gi]))
		for i, idx := range groups[gi] {
			ws[i] = items[idx]
		}
		s.launchGroup(ctx, ws, now)
	})
	// Give back what did not launch, unless its launch may yet have happened.
	for _, w := range items {
		s.dropWarm(ctx, w)
		if w.instance == "" && !w.keep {
			s.release(ctx, w, "not_launched")
		}
	}
}

// reserve takes the claimed jobs' runners into the ledger within the
// pool's maxRunners (one ledger write) and returns those admitted; the rest
// are retried. It runs after the claims, so that the runner names it
// reserves belong to this invocation alone.
func (s *Service) reserve(ctx context.Context, claimed []*work, now time.Time) []*work {
	pool := claimed[0].spec.Pool
	for _, w := range claimed {
		if w.tryWarm {
			s.takeWarm(ctx, w, now)
		}
	}
	// Those that took a warm machine first: each fits in the room its
	// machine's record left.
	sort.SliceStable(claimed, func(i, j int) bool { return claimed[i].warm != nil && claimed[j].warm == nil })
	rs := make([]ledger.Runner, len(claimed))
	for i, w := range claimed {
		rs[i] = ledger.Runner{Name: w.runner, Pool: pool, JobID: w.job.JobID, RunID: w.job.RunID, Attempt: w.decision.Attempt,
			ReservedAt: now}
	}
	granted, err := s.o.Ledger.Reserve(ctx, pool, claimed[0].spec.MaxRunners, rs)
	if err != nil {
		s.o.Logger.Error("reserving runners", "pool", pool, "err", err)
		for _, w := range claimed {
			w.finish(decide.OutcomeRetry, "store")
		}
		return nil
	}
	n, _ := decide.Admit(len(claimed), granted)
	for _, w := range claimed[:n] {
		w.reserved = true
	}
	for _, w := range claimed[n:] {
		w.log.Info("pool is at its max runners; retrying later", "max_runners", w.spec.MaxRunners)
		w.finish(decide.OutcomeRetry, "max_runners")
	}
	return claimed[:n]
}

// release ends a reservation that did not become a runner; repeated ends
// change nothing, so a release after a crash is safe.
func (s *Service) release(ctx context.Context, w *work, reason string) {
	if !w.reserved {
		return
	}
	if _, err := s.o.Ledger.End(ctx, w.runner, s.o.Now(), reason); err != nil && !errors.Is(err, store.ErrNotFound) {
		// The reconciler ends reservations that outlive their claim's lease.
		w.log.Error("releasing the runner's reservation", "err", err)
	}
	w.reserved = false
}

// launchGroup claims, registers and launches jobs that share one launch.
func (s *Service) launchGroup(ctx context.Context, ws []*work, now time.Time) {
	spec := ws[0].spec
	sort.Slice(ws, func(i, j int) bool { return ws[i].job.JobID < ws[j].job.JobID })
	planned := make([]ledger.Member, len(ws))
	for i, w := range ws {
		planned[i] = ledger.Member{JobID: w.job.JobID, Attempt: w.decision.Attempt}
	}
	token := decide.Token(s.o.Deployment, spec.Pool, planned)
	log := s.o.Logger.With("pool", spec.Pool, "launch_token", token)

	members, rec := s.admitGroup(ctx, log, ws, token, now)
	if len(members) == 0 || !s.leaseLeft(log, members) {
		return
	}
	if len(members) == 1 && members[0].warm != nil && s.handWarm(ctx, log, members[0], rec) {
		return
	}
	plan, ok := s.intend(ctx, log, members, rec)
	if !ok {
		return
	}
	regs := make([]provider.Registration, len(members))
	for i, w := range members {
		regs[i] = w.reg
	}
	res, err := s.callProvider(ctx, log, plan, regs, members[0].leaseEnd)
	s.recordLaunch(ctx, log, spec, token, members, res, err)
}

// admitGroup takes the group's claims, reserves their runners within the
// pool's maxRunners and registers them, and returns the jobs that go on to
// the launch with its record as planned. When none does and this
// invocation holds every claim of the group, it ends the claims.
func (s *Service) admitGroup(ctx context.Context, log *slog.Logger, ws []*work, token string, now time.Time) ([]*work, ledger.Launch) {
	rec := ledger.Launch{Token: token, Pool: ws[0].spec.Pool, CreatedAt: now, ExpiresAt: now.Add(s.o.ClaimTTL)}
	claimed := s.claim(ctx, ws, token, now)
	// The token derives from the jobs and attempts alone, so an invocation
	// that lost a claim shares it with the one that won: only one that
	// holds every claim of the group may end it.
	own := len(claimed) == len(ws)
	if len(claimed) > 0 {
		claimed = s.reserve(ctx, claimed, now)
	}
	if len(claimed) == 0 {
		if own {
			// End the claims: the next delivery starts a new attempt at once.
			s.recordEmptyLaunch(ctx, log, token, ws, now, "not_admitted")
		}
		return nil, rec
	}
	// Registrations, in parallel (one GitHub call each in JIT mode).
	s.o.Executor.Run(len(claimed), registrationConcurrency, func(i int) { s.register(ctx, claimed[i]) })
	var members []*work
	for _, w := range claimed {
		if !w.finished {
			members = append(members, w)
			rec.Members = append(rec.Members, ledger.Member{JobID: w.job.JobID, Attempt: w.decision.Attempt})
		}
	}
	if len(members) == 0 && own {
		s.recordEmptyLaunch(ctx, log, token, ws, now, "registration")
	}
	return members, rec
}

// leaseLeft reports whether the members' claims leave time to launch. An
// invocation that stalled (registrations, a slow GitHub) past the point
// where it could still finish within its lease refuses the work: another
// may take the jobs over when the lease ends.
func (s *Service) leaseLeft(log *slog.Logger, members []*work) bool {
	left := members[0].leaseEnd.Sub(s.o.Now())
	if left >= s.o.LaunchBudget {
		return true
	}
	log.Warn("too little of the claim's lease is left to launch; leaving the jobs to the next delivery",
		"lease_left_ms", left.Milliseconds(), "budget_ms", s.o.LaunchBudget.Milliseconds())
	for _, w := range members {
		w.finish(decide.OutcomeRetry, "lease_expired")
	}
	return false
}

// intend plans the members' launch with the provider and records the
// launch's intent under its token; false when the members are finished
// (the plan failed, or the intent could not be recorded).
func (s *Service) intend(ctx context.Context, log *slog.Logger, members []*work, rec ledger.Launch) (provider.Plan, bool) {
	l := provider.Launch{Token: rec.Token, Spec: members[0].spec, Runners: make([]provider.RunnerRequest, len(members))}
	for i, w := range members {
		l.Runners[i] = provider.RunnerRequest{Name: w.runner, JobID: w.job.JobID, RunID: w.job.RunID,
			Repository: w.job.Repository, Owner: w.job.Owner}
	}
	plan, err := s.o.Provider.Plan(ctx, l)
	if err != nil {
		log.Error("planning the launch", "err", err)
		s.fail(members, err)
		return "", false
	}
	rec.State, rec.Plan = ledger.LaunchIntent, string(plan)
	if err := s.o.Launches.PutLaunch(ctx, rec); err != nil {
		// A concurrent invocation that planned the same jobs at the same
		// attempts derived the same token and recorded its launch first: it
		// owns the token. These jobs are not its members, so their next
		// delivery starts a new attempt.
		reason := "store"
		if errors.Is(err, store.ErrConflict) {
			reason = "claim_conflict"
		}
		log.Warn("recording the launch's intent", "err", err, "reason", reason)
		for _, w := range members {
			w.finish(decide.OutcomeRetry, reason)
		}
		return "", false
	}
	return plan, true
}

// callProvider launches the plan within the claims' lease (a timeout from
// the service's clock, which tests inject, not a deadline on the wall
// clock: past the lease another invocation may recover the launch). The
// answer may be lost after the launch happened: it asks once more with the
// same plan, whose token makes the provider answer with what it launched
// then and deliver the registrations to those instances.
func (s *Service) callProvider(ctx context.Context, log *slog.Logger, plan provider.Plan, regs []provider.Registration,
	leaseEnd time.Time) (provider.Result, error) {
	lctx, cancel := context.WithTimeout(ctx, leaseEnd.Sub(s.o.Now()))
	defer cancel()
	res, err := s.o.Provider.Launch(lctx, plan, regs)
	if err != nil && !answered(err) && lctx.Err() == nil {
		log.Warn("launching: no answer; asking again with the same plan", "err", err)
		res, err = s.o.Provider.Launch(lctx, plan, regs)
	}
	return res, err
}

// recordLaunch records the launch's outcome: a failed launch finished and
// its members failed with the provider's reason, a launch finished
// (finishLaunched), or, when the outcome is unknown, the launch left in
// intent for recovery.
func (s *Service) recordLaunch(ctx context.Context, log *slog.Logger, spec pool.Spec, token string, members []*work,
	res provider.Result, err error) {
	launched := s.o.Now()
	if err != nil && !answered(err) {
		// The provider may have launched (its answer was lost, or a server
		// error): the launch stays in intent, so that recovery replays the same
		// plan and token after the lease instead of launching anew.
		log.Error("launching: the outcome is unknown; recovery will replay the plan after the lease", "err", err)
		for _, w := range members {
			w.keep = true
			w.finish(decide.OutcomeWait, "launch_unknown")
		}
		return
	}
	if err != nil {
		log.Error("launching", "err", err, "reason", launchReason(err))
		if ferr := s.o.Launches.FinishLaunch(ctx, token, make([]string, len(members)), launchReason(err)); ferr != nil {
			log.Error("recording the failed launch", "err", ferr)
		}
		s.fail(members, err)
		return
	}
	s.finishLaunched(ctx, log, spec, token, members, res, launched)
}

// finishLaunched records the instances the provider launched: each in its
// runner's ledger record, the launch finished with them, each member
// launched, or failed with the provider's reason for its runner.
func (s *Service) finishLaunched(ctx context.Context, log *slog.Logger, spec pool.Spec, token string, members []*work,
	res provider.Result, launched time.Time) {
	if res.FellBack {
		s.o.Counter.Count(MetricFallbacks, spec.Pool)
	}
	instances := make([]string, len(members))
	var reason string
	for i, r := range res.Runners {
		if i >= len(members) {
			break
		}
		if r.Err == nil {
			instances[i] = r.Instance.ID
			s.recordLaunched(ctx, members[i].runner, members[i].log, r.Instance, ledger.StartCold)
		} else if reason == "" {
			reason = launchReason(r.Err)
		}
	}
	if err := s.o.Launches.FinishLaunch(ctx, token, instances, reason); err != nil {
		// The claims' lease will end and a later delivery recovers the launch.
		log.Error("recording the launch's instances", "err", err)
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
		w.finish(decide.OutcomeLaunched, "launched")
	}
}

// recordEmptyLaunch records a launch done with nothing launched, for jobs whose claims name
// it: the next delivery of each starts a new attempt at once instead of
// waiting for the lease (a failed write only costs that wait). Only the
// holder of every claim of the group records it: the record has no members,
// so the store's claim fence does not stop it from spoiling another
// invocation's intent under the same token.
func (s *Service) recordEmptyLaunch(ctx context.Context, log *slog.Logger, token string, ws []*work, now time.Time, reason string) {
	rec := ledger.Launch{Token: token, Pool: ws[0].spec.Pool, State: ledger.LaunchDone, Reason: reason, CreatedAt: now,
		ExpiresAt: now.Add(s.o.ClaimTTL)}
	if err := s.o.Launches.PutLaunch(ctx, rec); err != nil && !errors.Is(err, store.ErrConflict) {
		log.Error("recording the empty launch", "err", err)
	}
}

// claim takes each job's launch claim (a conditional write per job) before
// any GitHub or provider call, and returns the jobs claimed.
func (s *Service) claim(ctx context.Context, ws []*work, token string, now time.Time) []*work {
	var claimed []*work
	for _, w := range ws {
		c := ledger.Claim{
			JobID: w.job.JobID, Attempt: w.decision.Attempt, Gen: w.gen, Token: token, Pool: w.spec.Pool,
			LeaseUntil: now.Add(s.o.ClaimLease), UpdatedAt: now, ExpiresAt: now.Add(s.o.ClaimTTL),
		}
		err := s.o.Launches.ClaimLaunch(ctx, c, w.decision.PrevGen, now)
		switch {
		case errors.Is(err, store.ErrConflict):
			s.o.Counter.Count(MetricDuplicates, "claim_conflict")
			w.log.Info("another invocation claimed the job first")
			w.finish(decide.OutcomeRetry, "claim_conflict")
		case err != nil:
			w.log.Error("claiming the job", "err", err)
			w.finish(decide.OutcomeRetry, "store")
		default:
			w.log = w.log.With("attempt", c.Attempt, "runner_name", w.runner)
			w.leaseEnd = c.LeaseUntil
			claimed = append(claimed, w)
		}
	}
	return claimed
}

// answered reports whether a provider error is the backend's answer (no
// capacity, a quota, an invalid request, throttling: nothing was launched),
// as opposed to a lost answer or a server error, after which the launch may
// or may not have happened.
func answered(err error) bool {
	return errors.Is(err, provider.ErrCapacity) || errors.Is(err, provider.ErrQuota) ||
		errors.Is(err, provider.ErrInvalid) || errors.Is(err, provider.ErrThrottled)
}

// recordLaunched writes the runner's instance into its ledger record. A
// failure is logged: the instance is tagged with the runner's name, so the
// reconciler links them.
func (s *Service) recordLaunched(ctx context.Context, runner string, log *slog.Logger, in provider.Instance, kind string) {
	err := s.o.Ledger.Launched(ctx, runner, ledger.LaunchReport{InstanceID: in.ID, InstanceType: in.InstanceType, Zone: in.Zone,
		Spot: in.Capacity == provider.Spot, StartKind: kind, At: in.LaunchedAt})
	if err != nil {
		log.Error("recording the runner's instance in the ledger", "runner_name", runner, "instance_id", in.ID, "err", err)
	}
}

// fail finishes jobs whose launch failed with a provider error: a
// permanent one (an invalid request, a zero quota) is dead-lettered at
// once with the operator's detail, the rest retried.
func (s *Service) fail(ws []*work, err error) {
	outcome := decide.OutcomeRetry
	if provider.Permanent(err) {
		outcome = decide.OutcomePermanent
	}
	for _, w := range ws {
		w.finish(outcome, launchReason(err))
		w.detail = provider.Detail(err)
	}
}
