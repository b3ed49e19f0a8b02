// Package scaledown is the reconciler that runs every minute: it reads the
// provider's instances, GitHub's runners (per scope, all pages) and the
// runner ledger, decides with package decide, and acts — deletes runners,
// terminates instances, ends ledger records, launches replacements for
// stranded jobs (a new message on the job queue), re-runs jobs a spot
// interruption failed, writes the opt-in metrics records of finished jobs
// and redelivers failed webhook deliveries.
//
// One pass is bounded: GitHub job checks, redeliveries and ledger advances
// per pass, a fixed concurrency, and the invocation's deadline; what is left
// is decided again on the next pass, since every step is idempotent
// (Terminate, End and a runner deletion are) and a record is ended last.
package scaledown

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/skiffci/skiff/pkg/fanout"
	"github.com/skiffci/skiff/pkg/freshness"
	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/groups"
	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/metrics/writer"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/queue"
	"github.com/skiffci/skiff/pkg/scaledown/decide"
	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/telemetry"
)

// Metric names scale-down counts (telemetry.Counter), Reason = the rule or outcome.
const (
	// MetricActions counts actions taken, Reason = decide.Rule.
	MetricActions = "ScaleDownActions"
	// MetricKept counts busy runners left alone, Reason = "busy", or
	// "github_refused" when GitHub refused to delete a runner running a job.
	MetricKept = "ScaleDownKept"
	// MetricReplacements counts replacement launches, Reason = the rule
	// that found the job stranded; "limit" when a job reached its bound.
	MetricReplacements = "ScaleDownReplacements"
	// MetricBackfills counts job records completed from GitHub because the
	// webhook's completed event never arrived, Reason = "completed".
	MetricBackfills = "ScaleDownBackfills"
	// MetricReruns counts re-runs of interrupted jobs, Reason = "spot".
	MetricReruns = "ScaleDownReruns"
	// MetricRedeliveries counts webhook redeliveries, Reason = the status
	// class ("5xx", "timeout").
	MetricRedeliveries = "ScaleDownRedeliveries"
	// MetricErrors counts failed steps, Reason = the step.
	MetricErrors = "ScaleDownErrors"
	// MetricDeferred counts work left for the next pass, Reason = the bound.
	MetricDeferred = "ScaleDownDeferred"
)

// Defaults of Options, each with the reason for its value.
const (
	// DefaultMaxJobChecks bounds GitHub job reads per pass: a pass lists
	// 5,000 runners in 50 calls and must stay within 60.
	DefaultMaxJobChecks = 5
	// DefaultMaxGitHubCalls bounds a pass's GitHub calls: 60 a minute is
	// 3,600 an hour, inside an App installation's smallest hourly budget
	// (5,000) with room for scale-up's registrations. Listing comes first
	// (a page per 100 runners), then job checks (their own budget), then
	// runner deletions with what is left.
	DefaultMaxGitHubCalls = 60
	// DefaultMinDeletes runner deletions a pass makes even past the GitHub
	// budget, so that reaping never stops in an organisation whose listing takes
	// most of it (5,000 runners: 50 pages).
	DefaultMinDeletes = 5
	// DefaultMaxRedeliveries bounds redeliveries per pass (one listing call
	// plus these), so a webhook outage is worked off over a few minutes.
	DefaultMaxRedeliveries = 3
	// DefaultMaxAdvances bounds ledger advances per pass (one write each).
	DefaultMaxAdvances = 500
	// DefaultConcurrency of GitHub and store calls within a pass.
	DefaultConcurrency = 8
	// DefaultDeadlineMargin: no new step starts with less than this left
	// before the invocation's deadline.
	DefaultDeadlineMargin = 5 * time.Second
	// DefaultRedeliverWindow: GitHub keeps deliveries for 3 days; a failed
	// delivery older than an hour describes a job long handled otherwise.
	DefaultRedeliverWindow = time.Hour
)

// GitHub is the part of the GitHub client scale-down calls; *github.Client
// implements it. inst 0 lets the client find the installation of the owner.
type GitHub interface {
	ListRunners(ctx context.Context, inst int64, scope github.Scope, name string) ([]github.Runner, error)
	DeleteRunner(ctx context.Context, inst int64, scope github.Scope, id int64) error
	GetJob(ctx context.Context, inst int64, owner, repo string, jobID int64) (*github.WorkflowJob, error)
	GetWorkflowRun(ctx context.Context, inst int64, owner, repo string, runID int64) (*github.WorkflowRun, error)
	RerunFailedJobs(ctx context.Context, inst int64, owner, repo string, runID int64) error
	ListHookDeliveries(ctx context.Context, appID int64, q github.DeliveryQuery) ([]github.HookDelivery, error)
	RedeliverHookDelivery(ctx context.Context, appID, deliveryID int64) error
}

