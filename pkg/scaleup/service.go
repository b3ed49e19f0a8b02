// Package scaleup turns queued workflow jobs into just-in-time EC2 runners,
// exactly once per job: the service behind functions/scaleup.
//
// One SQS batch is handled as follows:
//
//	decode (drop what cannot be decoded) ─► dedupe by job id ─► resolve the
//	launch spec (skip with a reason) ─► optional "still queued?" check (fails
//	open) ─► read the jobs' launch claims (one read) and decide per job
//	(scaler.DecideClaim) ─► reserve runners per pool within max (one write
//	per pool) ─► group jobs that can share a fleet ─► per group: claim each
//	job (conditional write), create its registration (JIT config, or the
//	cached registration token), record the fleet's intent, CreateFleet with
//	a token from job ids + attempts, write one registration item per
//	instance, record the fleet done, tag each instance of a shared fleet
//	with its own job (best effort) ─► every job ends launched, skipped,
//	retried (batch item failure) or dead-lettered with its reason.
//
// Never two instances for one job: a concurrent duplicate loses the claim
// (or finds it live and is retried later); a late duplicate finds the fleet
// done and is dropped; a delivery after a crash replays the recorded fleet
// with the same token, so EC2 answers with the instances it launched before
// instead of launching again (see Recover in package scaler). A registration
// created by an invocation that died before launching is left for the
// reaper.
package scaleup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/skiffci/skiff/pkg/ec2"
	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/queue"
	"github.com/skiffci/skiff/pkg/scaler"
	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/telemetry"
	"github.com/skiffci/skiff/pkg/userdata"
)

// Mode is how runners register.
type Mode string

// The registration modes.
const (
	// ModeJIT generates one just-in-time configuration per runner (default):
	// one GitHub call per runner, and the runner can take only this
	// registration's jobs.
	ModeJIT Mode = "jit"
	// ModeToken hands every runner of an owner the same cached registration
	// token, for bursts beyond the JIT endpoint's budget: about one GitHub
	// call per hour per owner.
	ModeToken Mode = "token"
)

// Scope is where runners register.
type Scope string

// The runner scopes.
const (
	ScopeOrg  Scope = "org"  // organization runners (default)
	ScopeRepo Scope = "repo" // repository runners (personal accounts)
)

// Defaults for Options, each with the reason for its value.
const (
	// DefaultMaxAttempts: deliveries of a job before it is dead-lettered.
	// Five covers a few minutes of capacity shortage and throttling, with
	// the queue's visibility timeout between tries.
	DefaultMaxAttempts = 5
	// DefaultMaxFleetSize is the most jobs one CreateFleet asks for: a batch
	// of 10 (SQS's largest without a batching window) is one fleet, and
	// the fleet's job-list tag stays within EC2's 256-character tag values.
	DefaultMaxFleetSize = 10
	// DefaultMaxPlaces caps the overrides (instance types × subnets) of one
	// fleet: enough spot pools for price-capacity-optimized to choose from,
	// and a request that stays small.
	DefaultMaxPlaces = 40
	// DefaultRegistrationTimeout is how long an instance waits for its
	// registration before shutting down (userdata.Params.RegistrationTimeout).
	DefaultRegistrationTimeout = 3 * time.Minute
	// DefaultClaimLease: a claim whose holder died is taken over after this.
	// It exceeds the registration timeout plus boot time, so that when a
	// crashed invocation's fleet is recovered, an instance still alive is
	// one that got its registration (the others shut themselves down).
	DefaultClaimLease = 10 * time.Minute
	// DefaultClaimTTL keeps claims and fleet records beyond SQS's longest
	// message retention (14 days), so a late duplicate still finds them.
	DefaultClaimTTL = 15 * 24 * time.Hour
	// DefaultCapacityMemory is how long a failed capacity pool is skipped:
	// EC2 capacity shortages last minutes, not seconds.
	DefaultCapacityMemory = 3 * time.Minute
	// DefaultRegistrationTTL bounds how long an unread registration stays in
	// the table: the instance's wait plus a slow boot.
	DefaultRegistrationTTL = 15 * time.Minute
	// registrationConcurrency bounds parallel GitHub calls of one group.
	registrationConcurrency = 10
)

// Launcher launches and inspects instances; *ec2.Launcher implements it.
type Launcher interface {
	Launch(ctx context.Context, req ec2.Request) (ec2.Result, error)
	States(ctx context.Context, ids []string) (map[string]ec2.InstanceState, error)
	Terminate(ctx context.Context, ids []string) error
	Tag(ctx context.Context, ids []string, tags map[string]string) error
}

var _ Launcher = (*ec2.Launcher)(nil)

