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
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skiffci/skiff/pkg/fanout"
	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/launch"
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
	// MetricRecords counts metrics records, Reason = written, exists,
	// not_run, pending, error.
	MetricRecords = "ScaleDownMetricsRecords"
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
	// budget, so that reaping never stops in a fleet whose listing takes
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
	// DefaultMetricsWait bounds how long a finished job's record waits for
	// CloudWatch to settle before it is written without peaks.
	DefaultMetricsWait = 10 * time.Minute
	// DefaultStartWait: a runner that ended within this time of its launch,
	// its job's record still "queued", keeps its ledger record a little so
	// that a late start event can still say which job it ran.
	DefaultStartWait = 2 * time.Minute
)

// GitHub is the part of the GitHub client scale-down calls; *github.Client
// implements it. inst 0 lets the client find the installation of the owner.
type GitHub interface {
	ListRunners(ctx context.Context, inst int64, scope github.Scope, name string) ([]github.Runner, error)
	DeleteRunner(ctx context.Context, inst int64, scope github.Scope, id int64) error
	GetJob(ctx context.Context, inst int64, owner, repo string, jobID int64) (*github.Job, error)
	GetWorkflowRun(ctx context.Context, inst int64, owner, repo string, runID int64) (*github.WorkflowRun, error)
	RerunFailedJobs(ctx context.Context, inst int64, owner, repo string, runID int64) error
	ListHookDeliveries(ctx context.Context, appID int64, q github.DeliveryQuery) ([]github.HookDelivery, error)
	RedeliverHookDelivery(ctx context.Context, appID, deliveryID int64) error
}

var _ GitHub = (*github.Client)(nil)

// Records reads the job and run records the webhook keeps (store.Store).
type Records interface {
	Job(ctx context.Context, id int64) (store.Job, error)
	Run(ctx context.Context, id int64) (store.Run, error)
	// RecordJob completes a job record from GitHub's answer when the
	// webhook's completed event never arrived (store.Store.RecordJob).
	RecordJob(ctx context.Context, j store.Job) (bool, error)
}

// Claims is the part of scale-up's launch state a replacement writes
// (store.Launches): the job's claim is moved past the runner it lost, so
// that scale-up launches a new attempt for the re-sent message.
type Claims interface {
	LaunchClaims(ctx context.Context, jobIDs []int64, now time.Time) (map[int64]launch.Claim, error)
	ClaimLaunch(ctx context.Context, c launch.Claim, prevGen int, now time.Time) error
	// MarkOnDemand: the re-run attempt of a run a spot interruption failed
	// launches on on-demand capacity (store.Launches.MarkOnDemand).
	MarkOnDemand(ctx context.Context, run int64, pool string, attempt int, until time.Time) error
}

// Options configure a Service. Pools, Ledger, Claims, Records, Provider,
// GitHub and Queue are required.
type Options struct {
	Pools    *pool.Config
	Ledger   store.Ledger
	Claims   Claims
	Records  Records
	Provider provider.Provider
	GitHub   GitHub
	// Queue receives replacement jobs (the scale-up queue).
	Queue queue.Sender
	// Metrics writes the opt-in metrics records (default: off).
	Metrics MetricsWriter
	// Room is swept at the end of every pass (room.Service): waiting jobs
	// are offered for the pools' free slots, so a wake-up lost in a crash
	// costs at most one pass. Default: no room.
	Room    Sweeper
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
	// RunnerPrefix starts skiff's runner names (decide.DefaultRunnerPrefix).
	RunnerPrefix string
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
		"records": o.Records != nil, "provider": o.Provider != nil, "github": o.GitHub != nil, "queue": o.Queue != nil} {
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
		o.Metrics = NoMetrics{}
	}
	if o.Counter == nil {
		o.Counter = telemetry.Discard
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
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
	Instances, Runners, Records int
	Advances                    int
	Actions                     map[decide.Rule]int
	Kept                        int
	Replacements                int
	Reruns                      int
	Redeliveries                int
	Deferred                    int
	Errors                      int
}

// pass is one reconcile pass's state.
type pass struct {
	s         *Service
	now       time.Time
	log       *slog.Logger
	jobChecks atomic.Int64
	ghCalls   atomic.Int64 // GitHub calls made this pass (MaxGitHubCalls)
	deletes   atomic.Int64 // runner deletions asked for this pass
	mu        sync.Mutex
	rep       Report
	instances map[string]provider.Instance
}