var _ GitHub = (*github.Client)(nil)

// JobRecords is the part of the job records the webhook keeps that
// scale-down uses (store.Store implements it): a job's record, read to
// tell what a runner ran and whether it ended.
type JobRecords interface {
	Job(ctx context.Context, id int64) (store.JobRecord, error)
	// RecordJob completes a job record from GitHub's answer when the
	// webhook's completed event never arrived (store.Store.RecordJob).
	RecordJob(ctx context.Context, j store.JobRecord) (bool, error)
}

// Ledger is the part of the runner ledger scale-down uses: it lists each
// pool's live records, reads, advances and ends runners, keeps the
// awaiting list of the metrics records (writer.AwaitingLedger), and
// reserves and records the warm machines it launches. ledger.Ledger
// implements it.
type Ledger interface {
	writer.AwaitingLedger
	LiveRunners(ctx context.Context, pool string) ([]ledger.Runner, error)
	Runner(ctx context.Context, name string) (ledger.Runner, error)
	Advance(ctx context.Context, name string, to ledger.State, at time.Time, job int64) error
	End(ctx context.Context, name string, at time.Time, reason string) (bool, error)
	Reserve(ctx context.Context, pool string, max int, runners []ledger.Runner) (int, error)
	Launched(ctx context.Context, name string, l ledger.LaunchReport) error
}

var (
	_ Ledger     = ledger.Ledger(nil)
	_ JobRecords = store.Store(nil)
	_ Claims     = ledger.Launches(nil)
)

// Claims is the part of scale-up's launch state a replacement writes
// (ledger.Launches): the job's claim is moved past the runner it lost, so
// that scale-up launches a new attempt for the re-sent message.
type Claims interface {
	LaunchClaims(ctx context.Context, jobIDs []int64, now time.Time) (map[int64]ledger.Claim, error)
	ClaimLaunch(ctx context.Context, c ledger.Claim, prevGen int, now time.Time) error
	// MarkOnDemand: the re-run attempt of a run a spot interruption failed
	// launches on on-demand capacity (ledger.Launches.MarkOnDemand).
	MarkOnDemand(ctx context.Context, run int64, pool string, attempt int, until time.Time) error
}

// Options configure a Service. Pools, Ledger, Claims, Jobs, Provider,
// GitHub and Queue are required.
type Options struct {
	Pools    *pool.Config
	Ledger   Ledger
	Claims   Claims
	Jobs     JobRecords
	Provider provider.Provider
	GitHub   GitHub
	// Queue receives replacement jobs (the scale-up queue).
	Queue queue.Sender
	// Metrics writes the opt-in metrics records (default: off).
	Metrics writer.MetricsWriter
	// Groups keeps skiff's runner groups on every pass (groups.Keeper),
	// given the owners of the live instances (default: no groups kept).
	Groups GroupKeeper
	// Room is swept at the end of every pass (room.Service): waiting jobs
	// are offered for the pools' free slots, so a wake-up lost in a crash
	// costs at most one pass. Default: no room.
	Room Sweeper
	// Runners observes every pass's instances for runners GitHub refused
	// for their version and sets the pools' freshness gauges
	// (freshness.Service). Default: nothing observed.
	Runners RunnerObserver
	Counter telemetry.Counter // default telemetry.Discard
	Logger  *slog.Logger      // default slog.Default()
	Now     func() time.Time  // default time.Now
	// Executor runs a pass's concurrent steps, Concurrency at a time
	// (default fanout.Concurrent); the fault harness runs them one at a
	// time in a seeded order.
	Executor fanout.Executor

	// Scopes are listed for runners on every pass, beside the scopes of the
	// instances' owners (org mode) or repositories (repo mode).
	Scopes []github.Scope
	// RepoScope: runners are registered per repository (scale-up's repo mode).
	RepoScope bool
	// Apps are the GitHub App ids whose failed deliveries are redelivered
	// (none: no redelivery).
	Apps []int64
	// MaxReplacements bounds replacements per job (decide.DefaultMaxReplacements).
	MaxReplacements int
	// RerunInterrupted lists the pools whose spot-interrupted failed jobs are
	// re-run once; "*" means every pool.
	RerunInterrupted []string
	// ClaimLease and ClaimTTL of the claim a replacement writes (scale-up's).
	ClaimTTL time.Duration

	MaxJobChecks    int
	MaxGitHubCalls  int
	MinDeletes      int
	MaxRedeliveries int
	MaxAdvances     int
	Concurrency     int
	DeadlineMargin  time.Duration
	RedeliverWindow time.Duration
	// Deployment is the deployment id its runners' names carry
	// (names.RunnerName): only those are its ghosts to delete.
	Deployment string
	// ScaleUpChecksQueued: scale-up asks GitHub whether a job is still
	// queued right before launching it (scaleup.Options.CheckQueued, as
	// local mode runs it), so a stranded job's replacement is sent on the
	// job record's word and the check is made once, there — not also here
	// within the pass's job-check budget.
	ScaleUpChecksQueued bool
}

