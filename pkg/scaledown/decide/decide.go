// Package decide holds scale-down's decisions: pure functions over plain
// values — the provider's instances, GitHub's runners and the runner
// ledger's live records at a given time — that say which runner to reap,
// which record to end and which job may be stranded, each with its rule and
// a reason. It imports no SDK and no network code (make lint checks it).
//
// A runner moves through the ledger's states (package ledger); scale-down
// reads each record against what the provider and GitHub say now:
//
//	reserved ─(no instance after StaleReservation)──────────────▶ end, strand check
//	any ─(no instance id; an instance tagged with its name)─────▶ record the instance
//	launched ─(queued by the backend after QueueTimeout)────────▶ terminate, end, strand check
//	launched ─(not registered BootTimeout after it started)─────▶ terminate, end, strand check
//	registered ─(no job within IdleTimeout)────────────▶ delete runner, terminate, end, strand check
//	registered ─(runner gone from GitHub, confirmed)────────────▶ terminate, end, strand check
//	job started ─(busy: never reaped, except past MaxLifetime)──▶ kept
//	job completed ─(after CompletedGrace, GitHub not busy)──────▶ terminate, end
//	any ─(instance gone or ending)──────────────────────────────▶ end, strand check
//	any ─(older than MaxLifetime + LifetimeSlack)───────────────▶ terminate, end
//
// Outside the ledger: an alive skiff instance without a live record is an
// orphan (terminated after OrphanGrace); an offline skiff runner without a
// live record or an instance is a ghost (deleted).
//
// Busy is the union of three signals, because GitHub's busy flag reads
// false for 25–60 s after a job starts and can flip mid-job: GitHub says
// busy, or the ledger saw the job start and not finish, or the instance's
// job-started tag (set by the runner's hook) has no later job-completed tag.
package decide

import (
	"sort"
	"strings"
	"time"

	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/provider"
)

// Rule names why scale-down acts; it is the Reason dimension of the
// scale-down metrics and the rule key of every log line.
type Rule string

// The rules.
const (
	// RuleIdle: a registered runner got no job within the pool's idle timeout.
	RuleIdle Rule = "idle"
	// RuleBootTimeout: the runner did not register within the boot timeout.
	RuleBootTimeout Rule = "boot_timeout"
	// RuleQueueTimeout: the backend held the runner in its own queue
	// (Slurm pending, an unschedulable Pod) longer than the queue timeout.
	RuleQueueTimeout Rule = "queue_timeout"
	// RuleMaxLifetime: the instance outlived the pool's maximum lifetime.
	RuleMaxLifetime Rule = "max_lifetime"
	// RuleGhost: an offline skiff runner with no instance and no live record.
	RuleGhost Rule = "ghost"
	// RuleOrphan: an alive skiff instance with no live ledger record.
	RuleOrphan Rule = "orphan"
	// RuleInstanceGone: a live record whose instance is gone or ending.
	RuleInstanceGone Rule = "instance_gone"
	// RuleJobCompleted: the runner's job completed; its instance should
	// have powered off (backstop).
	RuleJobCompleted Rule = "job_completed"
	// RuleRunnerGone: a registered, idle runner vanished from GitHub while
	// its instance runs (deleted by an earlier pass that died before
	// terminating, or removed by GitHub).
	RuleRunnerGone Rule = "runner_gone"
	// RuleTaken: the runner is running another job than the one it was
	// launched for: that job may be stranded.
	RuleTaken Rule = "taken"
	// RuleStaleReservation: a reservation that never got an instance.
	RuleStaleReservation Rule = "stale_reservation"
	// RuleBusy is not an action: a runner kept because it is busy.
	RuleBusy Rule = "busy"
)

// Defaults of a Policy's fields that the pools file does not set, each with
// the reason for its value.
const (
	// DefaultOrphanGrace must exceed scale-up's claim lease (10 min): a
	// crashed scale-up recovers its launch, and records the instance in the
	// ledger, within it.
	DefaultOrphanGrace = 15 * time.Minute
	// DefaultCompletedGrace lets a runner whose job completed end on its
	// own (and report the job's end to GitHub, after its job-completed hook
	// tagged the instance) before the reconciler terminates it.
	DefaultCompletedGrace = 30 * time.Second
	// DefaultLifetimeSlack lets the instance's own watchdog act first: the
	// outside cap is the backstop for an instance a job made deaf to it.
	DefaultLifetimeSlack = 5 * time.Minute
	// DefaultStaleReservation: scale-up launches within its claim lease
	// (10 min) or recovers in the next; a reservation older than three
	// leases will not launch.
	DefaultStaleReservation = 30 * time.Minute
	// DefaultListLag: EC2's DescribeInstances is eventually consistent; an
	// instance launched less than this ago may be missing from a listing.
	DefaultListLag = 2 * time.Minute
	// DefaultMaxReplacements bounds the replacements of one job: enough
	// for a runner taken twice and a failed boot, not a launch loop.
	DefaultMaxReplacements = 3
)

