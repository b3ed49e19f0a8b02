// Package scaleup turns queued workflow jobs into just-in-time runners,
// exactly once per job: the service behind functions/scaleup and the
// scale-up loop of `skiff local`. It sees only ports: the job queue's
// deliveries (package queue), the launch state (package store), the compute
// provider (package provider) and GitHub.
//
// One batch of deliveries is handled as follows:
//
//	decode (drop what cannot be decoded) ─► dedupe by job id ─► resolve the
//	launch spec (skip with a reason) ─► optional "still queued?" check (fails
//	open) ─► read the jobs' launch claims (one read) and decide per job
//	(decide.DecideClaim) ─► reserve runners per pool within max (one write
//	per pool; decide.Admit) ─► group jobs that can share a launch
//	(decide.Group) ─► per group: claim each job (conditional write), create
//	its registration (JIT config, or the cached registration token), ask
//	the provider for a plan and record it as the launch's intent, launch the
//	plan (the provider delivers each registration to its instance), record
//	the launch done ─► every job is answered done, retry or dead-letter with
//	its reason.
//
// Never two instances for one job: a concurrent duplicate loses the claim
// (or finds it live and is retried later); a late duplicate finds the launch
// done and is dropped; a delivery after a crash replays the recorded plan,
// whose idempotency token makes the provider answer with the instances it
// launched before instead of launching again (see Recover in package
// scaler). A registration created by an invocation that died before
// launching is left for the reaper.
package scaleup

import (
	"context"
	"fmt"
	"github.com/skiffci/skiff/pkg/ledger"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/skiffci/skiff/pkg/fanout"
	"github.com/skiffci/skiff/pkg/freshness"
	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/queue"
	"github.com/skiffci/skiff/pkg/runnerversion"
	"github.com/skiffci/skiff/pkg/scaleup/decide"
	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/telemetry"
	"github.com/skiffci/skiff/pkg/userdata"
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
	// DefaultMaxLaunchSize is the most jobs one launch asks for: a batch of
	// 10 (SQS's largest without a batching window) is one launch, and the
	// EC2 fleet's job-list tag stays within EC2's 256-character tag values.
	DefaultMaxLaunchSize = 10
	// DefaultClaimLease: a claim whose holder died is taken over after this.
	// It exceeds the registration timeout plus boot time, so that when a
	// crashed invocation's launch is recovered, an instance still alive is
	// one that got its registration (the others shut themselves down).
	DefaultClaimLease = 10 * time.Minute
	// DefaultClaimTTL keeps claims and launch records beyond SQS's longest
	// message retention (14 days), so a late duplicate still finds them.
	DefaultClaimTTL = 15 * 24 * time.Hour
	// DefaultLaunchBudget is how much of its claim's lease an invocation
	// must have left to record a launch's intent and launch it: the provider
	// call (an EC2 fleet answers within seconds, the SDK's retries add
	// some), the registration writes and the per-job tags. An invocation
	// with less refuses the work rather than race the one that may take
	// the job over when the lease ends.
	DefaultLaunchBudget = 2 * time.Minute
	// registrationConcurrency bounds parallel GitHub calls of one group.
	registrationConcurrency = 10
)

// JobRecords reads the job and run records the webhook keeps; store.Store
// implements it. Crash recovery reads a job's record to tell a runner that
// ran its job and ended from one that never started; admission reads a
// run's record for its trigger (a pull request from a fork?).
type JobRecords interface {
	Job(ctx context.Context, id int64) (store.JobRecord, error)
	Run(ctx context.Context, id int64) (store.RunRecord, error)
}

// Ledger is the part of the runner ledger scale-up writes: it reserves a
// launch's runners under their pool's max, records their instances, ends
// the runners of a launch that failed, and reads a runner to tell a
// recovered launch's members apart. ledger.Ledger implements it.
type Ledger interface {
	Reserve(ctx context.Context, pool string, max int, runners []ledger.Runner) (int, error)
	Launched(ctx context.Context, name string, l ledger.LaunchReport) error
	End(ctx context.Context, name string, at time.Time, reason string) (bool, error)
	Runner(ctx context.Context, name string) (ledger.Runner, error)
	// LiveRunners lists a pool's live records: its warm machines among them.
	LiveRunners(ctx context.Context, pool string) ([]ledger.Runner, error)
}

var (
	_ Ledger     = ledger.Ledger(nil)
	_ JobRecords = store.Store(nil)
)

