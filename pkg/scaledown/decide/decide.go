// Package decide holds scale-down's decisions: pure functions over plain
// values — the provider's instances, GitHub's runners and the runner
// ledger's live records at a given time — that say which runner to reap,
// which record to end and which job may be stranded, each with its rule and
// a reason. It imports no SDK and no network code (make lint checks it).
//
// A runner moves through the ledger's states (package launch); scale-down
// reads each record against what the provider and GitHub say now:
//
//	reserved ─(no instance after StaleReservation)──────────────▶ end, strand check
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

	"github.com/skiffci/skiff/pkg/launch"
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
	// crashed scale-up recovers its fleet, and records the instance in the
	// ledger, within it.
	DefaultOrphanGrace = 15 * time.Minute
	// DefaultCompletedGrace lets the runner report the job's end to GitHub
	// after its job-completed hook tagged the instance.
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
	// DefaultRunnerPrefix starts every runner name skiff registers
	// (scaler.RunnerName); a ghost must have it.
	DefaultRunnerPrefix = "skiff-"
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

// Runner is a self-hosted runner as GitHub lists it.
type Runner struct {
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
	Runners []Runner
	// RunnersComplete: every scope was listed to its last page, so a runner
	// missing from it may be gone (still confirmed before acting).
	RunnersComplete bool
	// Ledger are the live records of every pool.
	Ledger []launch.Runner
	// RunnerPrefix starts skiff's runner names (default DefaultRunnerPrefix).
	RunnerPrefix string
	// ListLag is DefaultListLag when zero.
	ListLag time.Duration
}