// Policy is one pool's reaping policy.
type Policy struct {
	IdleTimeout time.Duration
	// BootTimeout counts from the launch, or from when the backend started
	// a runner it held in its queue (provider.Instance.RunningSince).
	BootTimeout time.Duration
	// QueueTimeout bounds a runner pending in its backend's own queue
	// (provider.Instance.QueueReason): such a runner is not a failed boot.
	QueueTimeout     time.Duration
	MaxLifetime      time.Duration
	OrphanGrace      time.Duration
	CompletedGrace   time.Duration
	LifetimeSlack    time.Duration
	StaleReservation time.Duration
	// MaxReplacements bounds the replacement runners of one job.
	MaxReplacements int
	// RerunInterrupted re-runs, once, a job that failed because its spot
	// instance was reclaimed, after its run completed.
	RerunInterrupted bool
}

// WithDefaults fills the zero fields: the pool defaults of package pool for
// the timeouts, and this package's for the rest.
func (p Policy) WithDefaults() Policy {
	set := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	set(&p.IdleTimeout, 10*time.Minute)
	set(&p.BootTimeout, 10*time.Minute)
	set(&p.QueueTimeout, time.Hour)
	set(&p.MaxLifetime, 6*time.Hour)
	set(&p.OrphanGrace, DefaultOrphanGrace)
	set(&p.CompletedGrace, DefaultCompletedGrace)
	set(&p.LifetimeSlack, DefaultLifetimeSlack)
	set(&p.StaleReservation, DefaultStaleReservation)
	if p.MaxReplacements <= 0 {
		p.MaxReplacements = DefaultMaxReplacements
	}
	return p
}

// GitHubRunner is a self-hosted runner as GitHub lists it.
type GitHubRunner struct {
	ID     int64
	Name   string
	Scope  string // the scope it was listed in ("org" or "owner/repo")
	Online bool
	Busy   bool
}

// Inputs is what one reconcile pass sees.
type Inputs struct {
	Now time.Time
	// Policy returns a pool's policy (with defaults); unknown pools get
	// Default.
	Policy  map[string]Policy
	Default Policy
	// Instances are the provider's skiff instances (alive and recently ended).
	Instances []provider.Instance
	// InstancesComplete: the listing ended without error, so an instance
	// missing from it is gone (after ListLag).
	InstancesComplete bool
	// Runners are GitHub's runners of every scope listed.
	Runners []GitHubRunner
	// RunnersComplete: every scope was listed to its last page, so a runner
	// missing from it may be gone (still confirmed before acting).
	RunnersComplete bool
	// Ledger are the live records of every pool.
	Ledger []ledger.Runner
	// Deployment is the deployment whose runners these are: a ghost must
	// carry its id in its name (names.OwnRunner); another deployment's
	// offline runners in the same organisation are left alone.
	Deployment string
	// ListLag is DefaultListLag when zero.
	ListLag time.Duration
}

// Advance is a state the ledger has not recorded yet that scale-down
// observed (GitHub lists the runner online, its busy flag, the hooks' tags).
// To StateLaunched links a record scale-up could not write its instance
// into to the instance tagged with its runner's name (Launch): the EC2
// events find a runner by its instance, a spot warning included.
type Advance struct {
	Runner string
	To     ledger.State
	At     time.Time
	// Launch is the instance the record learns (To StateLaunched only).
	Launch ledger.LaunchReport
}