// GitHub is the part of the GitHub client scale-up calls; *github.Client
// implements it (and caches runner group ids and registration tokens).
type GitHub interface {
	GenerateJITConfig(ctx context.Context, inst int64, scope github.Scope, req github.JITRequest) (*github.JITConfig, error)
	RunnerGroupID(ctx context.Context, inst int64, org, name string) (int64, error)
	RegistrationToken(ctx context.Context, inst int64, scope github.Scope) (github.RegistrationToken, error)
	GetJob(ctx context.Context, inst int64, owner, repo string, jobID int64) (*github.Job, error)
}

var _ GitHub = (*github.Client)(nil)

// Options configure a Service. Pools, Launches, EC2, GitHub, Registrations,
// DeadLetters and the instance ARN parts are required.
type Options struct {
	Pools         *pool.Config
	Launches      store.Launches
	EC2           Launcher
	GitHub        GitHub
	Registrations Registrations
	DeadLetters   DeadLetters
	Counter       telemetry.Counter // default telemetry.Discard
	Timings       telemetry.Timings // default telemetry.DiscardTimings
	Logger        *slog.Logger      // default slog.Default()
	Now           func() time.Time  // default time.Now

	Mode  Mode  // default ModeJIT
	Scope Scope // default ScopeOrg
	// GitHubURL is the web root runners register against in token mode
	// (default https://github.com; GHES: https://HOST).
	GitHubURL string
	// Partition, Region and Account make instance ARNs, the registration keys.
	Partition, Region, Account string
	// LaunchTemplatePrefix + pool name is the pool's launch template.
	LaunchTemplatePrefix string
	// RootDevice is the image's root device name, whose size disk= sets
	// (default /dev/xvda, Amazon Linux's). Empty keeps the template's volume.
	RootDevice string
	// CheckQueued asks GitHub whether each job is still queued before
	// launching (one call per job; off by default; fails open).
	CheckQueued bool

	MaxAttempts         int
	MaxFleetSize        int
	MaxPlaces           int
	ClaimLease          time.Duration
	ClaimTTL            time.Duration
	CapacityMemory      time.Duration
	RegistrationTTL     time.Duration
	RegistrationTimeout time.Duration
}

// Service handles SQS batches of queued jobs. It is safe for concurrent use.
type Service struct {
	o Options
}

