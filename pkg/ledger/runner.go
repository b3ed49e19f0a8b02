package ledger

import (
	"fmt"
	"time"

	"github.com/skiffci/skiff/pkg/names"
)

// State is how far a runner got. The order of the constants is the order a
// runner moves through. A reservation that never launched ends in
// StateTerminated like any other runner, its Reason saying why it did not
// launch ("not_launched"): releasing a reservation is not a state.
type State int

// The runner states, in order.
const (
	StateUnknown State = iota
	StateReserved
	StateLaunched
	StateRegistered
	StateJobStarted
	StateJobCompleted
	StateTerminated
)

var stateNames = [...]string{"unknown", "reserved", "launched", "registered", "job_started", "job_completed", "terminated"}

// String names the state for logs and `skiff status`.
func (s State) String() string {
	if s < 0 || int(s) >= len(stateNames) {
		return "unknown"
	}
	return stateNames[s]
}

// ParseState is String's inverse.
func ParseState(name string) (State, error) {
	for i, n := range stateNames {
		if n == name && i > 0 {
			return State(i), nil
		}
	}
	return StateUnknown, fmt.Errorf("unknown runner state %q", name)
}

// Live reports whether a runner in this state counts toward its pool: from
// reserved until terminated.
func (s State) Live() bool { return s >= StateReserved && s < StateTerminated }

// Busy reports whether the ledger saw the runner's job start and not finish:
// such a runner is never reaped, whatever GitHub's busy flag says.
func (s State) Busy() bool { return s == StateJobStarted }

// Runner is one runner's ledger record. Zero times mean "not yet".
type Runner struct {
	// Name is the runner's name (decide.RunnerName): the record's key.
	Name    string
	Pool    string
	JobID   int64
	RunID   int64
	Attempt int
	// Token is the token of the launch that made it.
	Token string
	State State
	// Instance facts, set at launch.
	InstanceID   string
	InstanceType string
	Zone         string
	Spot         bool
	// StartKind is how the runner's machine started for its job
	// (StartCold, StartStopped, StartHot), as its launch reported it; ""
	// when no launch report said (an instance the reconciler linked).
	StartKind string
	// BusyJob is the job the runner was seen running (the job it was
	// launched for, or another one with matching labels).
	BusyJob int64
	// Reason says why the runner ended (not_launched for a released
	// reservation, terminated by the reconciler and why, a state-change
	// event).
	Reason       string
	ReservedAt   time.Time
	LaunchedAt   time.Time
	RegisteredAt time.Time
	StartedAt    time.Time
	CompletedAt  time.Time
	EndedAt      time.Time
	ExpiresAt    time.Time
	// InterruptedAt is when EC2 warned that the spot instance will be
	// reclaimed (two minutes ahead); it does not move the state.
	InterruptedAt time.Time
}

// The start kinds of a runner's machine (Runner.StartKind).
const (
	// StartCold: launched for the job (an EC2 instance from its image, a
	// local process, pod or batch job).
	StartCold = "cold"
	// StartStopped: a stopped EC2 instance started for the job.
	StartStopped = "stopped"
	// StartHot: a running instance that waited for its registration.
	StartHot = "hot"
)

// IsWarm reports whether name is a warm machine's record
// (names.WarmRunnerName): a machine launched ahead of any job, counted
// toward its pool like a runner. It has no job; a job takes it by ending
// it (Ledger.End's first call wins) and recording its own runner on the
// machine. Its state says how far it got: launched (booting), registered
// (ready: waiting for a job's registration, stopped or hot).
func IsWarm(name string) bool {
	_, _, ok := names.ParseWarmRunnerName(name)
	return ok
}

// WarmKindOf is a warm record's kind ("stopped", "hot"), "" for a job's runner.
func WarmKindOf(name string) string {
	kind, _, _ := names.ParseWarmRunnerName(name)
	return kind
}

// LaunchReport is what scale-up learns when the provider returns a runner's instance.
type LaunchReport struct {
	InstanceID   string
	InstanceType string
	Zone         string
	Spot         bool
	// StartKind is how the machine started (StartCold, ...); "" unknown.
	StartKind string
	At        time.Time
}

// Launched returns r with its instance recorded: each fact r lacks is
// filled (a record past launched keeps what it has, as a repeated or late
// report must change nothing), and a reserved runner moves to launched.
func Launched(r Runner, l LaunchReport) Runner {
	if r.InstanceID == "" {
		r.InstanceID, r.Spot = l.InstanceID, l.Spot
	}
	if r.InstanceType == "" {
		r.InstanceType = l.InstanceType
	}
	if r.Zone == "" {
		r.Zone = l.Zone
	}
	if r.StartKind == "" {
		r.StartKind = l.StartKind
	}
	if r.LaunchedAt.IsZero() {
		r.LaunchedAt = l.At
	}
	if r.State < StateLaunched {
		r.State = StateLaunched
	}
	return r
}

// Reported reports whether to is a state the ledger's Advance accepts: the
// ones the runner's progress is reported in (registered, job started, job
// completed); reserved, launched and terminated have their own writers.
func Reported(to State) bool {
	return to == StateRegistered || to == StateJobStarted || to == StateJobCompleted
}

// Advance returns r moved forward to state to at time at (for job started
// and job completed, on job job): a report of a state r already passed only
// fills a time r still lacks, and one for an ended runner changes nothing
// but the missing times. It reports whether the state moved.
func Advance(r Runner, to State, at time.Time, job int64) (Runner, bool) {
	fill := func(t *time.Time) {
		if t.IsZero() {
			*t = at
		}
	}
	switch to {
	case StateRegistered:
		fill(&r.RegisteredAt)
	case StateJobStarted:
		fill(&r.StartedAt)
		if r.BusyJob == 0 {
			r.BusyJob = job
		}
	case StateJobCompleted:
		fill(&r.CompletedAt)
		if r.BusyJob == 0 {
			r.BusyJob = job
		}
	case StateTerminated:
		fill(&r.EndedAt)
	}
	if to <= r.State {
		return r, false
	}
	r.State = to
	return r, true
}