// Action is what scale-down does about one runner, instance or job, in
// this order: delete the GitHub runner (a refusal because it is busy stops
// the action), terminate the instance, check whether the job is stranded
// (and replace it), end the ledger record.
type Action struct {
	Rule   Rule
	Reason string
	Pool   string
	// Runner is the runner's name; RunnerID and Scope name it on GitHub.
	Runner   string
	RunnerID int64
	Scope    string
	// InstanceID is the runner's instance.
	InstanceID string
	// JobID is the job the runner was launched for; Attempt its run attempt.
	JobID   int64
	RunID   int64
	Attempt int
	// Gen is the claim generation the runner's name carries (0: unknown).
	Gen int

	// Delete removes the runner from GitHub first.
	Delete bool
	// ConfirmAbsent asks GitHub once more that the runner is gone before
	// acting (a listing whose pages moved under it can miss a runner).
	ConfirmAbsent bool
	// ConfirmUnrecorded reads the runner's ledger record once more before
	// acting: scale-up reserves a runner before it registers it on GitHub,
	// so a runner registered after the pass read the ledger has a record
	// by now.
	ConfirmUnrecorded bool
	// Terminate terminates the instance.
	Terminate bool
	// Strand checks the job on GitHub and, if it is still queued, launches
	// a replacement (bounded by MaxReplacements).
	Strand bool
	// End ends the ledger record (always last, so that an action cut short
	// is decided again on the next pass).
	End bool
	// Interrupted: the runner's spot instance was reclaimed; with the
	// pool's RerunInterrupted, its failed job is re-run after its run
	// completes, and the record is ended only then.
	Interrupted bool
	// MaxReplacements is the pool's bound on replacements for this job.
	MaxReplacements int
	// RanJob is the job the runner ran when it is not JobID (another job
	// took the runner): the job an interruption failed.
	RanJob int64
	// RanUnknownSince is when the runner started a job the ledger does not
	// know (its hooks said a job started; no webhook event named it yet);
	// zero when the ledger knows the job, or saw none start.
	RanUnknownSince time.Time
}

// Kept is a runner scale-down left alone on purpose (busy), for logs and
// the kept counter.
type Kept struct {
	Rule   Rule
	Runner string
	Pool   string
	Reason string
}

// Decision is the outcome of one pass.
type Decision struct {
	Advances []Advance
	Actions  []Action
	Kept     []Kept
}

type observed struct {
	started, completed time.Time // the hooks' tags; zero when absent
}

func tagTime(tags map[string]string, key string) (time.Time, bool) {
	v, ok := tags[key]
	if !ok {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339, strings.TrimSpace(v))
	if err != nil {
		return time.Time{}, true // present but unreadable: the tag still says it happened
	}
	return t, true
}

// hooks reads the job hooks' tags: whether the job started and whether it
// completed, with their times (zero when unreadable).
func hooks(in *provider.Instance) (started, completed bool, o observed) {
	if in == nil {
		return false, false, o
	}
	o.started, started = tagTime(in.Tags, names.TagJobStarted)
	o.completed, completed = tagTime(in.Tags, names.TagJobCompleted)
	return started, completed, o
}