// New returns a Service, or an error naming what is missing.
func New(o Options) (*Service, error) {
	var missing []string
	for name, ok := range map[string]bool{
		"pools": o.Pools != nil, "launch store": o.Launches != nil, "ec2": o.EC2 != nil, "github": o.GitHub != nil,
		"registrations": o.Registrations != nil, "dead letters": o.DeadLetters != nil,
		"partition": o.Partition != "", "region": o.Region != "", "account": o.Account != "",
	} {
		if !ok {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return nil, fmt.Errorf("creating scale-up service: missing %s", strings.Join(missing, ", "))
	}
	if o.Counter == nil {
		o.Counter = telemetry.Discard
	}
	if o.Timings == nil {
		o.Timings = telemetry.DiscardTimings
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Mode == "" {
		o.Mode = ModeJIT
	}
	if o.Scope == "" {
		o.Scope = ScopeOrg
	}
	if o.GitHubURL == "" {
		o.GitHubURL = "https://github.com"
	}
	o.GitHubURL = strings.TrimRight(o.GitHubURL, "/")
	setDefault := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	setDefault(&o.MaxAttempts, DefaultMaxAttempts)
	setDefault(&o.MaxFleetSize, DefaultMaxFleetSize)
	setDefault(&o.MaxPlaces, DefaultMaxPlaces)
	setDur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	setDur(&o.RegistrationTimeout, DefaultRegistrationTimeout)
	setDur(&o.ClaimLease, DefaultClaimLease)
	setDur(&o.ClaimTTL, DefaultClaimTTL)
	setDur(&o.CapacityMemory, DefaultCapacityMemory)
	setDur(&o.RegistrationTTL, DefaultRegistrationTTL)
	if o.ClaimLease <= o.RegistrationTimeout {
		return nil, fmt.Errorf("creating scale-up service: claim lease %s must exceed the registration timeout %s", o.ClaimLease, o.RegistrationTimeout)
	}
	return &Service{o: o}, nil
}

// work is one job of a batch on its way through Handle.
type work struct {
	msg  SQSMessage
	job  queue.Job
	spec pool.Spec
	key  string
	log  *slog.Logger

	claim    *store.LaunchClaim
	decision scaler.ClaimDecision
	gen      int
	reg      userdata.Registration
	instance string

	finished bool
	outcome  scaler.Outcome
	reason   string
	// detail is what the operator needs beyond the reason (EC2's error and
	// the quota to raise); it goes with a dead letter. Never a secret.
	detail string
}

func (w *work) finish(o scaler.Outcome, reason string) {
	if !w.finished {
		w.finished, w.outcome, w.reason = true, o, reason
	}
}

// Handle processes one batch and reports the messages SQS must deliver
// again. It never returns an internal error to its caller: every message
// ends acknowledged, retried or dead-lettered.
func (s *Service) Handle(ctx context.Context, ev SQSEvent) BatchResponse {
	now := s.o.Now()
	var items []*work
	var resp BatchResponse
	byJob := map[int64]*work{}
	for _, msg := range ev.Records {
		w := s.decode(msg)
		if w == nil {
			continue // undecodable: logged, counted and acknowledged
		}
		if first, dup := byJob[w.job.JobID]; dup {
			s.o.Counter.Count(MetricDuplicates, "batch")
			w.log.Info("job twice in one batch; the first message carries it", "first_message_id", first.msg.MessageID)
			continue
		}
		byJob[w.job.JobID] = w
		items = append(items, w)
	}
	s.resolve(items)
	if s.o.CheckQueued {
		s.checkQueued(ctx, items)
	}
	s.decide(ctx, live(items), now)
	s.launch(ctx, live(items), now)
	for _, w := range items {
		if s.dispose(ctx, w) == scaler.Retry {
			resp.BatchItemFailures = append(resp.BatchItemFailures, BatchItemFailure{ItemIdentifier: w.msg.MessageID})
		}
	}
	if resp.BatchItemFailures == nil {
		resp.BatchItemFailures = []BatchItemFailure{}
	}
	return resp
}

// HandleSQS is Handle with the signature lambda.Start expects of an SQS
// event source with ReportBatchItemFailures; its error is always nil.
func (s *Service) HandleSQS(ctx context.Context, ev SQSEvent) (BatchResponse, error) {
	return s.Handle(ctx, ev), nil
}

func live(items []*work) []*work {
	var out []*work
	for _, w := range items {
		if !w.finished {
			out = append(out, w)
		}
	}
	return out
}

func (s *Service) decode(msg SQSMessage) *work {
	log := s.o.Logger.With("message_id", msg.MessageID)
	job, err := queue.DecodeMessage(msg.Body)
	if err != nil { // not JSON, or not a valid job: no redelivery can fix it
		s.o.Counter.Count(MetricSkipped, "undecodable")
		log.Warn("dropping undecodable message", "err", err.Error(), "bytes", len(msg.Body))
		return nil
	}
	log = log.With("job_id", job.JobID, "run_id", job.RunID, "repository", job.Repository,
		"delivery_id", job.DeliveryID, "receive_count", msg.ReceiveCount())
	return &work{msg: msg, job: job, log: log}
}

func (s *Service) resolve(items []*work) {
	for _, w := range items {
		spec, err := s.o.Pools.ResolveRepo(w.job.Labels, w.job.Repository)
		if err != nil {
			reason := pool.Reason(err)
			s.o.Counter.Count(MetricSkipped, reason)
			w.log.Warn("not launching: labels resolve to no launch spec", "reason", reason, "err", err.Error(), "labels", w.job.Labels)
			w.finish(scaler.OutcomeSkipped, reason)
			continue
		}
		w.spec = spec
		w.log = w.log.With("pool", spec.Pool)
		w.key = s.groupKey(w)
	}
}

// groupKey is equal for jobs that can share one fleet request: same pool,
// same launch spec, same registration scope and labels.
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

func (s *Service) checkQueued(ctx context.Context, items []*work) {
	for _, w := range live(items) {
		owner, repo, _ := strings.Cut(w.job.Repository, "/")
		j, err := s.o.GitHub.GetJob(ctx, w.job.InstallationID, owner, repo, w.job.JobID)
		if err != nil {
			w.log.Warn("could not check that the job is still queued; launching anyway", "err", err.Error())
			continue
		}
		if j.Status != "queued" {
			s.o.Counter.Count(MetricSkipped, "not_queued")
			w.log.Info("not launching: the job is no longer queued", "status", j.Status)
			w.finish(scaler.OutcomeSkipped, "not_queued")
		}
	}
}

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
		s.o.Logger.Error("reading launch claims", "err", err.Error())
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
				w.log.Error("reading fleet", "err", err.Error())
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

// plan is what a fleet record stores: the exact request, replayed after a crash.
type plan struct {
	Request ec2.Request `json:"request"`
}

// recoverFleet settles a fleet recorded by an invocation that died before
// finishing it. Replaying its request with the same token makes EC2 answer
// with what it launched then. The claims' lease outlives the registration
// timeout, so an instance still alive has its registration (those that got
// none shut themselves down); an instance EC2 launches only now, because the
// crash came before the first call reached it, has none and is terminated.
// The fleet is then done, and its members are decided again.
func (s *Service) recoverFleet(ctx context.Context, f *store.Fleet, ws []*work, now time.Time) {
	log := s.o.Logger.With("fleet_token", f.Token, "pool", f.Pool)
	retry := func(reason string) {
		for _, w := range ws {
			w.finish(scaler.OutcomeRetry, reason)
		}
	}
	var p plan
	instances := make([]string, len(f.Members))
	if err := json.Unmarshal([]byte(f.Plan), &p); err != nil {
		log.Error("fleet plan is unreadable; settling the fleet as not launched", "err", err.Error())
	} else {
		res, err := s.o.EC2.Launch(ctx, p.Request)
		if err != nil {
			log.Warn("replaying the fleet of a crashed invocation", "err", err.Error())
			retry("ec2_" + ec2.Reason(err))
			return
		}
		var ids []string
		for _, in := range res.Instances {
			ids = append(ids, in.ID)
		}
		assigned := scaler.Assign(len(f.Members), ids)
		states, err := s.o.EC2.States(ctx, ids)
		if err != nil {
			log.Warn("describing the recovered fleet's instances", "err", err.Error())
			retry("ec2_" + ec2.Reason(err))
			return
		}
		cutoff := f.CreatedAt.Add(s.o.RegistrationTimeout)
		var fresh []string
		for i, id := range assigned {
			st, ok := states[id]
			switch {
			case id == "" || !ok || !st.Alive():
			case st.LaunchTime.After(cutoff):
				fresh = append(fresh, id)
			default:
				instances[i] = id
			}
		}
		if err := s.o.EC2.Terminate(ctx, fresh); err != nil {
			log.Error("terminating instances launched by the replay", "err", err.Error(), "instance_ids", fresh)
		}
	}
	if err := s.o.Launches.FinishFleet(ctx, f.Token, instances, "recovered"); err != nil {
		log.Error("finishing the recovered fleet", "err", err.Error())
		retry("store")
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

// launch reserves runners, groups the jobs and launches each group.
func (s *Service) launch(ctx context.Context, items []*work, now time.Time) {
	if len(items) == 0 {
		return
	}
	// Reserve per pool, in order of first appearance: one write per pool.
	var pools []string
	wanted := map[string]int{}
	for _, w := range items {
		if wanted[w.spec.Pool] == 0 {
			pools = append(pools, w.spec.Pool)
		}
		wanted[w.spec.Pool]++
	}
	budget := map[string]int{}
	for _, p := range pools {
		var maxRunners int
		for _, w := range items {
			if w.spec.Pool == p {
				maxRunners = w.spec.MaxRunners
				break
			}
		}
		granted, err := s.o.Launches.ReserveRunners(ctx, p, wanted[p], maxRunners)
		if err != nil {
			s.o.Logger.Error("reserving runners", "pool", p, "err", err.Error())
			granted = -1
		}
		budget[p] = granted
	}
	var admitted []*work
	for _, w := range items {
		switch {
		case budget[w.spec.Pool] < 0:
			w.finish(scaler.OutcomeRetry, "store")
		case budget[w.spec.Pool] == 0:
			w.log.Info("pool is at its max runners; retrying later", "max_runners", w.spec.MaxRunners)
			w.finish(scaler.OutcomeRetry, "max_runners")
		default:
			budget[w.spec.Pool]--
			admitted = append(admitted, w)
		}
	}
	keys := make([]string, len(admitted))
	for i, w := range admitted {
		keys[i] = w.key
	}
	groups := scaler.Group(keys, s.o.MaxFleetSize)
	var wg sync.WaitGroup
	for _, g := range groups {
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
				s.o.Logger.Error("releasing unused runner reservations", "pool", p, "count", n, "err", err.Error())
			}
		}
	}
}

// launchGroup claims, registers and launches jobs that share one fleet.
func (s *Service) launchGroup(ctx context.Context, ws []*work, now time.Time) {
	spec := ws[0].spec
	sort.Slice(ws, func(i, j int) bool { return ws[i].job.JobID < ws[j].job.JobID })
	planned := make([]store.FleetMember, len(ws))
	for i, w := range ws {
		planned[i] = store.FleetMember{JobID: w.job.JobID, Attempt: w.decision.Attempt}
	}
	token := scaler.Token(spec.Pool, planned)
	log := s.o.Logger.With("pool", spec.Pool, "fleet_token", token)

	// Claim: a conditional write per job before any GitHub or EC2 call.
	var claimed []*work
	for _, w := range ws {
		w.gen = w.decision.PrevGen + 1
		c := store.LaunchClaim{
			JobID: w.job.JobID, Attempt: w.decision.Attempt, Gen: w.gen, Token: token, Pool: spec.Pool,
			LeaseUntil: now.Add(s.o.ClaimLease), UpdatedAt: now, ExpiresAt: now.Add(s.o.ClaimTTL),
		}
		err := s.o.Launches.ClaimLaunch(ctx, c, w.decision.PrevGen, now)
		switch {
		case errors.Is(err, store.ErrConflict):
			s.o.Counter.Count(MetricDuplicates, "claim_conflict")
			w.log.Info("another invocation claimed the job first")
			w.finish(scaler.OutcomeRetry, "claim_conflict")
		case err != nil:
			w.log.Error("claiming the job", "err", err.Error())
			w.finish(scaler.OutcomeRetry, "store")
		default:
			w.log = w.log.With("attempt", c.Attempt, "runner_name", scaler.RunnerName(w.job.JobID, w.gen))
			claimed = append(claimed, w)
		}
	}
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
			s.register(ctx, w, now)
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
			log.Error("recording the unlaunched fleet", "err", err.Error())
		}
		return
	}

	failed, err := s.o.Launches.FailedCapacity(ctx, spec.Pool, now)
	if err != nil {
		log.Warn("reading failed capacity pools; asking for all", "err", err.Error())
	}
	req := s.request(spec, token, members, failed)
	planJSON, err := json.Marshal(plan{Request: req})
	if err != nil {
		s.failAll(members, scaler.OutcomeRetry, "plan")
		return
	}
	fleet.State, fleet.Plan = store.FleetIntent, string(planJSON)
	if err := s.o.Launches.PutFleet(ctx, fleet); err != nil {
		// A concurrent invocation that planned the same jobs at the same
		// attempts derived the same token and recorded its fleet first: it
		// owns the token. These jobs are not its members, so their next
		// delivery starts a new attempt.
		reason := "store"
		if errors.Is(err, store.ErrConflict) {
			reason = "claim_conflict"
		}
		log.Warn("recording the fleet's intent", "err", err.Error(), "reason", reason)
		s.failAll(members, scaler.OutcomeRetry, reason)
		return
	}

	res, err := s.o.EC2.Launch(ctx, req)
	created := s.o.Now()
	instances := make([]string, len(members))
	if err != nil {
		reason := "ec2_" + ec2.Reason(err)
		log.Error("creating the fleet", "err", err.Error(), "reason", reason)
		whole := []ec2.FleetError{{Error: asEC2Error(err)}}
		s.reportFleetErrors(log, whole)
		if ferr := s.o.Launches.FinishFleet(ctx, token, instances, reason); ferr != nil {
			log.Error("recording the failed fleet", "err", ferr.Error())
		}
		s.failAll(members, outcomeOf(asEC2Error(err)), reason)
		for _, w := range members {
			w.detail = detailOf(whole)
		}
		return
	}
	s.readFleetErrors(ctx, log, spec, res, now)
	var ids []string
	for _, in := range res.Instances {
		ids = append(ids, in.ID)
	}
	assigned := scaler.Assign(len(members), ids)
	if extra := len(ids) - len(members); extra > 0 { // never expected; never leave one running unassigned
		sorted := slices.Sorted(slices.Values(ids))
		_ = s.o.EC2.Terminate(ctx, sorted[len(members):])
	}

	// One registration item per instance, then the fleet is done.
	var orphans []string
	for i, w := range members {
		id := assigned[i]
		if id == "" {
			continue
		}
		r := w.reg
		r.InstanceARN = userdata.InstanceARN(s.o.Partition, s.o.Region, s.o.Account, id)
		r.ExpiresAt = now.Add(s.o.RegistrationTTL)
		if err := s.o.Registrations.Put(ctx, r); err != nil {
			w.log.Error("writing the registration; terminating its instance", "instance_id", id, "err", err.Error())
			orphans = append(orphans, id)
			continue
		}
		instances[i] = id
	}
	if len(orphans) > 0 {
		if err := s.o.EC2.Terminate(ctx, orphans); err != nil {
			log.Error("terminating instances without registration", "instance_ids", orphans, "err", err.Error())
		}
	}
	failure := res.Failure()
	reason := ""
	if failure != nil {
		reason = "ec2_" + ec2.Reason(failure)
	}
	if err := s.o.Launches.FinishFleet(ctx, token, instances, reason); err != nil {
		// The claims' lease will end and a later delivery recovers the fleet.
		log.Error("recording the launched fleet", "err", err.Error())
	}
	if len(members) > 1 {
		s.tagRunners(ctx, members, instances)
	}
	outcome := scaler.OutcomeRetry
	if res.Permanent() {
		outcome = scaler.OutcomePermanent
	}
	for i, w := range members {
		switch {
		case instances[i] != "":
			w.instance = instances[i]
			latency := created.Sub(w.job.ReceivedAt)
			s.o.Counter.Count(MetricLaunched, spec.Pool)
			s.o.Timings.Observe(MetricLaunchLatency, spec.Pool, latency)
			w.log.Info("runner launched", "instance_id", w.instance, "launch_latency_ms", latency.Milliseconds(),
				"fell_back", res.FellBack)
			w.finish(scaler.OutcomeLaunched, "launched")
		case assigned[i] != "":
			w.finish(scaler.OutcomeRetry, "registration_store")
		case failure != nil:
			w.log.Warn("no capacity for the job's runner", "reason", reason, "err", failure.Error())
			w.finish(outcome, reason)
			w.detail = detailOf(res.Errors)
		default:
			w.finish(scaler.OutcomeRetry, "ec2_partial")
		}
	}
}