// Service is the reconciler. It is safe for concurrent use, though one
// pass at a time is what the schedule runs.
type Service struct {
	o Options

	// redelivered remembers the GUIDs of the deliveries this Service asked
	// GitHub to redeliver, until they leave the window: GitHub's failure
	// list no longer shows a redelivery that succeeded, only the original
	// failure. A new container starts empty, so it may redeliver such a
	// delivery once more; the webhook drops it as a replay.
	mu          sync.Mutex
	redelivered map[string]time.Time
	// checked is when each action (by runner name) last spent a job check:
	// a pass serves the longest-waiting first, so that a budget smaller
	// than the work rotates through it instead of serving the same
	// actions every pass while the others starve.
	checked map[string]time.Time
}

// New returns a Service, or an error naming what is missing.
func New(o Options) (*Service, error) {
	var missing []string
	for name, ok := range map[string]bool{"pools": o.Pools != nil, "ledger": o.Ledger != nil, "claims": o.Claims != nil,
		"job records": o.Jobs != nil, "provider": o.Provider != nil, "github": o.GitHub != nil, "queue": o.Queue != nil} {
		if !ok {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return nil, fmt.Errorf("creating scale-down service: missing %s", strings.Join(missing, ", "))
	}
	if o.Room == nil {
		o.Room = NoRoom{}
	}
	if o.Metrics == nil {
		o.Metrics = writer.NoMetrics{}
	}
	if o.Groups == nil {
		o.Groups = NoGroups{}
	}
	if o.Runners == nil {
		o.Runners = NoRunners{}
	}
	telemetry.FillDefaults(&o.Counter, &o.Logger, &o.Now)
	if o.Executor == nil {
		o.Executor = fanout.Concurrent{}
	}
	setInt := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	setInt(&o.MaxJobChecks, DefaultMaxJobChecks)
	setInt(&o.MaxGitHubCalls, DefaultMaxGitHubCalls)
	setInt(&o.MinDeletes, DefaultMinDeletes)
	setInt(&o.MaxRedeliveries, DefaultMaxRedeliveries)
	setInt(&o.MaxAdvances, DefaultMaxAdvances)
	setInt(&o.Concurrency, DefaultConcurrency)
	setInt(&o.MaxReplacements, decide.DefaultMaxReplacements)
	if o.DeadlineMargin <= 0 {
		o.DeadlineMargin = DefaultDeadlineMargin
	}
	if o.RedeliverWindow <= 0 {
		o.RedeliverWindow = DefaultRedeliverWindow
	}
	if o.ClaimTTL <= 0 {
		o.ClaimTTL = 15 * 24 * time.Hour
	}
	return &Service{o: o}, nil
}

// Report is what one pass did, for logs and tests.
type Report struct {
	Instances, Runners, RunnerRecords int
	Advances                          int
	Actions                           map[decide.Rule]int
	Kept                              int
	Replacements                      int
	Reruns                            int
	Redeliveries                      int
	// Groups is what keeping the runner groups did.
	Groups groups.Report
	// Held are the pools this pass stopped: GitHub refused their runners' version.
	Held []string
	// Warm counts the warm actions taken (launch, ready, stop, retire, end, orphan).
	Warm     map[decide.WarmDo]int
	Deferred int
	Errors   int
}

// Reconcile runs one pass. It returns an error only when it could not read
// the state it decides on (the ledger); everything else is logged, counted
// and left for the next pass.
func (s *Service) Reconcile(ctx context.Context) (Report, error) {
	p := &pass{s: s, now: s.o.Now(), log: s.o.Logger, rep: Report{Actions: map[decide.Rule]int{}}}
	in := decide.Inputs{Now: p.now, Policy: map[string]decide.Policy{}, Deployment: s.o.Deployment,
		Default: decide.Policy{MaxReplacements: s.o.MaxReplacements}.WithDefaults()}

	// The ledger first: without it every instance would look like an orphan.
	for _, pl := range s.o.Pools.Pools {
		in.Policy[pl.Name] = decide.Policy{IdleTimeout: pl.IdleTimeout, BootTimeout: pl.BootTimeout, QueueTimeout: pl.QueueTimeout, MaxLifetime: pl.MaxLifetime,
			MaxReplacements: s.o.MaxReplacements, RerunInterrupted: s.rerun(pl.Name)}
		rs, err := s.o.Ledger.LiveRunners(ctx, pl.Name)
		if err != nil {
			return p.rep, fmt.Errorf("reading the ledger of pool %s: %w", pl.Name, err)
		}
		in.Ledger = append(in.Ledger, rs...)
	}
	insts, err := s.o.Provider.List(ctx, provider.Filter{})
	if err != nil {
		p.fail("listing instances", err)
	}
	in.Instances, in.InstancesComplete = insts, err == nil
	p.instances = make(map[string]provider.Instance, len(insts))
	for _, i := range insts {
		p.instances[i.ID] = i
	}
	in.Runners, in.RunnersComplete = p.listRunners(ctx, insts)
	p.rep.Instances, p.rep.Runners, p.rep.RunnerRecords = len(insts), len(in.Runners), len(in.Ledger)

	// Before any replacement is sent: a runner GitHub refused for its
	// version (ended instances are listed for an hour) holds its pool, so
	// scale-up dead-letters the replacement instead of launching it.
	rr := s.o.Runners.Observe(ctx, insts)
	p.rep.Errors += rr.Errors
	p.rep.Held = rr.Held

	d := decide.Decide(in)
	p.advance(ctx, d.Advances)
	for _, k := range d.Kept {
		p.count(MetricKept, string(k.Rule))
	}
	p.rep.Kept = len(d.Kept)
	p.apply(ctx, d.Actions)
	if !p.late(ctx) {
		p.keepWarm(ctx, in)
	}
	p.redeliver(ctx)
	if !p.late(ctx) {
		p.rep.Groups = s.o.Groups.Keep(ctx, owners(insts)...)
		p.rep.Errors += p.rep.Groups.Errors
	}
	if !p.late(ctx) {
		s.o.Room.Sweep(ctx)
	}

	p.log.Info("scale-down pass", "instances", p.rep.Instances, "runners", p.rep.Runners, "runner_records", p.rep.RunnerRecords,
		"advances", p.rep.Advances, "actions", p.rep.Actions, "kept", p.rep.Kept, "replacements", p.rep.Replacements,
		"reruns", p.rep.Reruns, "redeliveries", p.rep.Redeliveries, "warm", p.rep.Warm, "group_calls", p.rep.Groups.Calls,
		"deferred", p.rep.Deferred, "errors", p.rep.Errors)
	return p.rep, nil
}

// GroupKeeper keeps the runner groups skiff owns (groups.Keeper).
type GroupKeeper interface {
	// Keep runs one pass over the organizations it knows and extra.
	Keep(ctx context.Context, extra ...string) groups.Report
}

// NoGroups is the GroupKeeper of a deployment that keeps no groups.
type NoGroups struct{}

// Keep implements GroupKeeper: nothing to keep.
func (NoGroups) Keep(context.Context, ...string) groups.Report { return groups.Report{} }

// owners are the owners of the live instances, from their tags: the
// organizations the pools launch in.
func owners(insts []provider.Instance) []string {
	var out []string
	seen := map[string]bool{}
	for _, i := range insts {
		if o := i.Tags[names.TagOwner]; o != "" && !seen[o] {
			seen[o] = true
			out = append(out, o)
		}
	}
	return out
}

// Sweeper is the waiting room as the reconciler uses it (room.Service).
type Sweeper interface {
	// Sweep offers waiting jobs for the pools' free slots.
	Sweep(ctx context.Context)
}

// RunnerObserver is the freshness check's step of a pass; *freshness.Service implements it.
type RunnerObserver interface {
	// Observe holds the pools of instances that ended refused for their
	// runner version and sets the pools' gauges.
	Observe(ctx context.Context, insts []provider.Instance) freshness.Report
}

var _ RunnerObserver = (*freshness.Service)(nil)

// NoRunners observes nothing.
type NoRunners struct{}

// Observe implements RunnerObserver.
func (NoRunners) Observe(context.Context, []provider.Instance) freshness.Report {
	return freshness.Report{}
}

// NoRoom is the Sweeper without a room.
type NoRoom struct{}

// Sweep implements Sweeper.
func (NoRoom) Sweep(context.Context) {}