// Gen returns the claim generation in a runner name "<prefix><job>-<gen>", or 0.
func Gen(name string) int {
	i := strings.LastIndexByte(name, '-')
	if i < 0 {
		return 0
	}
	n := 0
	for _, c := range name[i+1:] {
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + int(c-'0')
	}
	return n
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Decide returns what to do at in.Now. It reads only its inputs. Each live
// ledger record is observed (what the ledger has not recorded yet) and
// judged (whether its runner ends, and why); then the instances without a
// live record, then GitHub's runners without either.
func Decide(in Inputs) Decision {
	v := newView(in)
	records := append([]ledger.Runner(nil), in.Ledger...)
	sort.Slice(records, func(i, j int) bool { return records[i].Name < records[j].Name })
	for _, r := range records {
		if ledger.IsWarm(r.Name) {
			// A warm machine waits for a job and registers none: DecideWarm's.
			v.named[r.Name] = true
			if r.InstanceID != "" {
				v.claimed[r.InstanceID] = true
			}
			continue
		}
		v.judge(v.observe(r))
	}
	v.orphans()
	v.ghosts()
	return v.d
}

// view is one pass's inputs, indexed, and the decision being built.
type view struct {
	in      Inputs
	now     time.Time
	byID    map[string]*provider.Instance
	byTag   map[string]*provider.Instance // by runner-name tag, an alive one first
	gh      map[string]*GitHubRunner
	claimed map[string]bool // instance ids with a live record
	named   map[string]bool // runner names with a live record
	d       Decision
}

func newView(in Inputs) *view {
	if in.ListLag <= 0 {
		in.ListLag = DefaultListLag
	}
	v := &view{in: in, now: in.Now, byID: make(map[string]*provider.Instance, len(in.Instances)),
		byTag: make(map[string]*provider.Instance, len(in.Instances)), gh: make(map[string]*GitHubRunner, len(in.Runners)),
		claimed: map[string]bool{}, named: map[string]bool{}}
	for i := range in.Instances {
		inst := &in.Instances[i]
		v.byID[inst.ID] = inst
		if n := inst.Tags[names.TagRunnerName]; n != "" {
			if prev := v.byTag[n]; prev == nil || inst.State.Alive() {
				v.byTag[n] = inst
			}
		}
	}
	for i := range in.Runners {
		v.gh[in.Runners[i].Name] = &in.Runners[i]
	}
	return v
}

func (v *view) policy(pool string) Policy {
	if p, ok := v.in.Policy[pool]; ok {
		return p.WithDefaults()
	}
	return v.in.Default.WithDefaults()
}

// seen is what a pass knows of one live ledger record's runner.
type seen struct {
	r    ledger.Runner
	p    Policy
	inst *provider.Instance // nil: not listed
	g    *GitHubRunner      // nil: not on GitHub
	base Action             // the fields every action on it carries
	// st is the record's state with this pass's advances.
	st                       ledger.State
	tagStarted, tagCompleted bool
	hooks                    observed
	busy                     bool
	strand                   bool      // its own job never ran on it: the job may still be queued
	launched                 time.Time // the instance's launch time, else the record's
	alive                    bool
}

// observe finds the record's instance and GitHub runner and advances the
// record to what they show (registered, job started, job completed).
func (v *view) observe(r ledger.Runner) seen {
	v.named[r.Name] = true
	s := seen{r: r, p: v.policy(r.Pool), inst: v.byID[r.InstanceID], g: v.gh[r.Name], st: r.State, launched: r.LaunchedAt}
	if s.inst == nil && r.InstanceID == "" {
		s.inst = v.byTag[r.Name]
		v.link(&s)
	}
	if s.inst != nil {
		v.claimed[s.inst.ID] = true
	}
	s.base = baseAction(r, s.inst, s.g, s.p)

	advance := func(to ledger.State, at time.Time) {
		if s.st < to && s.st.Live() {
			if at.IsZero() {
				at = v.now
			}
			v.d.Advances = append(v.d.Advances, Advance{Runner: r.Name, To: to, At: at})
			s.st = to
		}
	}
	g := s.g
	s.tagStarted, s.tagCompleted, s.hooks = hooks(s.inst)
	if g != nil && (g.Online || g.Busy) {
		advance(ledger.StateRegistered, time.Time{})
	}
	if s.tagStarted || (g != nil && g.Busy) {
		advance(ledger.StateJobStarted, s.hooks.started)
	}
	if s.tagCompleted && (!s.tagStarted || !s.hooks.completed.Before(s.hooks.started)) {
		advance(ledger.StateJobCompleted, s.hooks.completed)
	}
	s.busy = (g != nil && g.Busy) || s.st == ledger.StateJobStarted || (s.tagStarted && !s.tagCompleted)
	s.strand = r.BusyJob != r.JobID
	if s.inst != nil && !s.inst.LaunchedAt.IsZero() {
		s.launched = s.inst.LaunchedAt
	}
	s.alive = s.inst != nil && s.inst.State.Alive()
	return s
}

// link records in the ledger the instance a record without one was found
// by (its runner-name tag): scale-up launched it and failed to write it.
// Until it is written, the EC2 events cannot name the runner: its spot
// warning would be dropped, and the job it failed never re-run.
func (v *view) link(s *seen) {
	in := s.inst
	if in == nil {
		return
	}
	v.d.Advances = append(v.d.Advances, Advance{Runner: s.r.Name, To: ledger.StateLaunched, At: in.LaunchedAt,
		Launch: ledger.LaunchReport{InstanceID: in.ID, InstanceType: in.InstanceType, Zone: in.Zone, Spot: in.Capacity == provider.Spot,
			At: in.LaunchedAt}})
	s.st = max(s.st, ledger.StateLaunched)
}

// baseAction is an action on a record's runner with nothing decided yet.
func baseAction(r ledger.Runner, inst *provider.Instance, g *GitHubRunner, p Policy) Action {
	a := Action{Pool: r.Pool, Runner: r.Name, JobID: r.JobID, RunID: r.RunID, Attempt: r.Attempt, Gen: Gen(r.Name),
		MaxReplacements: p.MaxReplacements, Interrupted: !r.InterruptedAt.IsZero() && p.RerunInterrupted,
		InstanceID: r.InstanceID}
	if r.BusyJob != r.JobID {
		a.RanJob = r.BusyJob
	}
	if r.BusyJob == 0 {
		a.RanUnknownSince = r.StartedAt
	}
	if inst != nil {
		a.InstanceID = inst.ID
	}
	if g != nil {
		a.RunnerID, a.Scope = g.ID, g.Scope
	}
	return a
}

// act records an action on the record's runner: base with rule and reason.
func (v *view) act(s seen, rule Rule, reason string, set func(a *Action)) {
	a := s.base
	a.Rule, a.Reason = rule, reason
	set(&a)
	v.d.Actions = append(v.d.Actions, a)
}

// judge decides whether the record's runner ends: its instance never
// launched or is gone, it outlived the pool's lifetime, it is busy (kept),
// or its state has outlasted the pool's timeout for it.
func (v *view) judge(s seen) {
	r, g, now := s.r, s.g, v.now
	switch {
	case r.InstanceID == "" && s.inst == nil:
		if r.State == ledger.StateReserved && !r.ReservedAt.IsZero() && now.Sub(r.ReservedAt) > s.p.StaleReservation {
			v.act(s, RuleStaleReservation, "reserved "+now.Sub(r.ReservedAt).Round(time.Second).String()+" ago and never launched",
				func(a *Action) { a.End, a.Strand = true, true })
		}
		return
	case !s.alive && (s.inst != nil || v.in.InstancesComplete && now.Sub(s.launched) > v.in.ListLag):
		reason := "instance is gone"
		if s.inst != nil {
			reason = "instance is " + string(s.inst.State)
		}
		v.act(s, RuleInstanceGone, reason, func(a *Action) {
			a.End, a.Strand = true, s.strand
			a.Delete = g != nil && !g.Busy && !g.Online
		})
		return
	case !s.alive:
		return // not listed yet: launched a moment ago
	}
	if age := now.Sub(s.launched); !s.launched.IsZero() && age > s.p.MaxLifetime+s.p.LifetimeSlack {
		v.act(s, RuleMaxLifetime, "instance is "+age.Round(time.Second).String()+" old; the pool's maximum lifetime is "+s.p.MaxLifetime.String(),
			func(a *Action) { a.Terminate, a.End, a.Strand, a.Delete = true, true, s.strand, g != nil && !g.Busy })
		return
	}
	if s.busy {
		v.d.Kept = append(v.d.Kept, Kept{Rule: RuleBusy, Runner: r.Name, Pool: r.Pool, Reason: busyReason(g, s.st, s.tagStarted, s.tagCompleted)})
		if r.BusyJob != 0 && r.BusyJob != r.JobID {
			v.act(s, RuleTaken, "runner is running another job", func(a *Action) { a.Strand = true })
		}
		return
	}
	v.byState(s)
}

// byState applies the timeout of the state an alive, idle runner is in:
// completed, registered (idle, or gone from GitHub), pending in its
// backend's queue, or booting.
func (v *view) byState(s seen) {
	r, g, p, inst, now := s.r, s.g, s.p, s.inst, v.now
	age := now.Sub(s.launched)
	ends := func(a *Action) { a.Terminate, a.End, a.Strand = true, true, s.strand }
	switch {
	case s.st == ledger.StateJobCompleted:
		done := later(r.CompletedAt, s.hooks.completed)
		// A completion gets a grace, however it was reported: the hook runs
		// before the runner tells GitHub the job is over, and a runner whose
		// job GitHub reports completed is still exiting on its own (a Slurm
		// batch job cancelled then would be accounted CANCELLED, not
		// COMPLETED). A runner that exits in the grace ends as gone.
		if !done.IsZero() && now.Sub(done) < p.CompletedGrace {
			return
		}
		reason := "job completed"
		if !done.IsZero() {
			reason += " " + now.Sub(done).Round(time.Second).String() + " ago"
		}
		v.act(s, RuleJobCompleted, reason, ends)
	case s.st >= ledger.StateRegistered && g == nil:
		if !v.in.RunnersComplete {
			return
		}
		v.act(s, RuleRunnerGone, "registered runner is no longer on GitHub", func(a *Action) { ends(a); a.ConfirmAbsent = true })
	case s.st >= ledger.StateRegistered:
		since := later(r.RegisteredAt, s.launched)
		if r.RegisteredAt.IsZero() {
			since = now // registered just now, by this pass
		}
		if idle := now.Sub(since); idle >= p.IdleTimeout {
			v.act(s, RuleIdle, "no job for "+idle.Round(time.Second).String()+"; idle timeout "+p.IdleTimeout.String(),
				func(a *Action) { ends(a); a.Delete = true })
		}
	case inst.QueueReason != "": // held in the backend's own queue: not booting yet
		if !s.launched.IsZero() && age >= p.QueueTimeout {
			v.act(s, RuleQueueTimeout, "pending in the backend's queue ("+inst.QueueReason+") "+age.Round(time.Second).String()+
				" after launch; queue timeout "+p.QueueTimeout.String(), func(a *Action) { ends(a); a.Delete = g != nil })
		}
	default: // launched, not registered
		if !inst.RunningSince.IsZero() {
			age = now.Sub(inst.RunningSince) // it booted only when it left the queue
		}
		if !s.launched.IsZero() && age >= p.BootTimeout {
			v.act(s, RuleBootTimeout, "runner not registered "+age.Round(time.Second).String()+" after launch; boot timeout "+p.BootTimeout.String(),
				func(a *Action) { ends(a); a.Delete = g != nil })
		}
	}
}

// orphans decides the alive skiff instances without a live record.
func (v *view) orphans() {
	for i := range v.in.Instances {
		inst := &v.in.Instances[i]
		if v.claimed[inst.ID] || !inst.State.Alive() || inst.Tags[names.TagManaged] != names.ManagedValue {
			continue
		}
		if ledger.IsWarm(inst.Tags[names.TagRunnerName]) {
			continue // a warm machine not handed to a job yet: DecideWarm's
		}
		if n := inst.Tags[names.TagRunnerName]; n != "" && v.named[n] && v.byTag[n] == inst {
			continue // its record has not learnt the instance id yet
		}
		p := v.policy(inst.Pool)
		age := v.now.Sub(inst.LaunchedAt)
		tagStarted, tagCompleted, _ := hooks(inst)
		name := inst.Tags[names.TagRunnerName]
		g := v.gh[name]
		busy := (g != nil && g.Busy) || (tagStarted && !tagCompleted)
		a := Action{Pool: inst.Pool, Runner: name, InstanceID: inst.ID, Terminate: true, MaxReplacements: p.MaxReplacements}
		if g != nil {
			a.RunnerID, a.Scope, a.Delete = g.ID, g.Scope, !g.Busy
		}
		switch {
		case age > p.MaxLifetime+p.LifetimeSlack:
			a.Rule = RuleMaxLifetime
			a.Reason = "instance without a runner record is " + age.Round(time.Second).String() + " old"
			v.d.Actions = append(v.d.Actions, a)
		case busy:
			v.d.Kept = append(v.d.Kept, Kept{Rule: RuleBusy, Runner: name, Pool: inst.Pool, Reason: "orphan instance is running a job"})
		case age > p.OrphanGrace:
			a.Rule = RuleOrphan
			a.Reason = "skiff instance without a live runner record, " + age.Round(time.Second).String() + " old"
			v.d.Actions = append(v.d.Actions, a)
		}
	}
}

// ghosts decides GitHub's offline skiff runners without a live record or
// an alive instance.
func (v *view) ghosts() {
	for i := range v.in.Runners {
		g := &v.in.Runners[i]
		if v.named[g.Name] || g.Busy || g.Online || !names.OwnRunner(v.in.Deployment, g.Name) {
			continue
		}
		if inst := v.byTag[g.Name]; inst != nil && inst.State.Alive() {
			continue // its orphan instance is handled above
		}
		v.d.Actions = append(v.d.Actions, Action{Rule: RuleGhost, Runner: g.Name, RunnerID: g.ID, Scope: g.Scope, Delete: true,
			ConfirmUnrecorded: true, Reason: "offline runner with no instance and no live record"})
	}
}

func busyReason(g *GitHubRunner, st ledger.State, started, completed bool) string {
	var why []string
	if g != nil && g.Busy {
		why = append(why, "GitHub says busy")
	}
	if st == ledger.StateJobStarted {
		why = append(why, "the ledger saw its job start")
	}
	if started && !completed {
		why = append(why, "its job-started tag has no job-completed tag")
	}
	return strings.Join(why, "; ")
}