func (s *Service) failAll(ws []*work, o scaler.Outcome, reason string) {
	for _, w := range ws {
		w.finish(o, reason)
	}
}

func asEC2Error(err error) *ec2.Error {
	var e *ec2.Error
	if errors.As(err, &e) {
		return e
	}
	return &ec2.Error{Kind: ec2.ErrTransient, Code: "Unknown", Limit: -1}
}

// outcomeOf maps an EC2 failure to the job's outcome: permanent (invalid
// request, zero quota) is dead-lettered at once, the rest retried.
func outcomeOf(e *ec2.Error) scaler.Outcome {
	if e.Permanent() {
		return scaler.OutcomePermanent
	}
	return scaler.OutcomeRetry
}

// reportFleetErrors counts every fleet error and tells the operator what to
// fix, in one log line per error code and purchase option (a fleet of 40
// capacity pools with a zero quota is one line, not 40): the quotas to raise,
// by their Service Quotas names, or the request EC2 refused.
func (s *Service) reportFleetErrors(log *slog.Logger, errs []ec2.FleetError) {
	type key struct {
		code string
		spot bool
	}
	groups := map[key][]ec2.FleetError{}
	var order []key
	for _, fe := range errs {
		s.o.Counter.Count(MetricCapacityErrors, ec2.Reason(fe.Error))
		if fe.Kind != ec2.ErrQuota && fe.Kind != ec2.ErrInvalid {
			continue
		}
		k := key{fe.Code, fe.Spot}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], fe)
	}
	for _, k := range order {
		g := groups[k]
		capacity := "on-demand"
		if k.spot {
			capacity = "spot"
		}
		args := []any{"code", k.code, "capacity", capacity, "instance_types", instanceTypes(g), "capacity_pools", len(g), "message", g[0].Message}
		if g[0].Kind == ec2.ErrQuota {
			log.Error("EC2 quota exceeded: raise the named quotas in Service Quotas (Amazon EC2); new accounts often have 0 for GPU instances",
				append(args, "limit", g[0].Limit, "quotas", quotaNames(g))...)
			continue
		}
		log.Error("EC2 refused the fleet request: check the pool's launch template, subnets and image", args...)
	}
}