// Launches is the part of the launch store scale-up uses: each job's
// claim, each launch's intent and end, and a run's on-demand mark.
// ledger.Launches implements it.
type Launches interface {
	LaunchClaims(ctx context.Context, jobIDs []int64, now time.Time) (map[int64]ledger.Claim, error)
	ClaimLaunch(ctx context.Context, c ledger.Claim, prevGen int, now time.Time) error
	PutLaunch(ctx context.Context, f ledger.Launch) error
	FinishLaunch(ctx context.Context, token string, instances []string, reason string) error
	Launch(ctx context.Context, token string, now time.Time) (ledger.Launch, error)
	OnDemandFrom(ctx context.Context, run int64, pool string, now time.Time) (int, error)
}

var _ Launches = ledger.Launches(nil)

// GitHub is the part of the GitHub client scale-up calls; *github.Client
// implements it (and caches runner group ids and registration tokens).
type GitHub interface {
	GenerateJITConfig(ctx context.Context, inst int64, scope github.Scope, req github.JITRequest) (*github.JITConfig, error)
	RunnerGroupID(ctx context.Context, inst int64, org, name string) (int64, error)
	RegistrationToken(ctx context.Context, inst int64, scope github.Scope) (github.RegistrationToken, error)
	GetJob(ctx context.Context, inst int64, owner, repo string, jobID int64) (*github.WorkflowJob, error)
	GetWorkflowRun(ctx context.Context, inst int64, owner, repo string, runID int64) (*github.WorkflowRun, error)
	GetPermissionLevel(ctx context.Context, inst int64, owner, repo, user string) (*github.RepoPermission, error)
}

var _ GitHub = (*github.Client)(nil)

// RunnerVersions is the part of the freshness check scale-up asks before
// registering a runner; *freshness.Service implements it.
type RunnerVersions interface {
	// Download is the runner the pool's registrations name for a boot
	// that downloads one.
	Download(ctx context.Context, spec pool.Shared) (runnerversion.Download, error)
	// Held returns the pool's hold when it stops a launch of d, or nil.
	Held(ctx context.Context, pool string, d runnerversion.Download) (*store.RunnerHold, error)
}

var _ RunnerVersions = (*freshness.Service)(nil)

// NoRunnerVersions names no download and holds no pool.
type NoRunnerVersions struct{}

// Download implements RunnerVersions: nothing.
func (NoRunnerVersions) Download(context.Context, pool.Shared) (runnerversion.Download, error) {
	return runnerversion.Download{}, nil
}

// Held implements RunnerVersions: never.
func (NoRunnerVersions) Held(context.Context, string, runnerversion.Download) (*store.RunnerHold, error) {
	return nil, nil
}

// Options configure a Service. Pools, Launches, Ledger, Jobs, Provider
// and GitHub are required.
type Options struct {
	Pools    *pool.Config
	Launches Launches
	Ledger   Ledger
	Jobs     JobRecords
	Provider provider.Provider
	GitHub   GitHub
	// Room holds the jobs that cannot launch now for a reason time cures
	// (default NoRoom: they go back to the queue).
	Room Waiter
	// Runners names the runner a registration downloads and stops the
	// launches of a pool whose runners GitHub refuses (freshness.Service;
	// default NoRunnerVersions: no download named, no pool held).
	Runners RunnerVersions
	// Groups creates a runner group skiff keeps when scale-up finds it
	// missing (groups.Keeper; default NoGroups: the job is refused as for
	// any missing group).
	Groups  GroupKeeper
	Counter telemetry.Counter // default telemetry.Discard
	Timings telemetry.Timings // default telemetry.DiscardTimings
	Logger  *slog.Logger      // default slog.Default()
	Now     func() time.Time  // default time.Now
	// Executor runs an invocation's launch groups and registrations
	// (default fanout.Concurrent: in parallel); the fault harness runs
	// them one at a time in a seeded order.
	Executor fanout.Executor

	Scope Scope // default ScopeOrg
	// Deployment is the deployment id the runners' names carry
	// (names.RunnerName), so that another deployment's scale-down never
	// takes them for its own ghosts.
	Deployment string
	// GitHubURL is the web root runners register against in token mode
	// (default https://github.com; GHES: https://HOST).
	GitHubURL string
	// CheckQueued asks GitHub whether each job is still queued before
	// registering its runner (one call per job about to launch, after its
	// claim and its pool's reservation; off by default; fails open).
	CheckQueued bool

	MaxAttempts   int
	MaxLaunchSize int
	ClaimLease    time.Duration
	ClaimTTL      time.Duration
	// RegistrationTimeout is the boot script's wait for its registration;
	// the claim lease must exceed it.
	RegistrationTimeout time.Duration
	// LaunchBudget is the lease an invocation must have left to launch
	// (default DefaultLaunchBudget); it must be shorter than ClaimLease.
	LaunchBudget time.Duration
}