func (p *pass) count(name, reason string) { p.s.o.Counter.Count(name, reason) }

func (p *pass) fail(step string, err error, args ...any) {
	p.count(MetricErrors, step)
	p.log.Error(step, append(args, "err", err)...)
	p.mu.Lock()
	p.rep.Errors++
	p.mu.Unlock()
}

func (p *pass) defer1(bound string, args ...any) {
	p.count(MetricDeferred, bound)
	p.log.Info("left for the next pass", append(args, "bound", bound)...)
	p.mu.Lock()
	p.rep.Deferred++
	p.mu.Unlock()
}

// takeDelete takes one runner deletion from the pass's GitHub budget,
// leaving room for the job checks that come after the deletions; the first
// MinDeletes always go.
func (p *pass) takeDelete() bool {
	if p.deletes.Add(1) <= int64(p.s.o.MinDeletes) {
		p.ghCalls.Add(1)
		return true
	}
	return takeWithin(&p.ghCalls, 1, int64(p.s.o.MaxGitHubCalls-p.s.o.MaxJobChecks))
}

// takeWithin adds n to *used if the sum stays within limit, and reports
// whether it did: a budget shared by a pass's concurrent actions.
func takeWithin(used *atomic.Int64, n, limit int64) bool {
	for {
		u := used.Load()
		if u+n > limit {
			return false
		}
		if used.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

// takeJobCheck takes one GitHub job read from the pass's budget for the
// action of runner, and remembers when it did.
func (p *pass) takeJobCheck(runner string) bool { return p.takeJobChecks(runner, 1) }

// takeJobChecks takes n reads at once, or none.
func (p *pass) takeJobChecks(runner string, n int) bool {
	if !takeWithin(&p.jobChecks, int64(n), int64(p.s.o.MaxJobChecks)) {
		return false
	}
	p.ghCalls.Add(int64(n))
	p.s.mu.Lock()
	if p.s.checked == nil {
		p.s.checked = map[string]time.Time{}
	}
	p.s.checked[runner] = p.now
	p.s.mu.Unlock()
	return true
}

// fairOrder puts first the actions that terminate a live instance, then,
// within each, those whose job checks waited longest (never checked
// first), keeping the decided order otherwise; it forgets checks older
// than an hour.
func (p *pass) fairOrder(actions []decide.Action) {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	for r, at := range p.s.checked {
		if p.now.Sub(at) > time.Hour {
			delete(p.s.checked, r)
		}
	}
	// Within the GitHub budget, runners whose instance still runs (and
	// costs) come before runners already gone, which cost nothing but a line
	// in GitHub's list (and GitHub removes an ephemeral runner offline for a
	// day itself).
	rank := func(a decide.Action) int {
		if a.Terminate {
			return 0
		}
		return 1
	}
	sort.SliceStable(actions, func(i, j int) bool {
		if ri, rj := rank(actions[i]), rank(actions[j]); ri != rj {
			return ri < rj
		}
		return p.s.checked[actions[i].Runner].Before(p.s.checked[actions[j].Runner])
	})
}

func (p *pass) late(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < p.s.o.DeadlineMargin {
		return true
	}
	return false
}

// Reconcile runs one pass. It returns an error only when it could not read
// the state it decides on (the ledger); everything else is logged, counted
// and left for the next pass.
func (s *Service) Reconcile(ctx context.Context) (Report, error) {
	p := &pass{s: s, now: s.o.Now(), log: s.o.Logger, rep: Report{Actions: map[decide.Rule]int{}}}
	in := decide.Inputs{Now: p.now, Policy: map[string]decide.Policy{}, RunnerPrefix: s.o.RunnerPrefix,
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
	p.rep.Instances, p.rep.Runners, p.rep.Records = len(insts), len(in.Runners), len(in.Ledger)

	d := decide.Decide(in)
	p.advance(ctx, d.Advances)
	for _, k := range d.Kept {
		p.count(MetricKept, string(k.Rule))
	}
	p.rep.Kept = len(d.Kept)
	p.apply(ctx, d.Actions)
	p.redeliver(ctx)
	if !p.late(ctx) {
		s.o.Room.Sweep(ctx)
	}
	p.log.Info("scale-down pass", "instances", p.rep.Instances, "runners", p.rep.Runners, "records", p.rep.Records,
		"advances", p.rep.Advances, "actions", p.rep.Actions, "kept", p.rep.Kept, "replacements", p.rep.Replacements,
		"reruns", p.rep.Reruns, "redeliveries", p.rep.Redeliveries, "deferred", p.rep.Deferred, "errors", p.rep.Errors)
	return p.rep, nil
}

func (s *Service) rerun(name string) bool { return pool.Listed(s.o.RerunInterrupted, name) }

// scopeOf parses decide.Runner.Scope back into a GitHub scope.
func scopeOf(s string) github.Scope {
	owner, repo, _ := strings.Cut(s, "/")
	return github.Scope{Owner: owner, Repo: repo}
}

// scopes are the configured scopes and those of the instances' owners.
func (p *pass) scopes(insts []provider.Instance) []github.Scope {
	seen := map[string]bool{}
	var out []github.Scope
	add := func(sc github.Scope) {
		if sc.Owner == "" || seen[strings.ToLower(sc.String())] {
			return
		}
		seen[strings.ToLower(sc.String())] = true
		out = append(out, sc)
	}
	for _, sc := range p.s.o.Scopes {
		add(sc)
	}
	for _, i := range insts {
		if p.s.o.RepoScope {
			if o, r, ok := strings.Cut(i.Tags[names.TagRepository], "/"); ok {
				add(github.RepoScope(o, r))
			}
		} else {
			add(github.OrgScope(i.Tags[names.TagOwner]))
		}
	}
	return out
}

// listRunners lists every scope's runners, all pages, concurrently.
func (p *pass) listRunners(ctx context.Context, insts []provider.Instance) ([]decide.Runner, bool) {
	scopes := p.scopes(insts)
	var mu sync.Mutex
	var out []decide.Runner
	complete := true
	p.each(ctx, len(scopes), func(i int) {
		sc := scopes[i]
		rs, err := p.s.o.GitHub.ListRunners(ctx, 0, sc, "")
		p.ghCalls.Add(int64(max(1, (len(rs)+99)/100))) // GitHub's pages hold 100
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			complete = false
			p.fail("listing runners", err, "scope", sc.String())
			return
		}
		for _, r := range rs {
			out = append(out, decide.Runner{ID: r.ID, Name: r.Name, Scope: sc.String(), Online: r.Status == "online", Busy: r.Busy})
		}
	})
	return out, complete
}

// each runs fn(0..n-1) with the pass's concurrency; none starts once ctx is done.
func (p *pass) each(ctx context.Context, n int, fn func(i int)) {
	p.s.o.Executor.Run(n, p.s.o.Concurrency, func(i int) {
		if ctx.Err() == nil {
			fn(i)
		}
	})
}

func (p *pass) advance(ctx context.Context, as []decide.Advance) {
	if len(as) > p.s.o.MaxAdvances {
		p.defer1("advances", "left", len(as)-p.s.o.MaxAdvances)
		as = as[:p.s.o.MaxAdvances]
	}
	var n atomic.Int64
	p.each(ctx, len(as), func(i int) {
		a := as[i]
		if err := p.s.o.Ledger.Advance(ctx, a.Runner, a.To, a.At, 0); err != nil && !errors.Is(err, store.ErrNotFound) {
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
	claims := map[int64]launch.Claim{}
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
	p.backfill(ctx, metrics)
	done := p.s.o.Metrics.Write(ctx, p.now, metricsJobs(metrics, p))
	p.each(ctx, len(actions), func(i int) {
		a := actions[i]
		if !ok[i] || !a.End || a.Runner == "" || p.late(ctx) {
			return
		}
		if p.s.o.Metrics.Enabled(a.Pool) && a.JobID != 0 && !done[a.Runner] {
			return // its record waits for CloudWatch to settle
		}
		if _, err := p.s.o.Ledger.End(ctx, a.Runner, p.now, string(a.Rule)); err != nil && !errors.Is(err, store.ErrNotFound) {
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

// strand checks whether the action's job is still queued on GitHub and,
// if so, launches a replacement. It reports whether the action may go on
// (false: the check is left for the next pass).
func (p *pass) strand(ctx context.Context, a *decide.Action, claims map[int64]launch.Claim) bool {
	c, hasClaim := claims[a.JobID]
	if hasClaim && a.Gen > 0 && c.Gen > a.Gen {
		return true // replaced already (or launched again by scale-up)
	}
	job, err := p.s.o.Records.Job(ctx, a.JobID)
	if errors.Is(err, store.ErrNotFound) {
		return true // the record expired: nothing to launch for
	}
	if err != nil {
		p.fail("reading job record", err, "job_id", a.JobID)
		return false
	}
	if job.Status == store.StatusCompleted || job.Status == store.StatusInProgress {
		// The webhook saw the job start (on this runner or another one):
		// GitHub never queues a started job again, so no GitHub call is
		// needed to know it is not stranded. In a burst whose runners take
		// each other's jobs, that is most of them.
		return true
	}
	if !p.s.o.ScaleUpChecksQueued {
		if !p.takeJobCheck(a.Runner) {
			p.defer1("job_checks", "rule", string(a.Rule), "job_id", a.JobID)
			return false
		}
		owner, repo := splitRepo(job.Repository)
		gj, err := p.s.o.GitHub.GetJob(ctx, job.InstallationID, owner, repo, a.JobID)
		if errors.Is(err, github.ErrNotFound) {
			return true
		}
		if err != nil {
			p.fail("getting job", err, "job_id", a.JobID)
			return false
		}
		if gj.Status != "queued" {
			return true
		}
	}
	log := p.log.With("job_id", a.JobID, "runner_name", a.Runner, "rule", string(a.Rule))
	failed := 0
	if hasClaim {
		// The limit guards against a launch loop: each of the job's runners
		// that failed it — launched, and never ran any job (a failed boot, a
		// lost registration) — earns one replacement, up to the limit. A
		// runner another job took did useful work and is no failure: in a
		// busy pool whose runners can take less specific jobs, a job may
		// lose several that way.
		for g := 1; g <= c.Gen; g++ {
			if r, err := p.s.o.Ledger.Runner(ctx, runnerName(a.JobID, g)); err == nil && !r.LaunchedAt.IsZero() && r.BusyJob == 0 {
				failed++
			}
		}
	}
	if failed > a.MaxReplacements {
		p.count(MetricReplacements, "limit")
		log.Warn("stranded job reached its replacement limit; not launching again", "failed_runners", failed,
			"max", a.MaxReplacements)
		return true
	}
	if hasClaim {
		// Move the claim past the lost runner: a claim whose lease is over and
		// whose token names no fleet makes scale-up launch the next attempt.
		next := c
		next.Gen, next.Token, next.LeaseUntil, next.UpdatedAt = c.Gen+1, "replace-"+strconv.FormatInt(a.JobID, 10)+"-"+strconv.Itoa(c.Gen+1), p.now, p.now
		next.ExpiresAt = p.now.Add(p.s.o.ClaimTTL)
		if err := p.s.o.Claims.ClaimLaunch(ctx, next, c.Gen, p.now); err != nil {
			if errors.Is(err, store.ErrConflict) {
				return true // scale-up moved it meanwhile
			}
			p.fail("claiming the replacement", err, "job_id", a.JobID)
			return false
		}
	}
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

func runnerName(jobID int64, gen int) string {
	return "skiff-" + strconv.FormatInt(jobID, 10) + "-" + strconv.Itoa(gen)
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
	job, err := p.s.o.Records.Job(ctx, jobID)
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
	gj := &github.Job{ID: jobID, RunID: job.RunID, RunAttempt: max(job.Attempt, 1), Status: "completed", Conclusion: job.Conclusion}
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
	if err := p.s.o.Claims.MarkOnDemand(ctx, gj.RunID, a.Pool, run.RunAttempt+1, p.now.Add(store.OnDemandTTL)); err != nil {
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

// redeliver asks GitHub to deliver again the App's failed deliveries of the
// last hour that failed on our side (5xx, timeouts), once each: a delivery
// whose GUID already has a redelivery, or a success, is left alone; a 4xx
// is the webhook's own refusal and never redelivered.
func (p *pass) redeliver(ctx context.Context) {
	for _, app := range p.s.o.Apps {
		if p.late(ctx) {
			return
		}
		ds, err := p.s.o.GitHub.ListHookDeliveries(ctx, app, github.DeliveryQuery{Status: "failure",
			Since: p.now.Add(-p.s.o.RedeliverWindow), Limit: 100})
		p.ghCalls.Add(1)
		if err != nil {
			p.fail("listing hook deliveries", err, "app_id", app)
			continue
		}
		retried := p.s.redeliveredSince(p.now.Add(-p.s.o.RedeliverWindow))
		for _, d := range ds {
			if d.Redelivery {
				retried[d.GUID] = true
			}
		}
		n := 0
		for _, d := range ds {
			class := ""
			switch {
			case d.Redelivery || retried[d.GUID]:
			case d.StatusCode == 0:
				class = "timeout"
			case d.StatusCode >= 500:
				class = "5xx"
			}
			if class == "" {
				continue
			}
			if n >= p.s.o.MaxRedeliveries {
				p.defer1("redeliveries", "app_id", app)
				break
			}
			n++
			retried[d.GUID] = true
			p.ghCalls.Add(1)
			if err := p.s.o.GitHub.RedeliverHookDelivery(ctx, app, d.ID); err != nil {
				p.fail("redelivering", err, "delivery_id", d.GUID)
				continue
			}
			p.s.rememberRedelivery(d.GUID, p.now)
			p.count(MetricRedeliveries, class)
			p.log.Info("redelivered a failed webhook delivery", "delivery_id", d.GUID, "status_code", d.StatusCode, "event", d.Event)
			p.rep.Redeliveries++
		}
	}
}

// redeliveredSince returns the GUIDs redelivered since since, forgetting
// older ones.
func (s *Service) redeliveredSince(since time.Time) map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]bool, len(s.redelivered))
	for guid, at := range s.redelivered {
		if at.Before(since) {
			delete(s.redelivered, guid)
			continue
		}
		out[guid] = true
	}
	return out
}

func (s *Service) rememberRedelivery(guid string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.redelivered == nil {
		s.redelivered = map[string]time.Time{}
	}
	s.redelivered[guid] = at
}

// backfill completes, from GitHub, the record of a job an ending runner
// ran when the webhook saw the job start on it but never end (its
// completed delivery was lost, or failed and so did its one redelivery):
// without it the job's metrics record, and the runner's ledger record with
// its pool's count, would wait a day for an event that is not coming. One
// job check each, within the pass's budget; a job GitHub still runs is
// left for a later pass.
func (p *pass) backfill(ctx context.Context, as []*decide.Action) {
	for _, a := range as {
		if p.late(ctx) {
			return
		}
		jobID := a.JobID
		if r, err := p.s.o.Ledger.Runner(ctx, a.Runner); err == nil && r.BusyJob != 0 {
			jobID = r.BusyJob
		}
		job, err := p.s.o.Records.Job(ctx, jobID)
		if err != nil || job.Status != store.StatusInProgress || job.RunnerName != a.Runner {
			continue
		}
		if !p.takeJobCheck(a.Runner) {
			p.defer1("job_checks", "rule", "backfill", "job_id", jobID)
			continue
		}
		owner, repo := splitRepo(job.Repository)
		gj, err := p.s.o.GitHub.GetJob(ctx, job.InstallationID, owner, repo, jobID)
		if err != nil {
			p.fail("getting job", err, "job_id", jobID)
			continue
		}
		if gj.Status != "completed" {
			continue
		}
		done := store.Job{ID: jobID, Status: store.StatusCompleted, CompletedAt: gj.CompletedAt, Conclusion: gj.Conclusion,
			RunnerName: gj.RunnerName}
		if done.CompletedAt.IsZero() {
			done.CompletedAt = p.now
		}
		if _, err := p.s.o.Records.RecordJob(ctx, done); err != nil {
			p.fail("completing job record", err, "job_id", jobID)
			continue
		}
		p.count(MetricBackfills, "completed")
		p.log.Info("job record completed from GitHub: its completed event never arrived", "job_id", jobID,
			"runner_name", a.Runner, "conclusion", gj.Conclusion)
	}
}

// Sweeper is the waiting room as the reconciler uses it (room.Service).
type Sweeper interface {
	// Sweep offers waiting jobs for the pools' free slots.
	Sweep(ctx context.Context)
}

// NoRoom is the Sweeper without a room.
type NoRoom struct{}

// Sweep implements Sweeper.
func (NoRoom) Sweep(context.Context) {}