func instanceTypes(errs []ec2.FleetError) []string {
	var out []string
	for _, fe := range errs {
		if fe.InstanceType != "" && !slices.Contains(out, fe.InstanceType) {
			out = append(out, fe.InstanceType)
		}
	}
	slices.Sort(out)
	return out
}

func quotaNames(errs []ec2.FleetError) []string {
	var out []string
	for _, fe := range errs {
		if n := ec2.QuotaName(fe.InstanceType, fe.Spot); fe.Kind == ec2.ErrQuota && n != "" && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// maxDetail bounds a dead letter's detail attribute.
const maxDetail = 1024

// detailOf tells, for a dead letter, why EC2 did not launch: the most
// telling error in EC2's words, and the quotas to raise. EC2's codes and
// messages name resources and quotas, never credentials.
func detailOf(errs []ec2.FleetError) string {
	failure := ec2.Result{Errors: errs}.Failure()
	if failure == nil {
		return ""
	}
	d := failure.Error()
	if q := quotaNames(errs); len(q) > 0 {
		d += " — raise in Service Quotas (Amazon EC2): " + strings.Join(q, "; ")
	}
	if len(d) > maxDetail {
		d = d[:maxDetail]
	}
	return d
}

// jobTags are the tags of one job's instance.
func jobTags(w *work) map[string]string {
	return map[string]string{
		"skiff:job-id":      strconv.FormatInt(w.job.JobID, 10),
		"skiff:run-id":      strconv.FormatInt(w.job.RunID, 10),
		"skiff:runner-name": scaler.RunnerName(w.job.JobID, w.gen),
		"skiff:repository":  w.job.Repository,
	}
}

// tagRunners tags each instance of a fleet of several jobs with its own
// job, run, runner name and repository: CreateFleet tags every instance of
// a fleet alike, so a fleet of one job has them from creation and a fleet of
// several gets them here, one CreateTags per instance, in parallel. Best
// effort: a failure is logged and counted (ScaleUpTagFailures); the
// instance keeps the fleet's tags (job-ids, runner-names, fleet-token) and
// the fleet record maps it to its job.
func (s *Service) tagRunners(ctx context.Context, members []*work, instances []string) {
	sem := make(chan struct{}, registrationConcurrency)
	var wg sync.WaitGroup
	for i, w := range members {
		id := instances[i]
		if id == "" {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := s.o.EC2.Tag(ctx, []string{id}, jobTags(w)); err != nil {
				s.o.Counter.Count(MetricTagFailures, ec2.Reason(err))
				w.log.Warn("tagging the runner's instance failed; it keeps the fleet's tags", "instance_id", id, "err", err.Error())
			}
		}()
	}
	wg.Wait()
}

// readFleetErrors counts and reports the fleet's errors and remembers the
// capacity pools that failed, so the next batches skip them for a while.
func (s *Service) readFleetErrors(ctx context.Context, log *slog.Logger, spec pool.Spec, res ec2.Result, now time.Time) {
	if res.FellBack {
		s.o.Counter.Count(MetricFallbacks, spec.Pool)
	}
	s.reportFleetErrors(log, res.Errors)
	var keys []string
	seen := map[string]bool{}
	for _, fe := range res.Errors {
		k := fe.Key()
		switch fe.Kind {
		case ec2.ErrCapacity, ec2.ErrUnsupported, ec2.ErrSpotPrice, ec2.ErrQuota:
			if k != "" && !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	if len(keys) == 0 {
		return
	}
	log.Info("remembering failed capacity pools", "capacity_pools", keys, "for", s.o.CapacityMemory.String())
	if err := s.o.Launches.MarkCapacityFailed(ctx, spec.Pool, keys, now.Add(s.o.CapacityMemory)); err != nil {
		log.Warn("remembering failed capacity pools", "err", err.Error())
	}
}

// request builds the fleet request of a group.
func (s *Service) request(spec pool.Spec, token string, members []*work, failed map[string]bool) ec2.Request {
	capacity := ec2.Capacity(spec.Capacity)
	req := ec2.Request{
		Token:          token,
		LaunchTemplate: s.o.LaunchTemplatePrefix + spec.Pool,
		Count:          len(members),
		Capacity:       capacity,
		Places:         scaler.Places(spec.InstanceTypes, spec.Subnets, capacity, failed, s.o.MaxPlaces),
		Requirements:   requirements(spec.Requirements),
		RootDevice:     s.o.RootDevice,
		DiskGiB:        spec.DiskGiB,
		Tags:           map[string]string{},
	}
	switch {
	case spec.Image.AMI != "":
		req.ImageID = spec.Image.AMI
	case spec.Image.SSM != "":
		req.ImageID = "resolve:ssm:" + spec.Image.SSM
	}
	for k, v := range spec.Tags {
		req.Tags[k] = v
	}
	first := members[0].job
	jobs, runs, names := make([]string, 0, len(members)), []string{}, make([]string, 0, len(members))
	sameRepo := true
	for _, w := range members {
		jobs = append(jobs, strconv.FormatInt(w.job.JobID, 10))
		r := strconv.FormatInt(w.job.RunID, 10)
		if !slices.Contains(runs, r) {
			runs = append(runs, r)
		}
		names = append(names, scaler.RunnerName(w.job.JobID, w.gen))
		sameRepo = sameRepo && strings.EqualFold(w.job.Repository, first.Repository)
	}
	req.Tags["skiff:managed"] = "true"
	req.Tags["skiff:pool"] = spec.Pool
	req.Tags["skiff:owner"] = first.Owner
	req.Tags["skiff:fleet-token"] = token
	putList := func(key string, vals []string) {
		if v := strings.Join(vals, ","); len(v) <= 256 { // EC2's tag value limit
			req.Tags[key] = v
		}
	}
	putList("skiff:job-ids", jobs)
	putList("skiff:run-ids", runs)
	putList("skiff:runner-names", names)
	if sameRepo {
		req.Tags["skiff:repository"] = first.Repository
	}
	if len(members) == 1 { // the instance's own tags, at creation
		for k, v := range jobTags(members[0]) {
			req.Tags[k] = v
		}
	}
	return req
}

func requirements(r *pool.Requirements) *ec2.Requirements {
	if r == nil {
		return nil
	}
	out := &ec2.Requirements{
		VCPUMin: r.VCPU.Min, VCPUMax: r.VCPU.Max,
		MemoryMiBMin: r.MemoryGiB.Min * 1024, MemoryMiBMax: r.MemoryGiB.Max * 1024,
	}
	for _, f := range r.Families {
		out.AllowedTypes = append(out.AllowedTypes, f+".*")
	}
	if g := r.GPU; g != nil {
		out.GPUMin, out.GPUMax = g.Count.Min, g.Count.Max
		if g.Manufacturer != "" {
			out.GPUManufacturers = []string{g.Manufacturer}
		}
		out.GPUNames = append(out.GPUNames, g.Models...)
	}
	return out
}

// register creates the job's runner registration (not yet bound to an
// instance) or finishes the job with the reason it cannot have one.
func (s *Service) register(ctx context.Context, w *work, now time.Time) {
	owner, repo, _ := strings.Cut(w.job.Repository, "/")
	scope := github.OrgScope(owner)
	if s.o.Scope == ScopeRepo {
		scope = github.RepoScope(owner, repo)
	}
	name := scaler.RunnerName(w.job.JobID, w.gen)
	var r userdata.Registration
	switch s.o.Mode {
	case ModeToken:
		tok, err := s.o.GitHub.RegistrationToken(ctx, w.job.InstallationID, scope)
		if err != nil {
			s.githubFailure(w, "creating a registration token", err)
			return
		}
		r = userdata.Registration{Mode: userdata.ModeToken, Token: tok.Token.Reveal(), URL: s.o.GitHubURL + "/" + scope.String(),
			RunnerName: name, Labels: w.spec.Labels}
		if scope.IsOrg() {
			r.RunnerGroup = w.spec.RunnerGroup
		}
	default:
		group := int64(1) // repository runners are always in the default group
		if scope.IsOrg() {
			id, err := s.o.GitHub.RunnerGroupID(ctx, w.job.InstallationID, owner, w.spec.RunnerGroup)
			if err != nil {
				s.githubFailure(w, "finding the runner group", err)
				return
			}
			group = id
		}
		cfg, err := s.o.GitHub.GenerateJITConfig(ctx, w.job.InstallationID, scope,
			github.JITRequest{Name: name, RunnerGroupID: group, Labels: w.spec.Labels})
		if err != nil {
			s.githubFailure(w, "generating the JIT configuration", err)
			return
		}
		r = userdata.Registration{Mode: userdata.ModeJIT, JITConfig: cfg.EncodedJITConfig.Reveal(), RunnerName: name}
	}
	// Check the contract now, before launching, with a placeholder instance.
	probe := r
	probe.InstanceARN = userdata.InstanceARN(s.o.Partition, s.o.Region, s.o.Account, "i-00000000000000000")
	probe.ExpiresAt = now.Add(s.o.RegistrationTTL)
	if err := probe.Validate(); err != nil {
		s.o.Counter.Count(MetricSkipped, "invalid_registration")
		w.log.Error("the job's registration breaks the boot script's contract", "err", err.Error())
		w.finish(scaler.OutcomePermanent, "invalid_registration")
		return
	}
	w.reg = r
}

// githubFailure finishes a job whose registration failed: rate limits and
// server errors are retried; a refusal the configuration must fix (a runner
// group that does not exist, a missing permission or installation, invalid
// labels) is dead-lettered at once.
func (s *Service) githubFailure(w *work, what string, err error) {
	var reason string
	outcome := scaler.OutcomeRetry
	switch {
	case errors.Is(err, github.ErrRateLimited):
		reason = "github_rate_limited"
	case errors.Is(err, github.ErrConflict):
		reason = "github_conflict"
	case errors.Is(err, github.ErrNotFound), errors.Is(err, github.ErrForbidden),
		errors.Is(err, github.ErrNotInstalled), errors.Is(err, github.ErrValidation):
		reason, outcome = "github_refused", scaler.OutcomePermanent
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		reason = "timeout"
	default:
		reason = "github"
	}
	w.log.Error(what, "err", err.Error(), "reason", reason)
	w.finish(outcome, reason)
}

// dispose acts on the job's outcome and returns the message's disposition.
func (s *Service) dispose(ctx context.Context, w *work) scaler.Disposition {
	d := scaler.Dispose(w.outcome, w.msg.ReceiveCount(), s.o.MaxAttempts)
	switch d {
	case scaler.Retry:
		s.o.Counter.Count(MetricRetried, w.reason)
		w.log.Info("job returned to the queue", "reason", w.reason)
	case scaler.DeadLetter:
		if err := s.o.DeadLetters.DeadLetter(ctx, w.msg, w.job.JobID, w.reason, w.detail); err != nil {
			w.log.Error("dead-lettering the job failed; returning it to the queue", "reason", w.reason, "err", err.Error())
			s.o.Counter.Count(MetricRetried, "dead_letter_failed")
			return scaler.Retry
		}
		s.o.Counter.Count(MetricDeadLettered, w.reason)
		w.log.Error("job dead-lettered", "reason", w.reason, "detail", w.detail)
	}
	return d
}