// Service answers batches of queued jobs. It is safe for concurrent use.
type Service struct {
	o        Options
	triggers *triggerCache
	perms    *permissionCache
}

// New returns a Service, or an error naming what is missing.
func New(o Options) (*Service, error) {
	var missing []string
	for name, ok := range map[string]bool{
		"pools": o.Pools != nil, "launch store": o.Launches != nil, "ledger": o.Ledger != nil, "job records": o.Jobs != nil,
		"provider": o.Provider != nil, "github": o.GitHub != nil,
	} {
		if !ok {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return nil, fmt.Errorf("creating scale-up service: missing %s", strings.Join(missing, ", "))
	}
	if o.Room == nil {
		o.Room = NoRoom{}
	}
	if o.Groups == nil {
		o.Groups = NoGroups{}
	}
	if o.Runners == nil {
		o.Runners = NoRunnerVersions{}
	}
	telemetry.FillDefaults(&o.Counter, &o.Logger, &o.Now)
	if o.Timings == nil {
		o.Timings = telemetry.DiscardTimings
	}
	if o.Executor == nil {
		o.Executor = fanout.Concurrent{}
	}
	if o.Scope == "" {
		o.Scope = ScopeOrg
	}
	if o.GitHubURL == "" {
		o.GitHubURL = "https://github.com"
	}
	o.GitHubURL = strings.TrimRight(o.GitHubURL, "/")
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = names.DefaultMaxAttempts
	}
	if o.MaxLaunchSize <= 0 {
		o.MaxLaunchSize = DefaultMaxLaunchSize
	}
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&o.RegistrationTimeout, userdata.DefaultRegistrationTimeout}, {&o.ClaimLease, DefaultClaimLease}, {&o.ClaimTTL, DefaultClaimTTL},
		{&o.LaunchBudget, DefaultLaunchBudget}} {
		if *d.v <= 0 {
			*d.v = d.def
		}
	}
	if o.ClaimLease <= o.RegistrationTimeout {
		return nil, fmt.Errorf("creating scale-up service: claim lease %s must exceed the registration timeout %s", o.ClaimLease, o.RegistrationTimeout)
	}
	if o.LaunchBudget >= o.ClaimLease {
		return nil, fmt.Errorf("creating scale-up service: launch budget %s must be shorter than the claim lease %s", o.LaunchBudget, o.ClaimLease)
	}
	return &Service{o: o, triggers: newTriggerCache(triggerCacheSize), perms: newPermissionCache(permissionCacheSize)}, nil
}

// work is one job of a batch on its way through Handle.
type work struct {
	d    queue.Delivery
	job  queue.Job
	spec pool.Spec
	key  string
	log  *slog.Logger

	claim    *ledger.Claim
	decision decide.ClaimDecision
	gen      int
	runner   string // the runner's name: its ledger record
	reserved bool   // the ledger holds a reservation for runner
	// keep leaves the reservation standing when the job did not launch:
	// the launch's outcome is unknown (its answer was lost), and crash
	// recovery ends it.
	keep     bool
	reg      provider.Registration
	instance string
	leaseEnd time.Time
	// tryWarm: a ready warm machine of the job's settings (warmKey) was
	// among the invocation's candidates (cands) when it grouped the jobs;
	// warm is the one it took.
	tryWarm bool
	warmKey string
	cands   *warmCandidates
	warm    *warmTake

	finished bool
	outcome  decide.Outcome
	reason   string
	// detail is what the operator needs beyond the reason (the provider's
	// error and the quota to raise); it goes with a dead letter. Never a
	// secret.
	detail string
}

func (w *work) finish(o decide.Outcome, reason string) {
	if !w.finished {
		w.finished, w.outcome, w.reason = true, o, reason
	}
}