// Advance is a state the ledger has not recorded yet that scale-down
// observed (GitHub lists the runner online, its busy flag, the hooks' tags).
type Advance struct {
	Runner string
	To     launch.State
	At     time.Time
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

// Decide returns what to do at in.Now. It reads only its inputs.
func Decide(in Inputs) Decision {
	if in.RunnerPrefix == "" {
		in.RunnerPrefix = DefaultRunnerPrefix
	}
	if in.ListLag <= 0 {
		in.ListLag = DefaultListLag
	}
	policy := func(pool string) Policy {
		if p, ok := in.Policy[pool]; ok {
			return p.WithDefaults()
		}
		return in.Default.WithDefaults()
	}
	byID := make(map[string]*provider.Instance, len(in.Instances))
	byTag := make(map[string]*provider.Instance, len(in.Instances))
	for i := range in.Instances {
		inst := &in.Instances[i]
		byID[inst.ID] = inst
		if n := inst.Tags[names.TagRunnerName]; n != "" {
			if prev := byTag[n]; prev == nil || inst.State.Alive() {
				byTag[n] = inst
			}
		}
	}
	gh := make(map[string]*Runner, len(in.Runners))
	for i := range in.Runners {
		gh[in.Runners[i].Name] = &in.Runners[i]
	}
	now := in.Now
	var d Decision
	claimed := map[string]bool{} // instance ids with a live record
	named := map[string]bool{}   // runner names with a live record

	ledger := append([]launch.Runner(nil), in.Ledger...)
	sort.Slice(ledger, func(i, j int) bool { return ledger[i].Name < ledger[j].Name })
	for _, r := range ledger {
		named[r.Name] = true
		p := policy(r.Pool)
		inst := byID[r.InstanceID]
		if inst == nil && r.InstanceID == "" {
			inst = byTag[r.Name]
		}
		if inst != nil {
			claimed[inst.ID] = true
		}
		g := gh[r.Name]
		base := Action{Pool: r.Pool, Runner: r.Name, JobID: r.JobID, RunID: r.RunID, Attempt: r.Attempt, Gen: Gen(r.Name),
			MaxReplacements: p.MaxReplacements, Interrupted: !r.InterruptedAt.IsZero() && p.RerunInterrupted}
		if r.BusyJob != r.JobID {
			base.RanJob = r.BusyJob
		}
		if r.BusyJob == 0 {
			base.RanUnknownSince = r.StartedAt
		}
		if inst != nil {
			base.InstanceID = inst.ID
		} else {
			base.InstanceID = r.InstanceID
		}
		if g != nil {
			base.RunnerID, base.Scope = g.ID, g.Scope
		}

		// What the ledger has not recorded yet.
		st := r.State
		advance := func(to launch.State, at time.Time) {
			if st < to && st.Live() {
				if at.IsZero() {
					at = now
				}
				d.Advances = append(d.Advances, Advance{Runner: r.Name, To: to, At: at})
				st = to
			}
		}
		tagStarted, tagCompleted, o := hooks(inst)
		if g != nil && (g.Online || g.Busy) {
			advance(launch.StateRegistered, time.Time{})
		}
		if tagStarted || (g != nil && g.Busy) {
			advance(launch.StateJobStarted, o.started)
		}
		if tagCompleted && (!tagStarted || !o.completed.Before(o.started)) {
			advance(launch.StateJobCompleted, o.completed)
		}
		busy := (g != nil && g.Busy) || st == launch.StateJobStarted || (tagStarted && !tagCompleted)
		ranOwn := r.BusyJob == r.JobID
		strand := !ranOwn // its own job never ran on it: the job may still be queued

		launched := r.LaunchedAt
		if inst != nil && !inst.LaunchedAt.IsZero() {
			launched = inst.LaunchedAt
		}
		alive := inst != nil && inst.State.Alive()

		switch {
		case r.InstanceID == "" && inst == nil:
			if r.State == launch.StateReserved && !r.ReservedAt.IsZero() && now.Sub(r.ReservedAt) > p.StaleReservation {
				a := base
				a.Rule, a.End, a.Strand = RuleStaleReservation, true, true
				a.Reason = "reserved " + now.Sub(r.ReservedAt).Round(time.Second).String() + " ago and never launched"
				d.Actions = append(d.Actions, a)
			}
			continue
		case !alive && (inst != nil || in.InstancesComplete && now.Sub(launched) > in.ListLag):
			a := base
			a.Rule, a.End, a.Strand = RuleInstanceGone, true, strand
			a.Reason = "instance is gone"
			if inst != nil {
				a.Reason = "instance is " + string(inst.State)
			}
			if g != nil && !g.Busy && !g.Online {
				a.Delete = true
			}
			d.Actions = append(d.Actions, a)
			continue
		case !alive:
			continue // not listed yet: launched a moment ago
		}

		age := now.Sub(launched)
		if !launched.IsZero() && age > p.MaxLifetime+p.LifetimeSlack {
			a := base
			a.Rule, a.Terminate, a.End, a.Strand = RuleMaxLifetime, true, true, strand
			a.Reason = "instance is " + age.Round(time.Second).String() + " old; the pool's maximum lifetime is " + p.MaxLifetime.String()
			a.Delete = g != nil && !g.Busy
			d.Actions = append(d.Actions, a)
			continue
		}
		if busy {
			d.Kept = append(d.Kept, Kept{Rule: RuleBusy, Runner: r.Name, Pool: r.Pool, Reason: busyReason(g, st, tagStarted, tagCompleted)})
			if r.BusyJob != 0 && r.BusyJob != r.JobID {
				a := base
				a.Rule, a.Strand = RuleTaken, true
				a.Reason = "runner is running another job"
				d.Actions = append(d.Actions, a)
			}
			continue
		}
		switch {
		case st == launch.StateJobCompleted:
			done := later(r.CompletedAt, o.completed)
			// A completion only the hook reported gets a grace: the hook runs
			// before the runner tells GitHub the job is over.
			if r.State < launch.StateJobCompleted && !o.completed.IsZero() && now.Sub(o.completed) < p.CompletedGrace {
				continue
			}
			a := base
			a.Rule, a.Terminate, a.End, a.Strand = RuleJobCompleted, true, true, strand
			a.Reason = "job completed"
			if !done.IsZero() {
				a.Reason += " " + now.Sub(done).Round(time.Second).String() + " ago"
			}
			d.Actions = append(d.Actions, a)
		case st >= launch.StateRegistered && g == nil:
			if !in.RunnersComplete {
				continue
			}
			a := base
			a.Rule, a.Terminate, a.End, a.Strand, a.ConfirmAbsent = RuleRunnerGone, true, true, strand, true
			a.Reason = "registered runner is no longer on GitHub"
			d.Actions = append(d.Actions, a)
		case st >= launch.StateRegistered:
			since := later(r.RegisteredAt, launched)
			if r.RegisteredAt.IsZero() {
				since = now // registered just now, by this pass
			}
			if idle := now.Sub(since); idle >= p.IdleTimeout {
				a := base
				a.Rule, a.Delete, a.Terminate, a.End, a.Strand = RuleIdle, true, true, true, strand
				a.Reason = "no job for " + idle.Round(time.Second).String() + "; idle timeout " + p.IdleTimeout.String()
				d.Actions = append(d.Actions, a)
			}
		case inst.QueueReason != "": // held in the backend's own queue: not booting yet
			if !launched.IsZero() && age > p.QueueTimeout {
				a := base
				a.Rule, a.Terminate, a.End, a.Strand = RuleQueueTimeout, true, true, strand
				a.Delete = g != nil
				a.Reason = "pending in the backend's queue (" + inst.QueueReason + ") " + age.Round(time.Second).String() +
					" after launch; queue timeout " + p.QueueTimeout.String()
				d.Actions = append(d.Actions, a)
			}
		default: // launched, not registered
			if !inst.RunningSince.IsZero() {
				age = now.Sub(inst.RunningSince) // it booted only when it left the queue
			}
			if !launched.IsZero() && age > p.BootTimeout {
				a := base
				a.Rule, a.Terminate, a.End, a.Strand = RuleBootTimeout, true, true, strand
				a.Delete = g != nil
				a.Reason = "runner not registered " + age.Round(time.Second).String() + " after launch; boot timeout " + p.BootTimeout.String()
				d.Actions = append(d.Actions, a)
			}
		}
	}

	// Instances without a live record.
	for i := range in.Instances {
		inst := &in.Instances[i]
		if claimed[inst.ID] || !inst.State.Alive() || inst.Tags[names.TagManaged] != names.ManagedValue {
			continue
		}
		if n := inst.Tags[names.TagRunnerName]; n != "" && named[n] && byTag[n] == inst {
			continue // its record has not learnt the instance id yet
		}
		p := policy(inst.Pool)
		age := now.Sub(inst.LaunchedAt)
		tagStarted, tagCompleted, _ := hooks(inst)
		name := inst.Tags[names.TagRunnerName]
		g := gh[name]
		busy := (g != nil && g.Busy) || (tagStarted && !tagCompleted)
		a := Action{Pool: inst.Pool, Runner: name, InstanceID: inst.ID, Terminate: true, MaxReplacements: p.MaxReplacements}
		if g != nil {
			a.RunnerID, a.Scope, a.Delete = g.ID, g.Scope, !g.Busy
		}
		switch {
		case age > p.MaxLifetime+p.LifetimeSlack:
			a.Rule = RuleMaxLifetime
			a.Reason = "instance without a runner record is " + age.Round(time.Second).String() + " old"
			d.Actions = append(d.Actions, a)
		case busy:
			d.Kept = append(d.Kept, Kept{Rule: RuleBusy, Runner: name, Pool: inst.Pool, Reason: "orphan instance is running a job"})
		case age > p.OrphanGrace:
			a.Rule = RuleOrphan
			a.Reason = "skiff instance without a live runner record, " + age.Round(time.Second).String() + " old"
			d.Actions = append(d.Actions, a)
		}
	}

	// GitHub runners without a live record or an instance.
	for i := range in.Runners {
		g := &in.Runners[i]
		if named[g.Name] || g.Busy || g.Online || !strings.HasPrefix(g.Name, in.RunnerPrefix) {
			continue
		}
		if inst := byTag[g.Name]; inst != nil && inst.State.Alive() {
			continue // its orphan instance is handled above
		}
		d.Actions = append(d.Actions, Action{Rule: RuleGhost, Runner: g.Name, RunnerID: g.ID, Scope: g.Scope, Delete: true,
			Reason: "offline runner with no instance and no live record"})
	}
	return d
}

func busyReason(g *Runner, st launch.State, started, completed bool) string {
	var why []string
	if g != nil && g.Busy {
		why = append(why, "GitHub says busy")
	}
	if st == launch.StateJobStarted {
		why = append(why, "the ledger saw its job start")
	}
	if started && !completed {
		why = append(why, "its job-started tag has no job-completed tag")
	}
	return strings.Join(why, "; ")
}