// Handle processes one batch of deliveries and answers each (the answers
// are aligned with ds): done, retry later, or dead-letter with a reason.
// It never fails as a whole: every delivery gets an answer.
func (s *Service) Handle(ctx context.Context, ds []queue.Delivery) []queue.Answer {
	now := s.o.Now()
	answers := make([]queue.Answer, len(ds))
	var items []*work
	byJob := map[int64]*work{}
	index := map[*work]int{}
	for i, d := range ds {
		log := s.o.Logger.With("message_id", d.ID)
		if d.Err != nil { // not JSON, or not a valid job: no redelivery can fix it
			s.o.Counter.Count(MetricSkipped, "undecodable")
			log.Warn("dropping undecodable message", "err", d.Err, "bytes", len(d.Body))
			answers[i] = queue.Answer{Verdict: queue.Done, Reason: "undecodable"}
			continue
		}
		w := &work{d: d, job: d.Job, log: log.With("job_id", d.Job.JobID, "run_id", d.Job.RunID,
			"repository", d.Job.Repository, "delivery_id", d.Job.DeliveryID, "receive_count", d.ReceiveCount)}
		if first, dup := byJob[w.job.JobID]; dup {
			s.o.Counter.Count(MetricDuplicates, "batch")
			w.log.Info("job twice in one batch; the first message carries it", "first_message_id", first.d.ID)
			answers[i] = queue.Answer{Verdict: queue.Done, Reason: "duplicate"}
			continue
		}
		byJob[w.job.JobID] = w
		index[w] = i
		items = append(items, w)
	}
	s.resolve(items)
	s.admit(ctx, items)
	s.onDemand(ctx, items, now)
	s.decide(ctx, live(items), now)
	s.launch(ctx, live(items), now)
	s.updateRooms(ctx, items)
	for _, w := range items {
		answers[index[w]] = s.answer(w)
	}
	return answers
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

func (s *Service) resolve(items []*work) {
	for _, w := range items {
		spec, err := s.o.Pools.ResolveRepo(w.job.Labels, w.job.Repository)
		if err != nil {
			reason := pool.Reason(err)
			s.o.Counter.Count(MetricSkipped, reason)
			w.log.Warn("not launching: labels resolve to no launch spec", "reason", reason, "err", err, "labels", w.job.Labels)
			w.finish(decide.OutcomeSkipped, reason)
			continue
		}
		w.spec = spec
		w.log = w.log.With("pool", spec.Pool)
		w.key = s.groupKey(w)
	}
}

// stillQueued asks GitHub whether the job is still queued (CheckQueued),
// for a job about to register: claimed, with a reservation in its pool. A
// job that is not is skipped; a check that fails does not hold the launch.
func (s *Service) stillQueued(ctx context.Context, w *work) bool {
	owner, repo, _ := strings.Cut(w.job.Repository, "/")
	j, err := s.o.GitHub.GetJob(ctx, w.job.InstallationID, owner, repo, w.job.JobID)
	if err != nil {
		w.log.Warn("could not check that the job is still queued; launching anyway", "err", err)
		return true
	}
	if j.Status != "queued" {
		s.o.Counter.Count(MetricSkipped, "not_queued")
		w.log.Info("not launching: the job is no longer queued", "status", j.Status)
		w.finish(decide.OutcomeSkipped, "not_queued")
		return false
	}
	return true
}

// answer turns the job's outcome into the delivery's answer: a retry on
// the last allowed delivery becomes a dead letter with its reason (SQS's own
// redrive would move it without one), a permanent failure is dead-lettered
// at once.
func (s *Service) answer(w *work) queue.Answer {
	switch decide.Dispose(w.outcome, w.d.ReceiveCount, s.o.MaxAttempts) {
	case queue.Retry:
		s.o.Counter.Count(MetricRetried, w.reason)
		w.log.Info("job returned to the queue", "reason", w.reason)
		return queue.Answer{Verdict: queue.Retry, Reason: w.reason}
	case queue.DeadLetter:
		s.o.Counter.Count(MetricDeadLettered, w.reason)
		w.log.Error("job dead-lettered", "reason", w.reason, "detail", w.detail)
		return queue.Answer{Verdict: queue.DeadLetter, Reason: w.reason, Detail: w.detail}
	}
	return queue.Answer{Verdict: queue.Done, Reason: w.reason}
}

// runnerName is the name of the job's runner for a claim generation.
func (s *Service) runnerName(jobID int64, gen int) string {
	return names.RunnerName(s.o.Deployment, jobID, gen)
}
