// Package provider is the compute port: where skiff's runners run. Scale-up
// launches through it, the reconciler lists and terminates through it, and
// the metrics records read what it says about each instance. Its words are
// neutral — a launch, an instance, a capacity or quota error — and never an
// EC2 (or any backend's) type.
//
// Implementations: EC2 (package ec2: EC2 Fleet, the registration table),
// dry-run (package provider/dryrun: logs and keeps instances in memory), and
// the local process provider of `skiff local`. Every implementation passes the
// conformance suite in provider/providertest.
//
// A launch goes in two steps, so that it can be recorded before it happens
// and replayed exactly after a crash:
//
//	Plan(Launch) ──► Plan (opaque; the caller stores it) ──► Launch(plan, registrations)
//	                                                     └─► after a crash: Launch(plan, nil)
//
// Launching the same plan again returns the instances the first call
// launched where the backend can tell (EC2's ClientToken), and never more
// than the plan's runners.
//
// A launch's pool.Spec is the shared part every provider reads and the
// part of the pool's backend, which only that backend's provider reads
// (the EC2 provider refuses a spec without an EC2 part). Each runner's
// Registration carries its JIT configuration (or token) and its identity;
// the provider delivers it its own way. A provider states its
// Capabilities, and a runner held in the backend's own queue is listed
// Pending with its QueueReason.
package provider

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/pool"
)

// Provider launches, lists and terminates runner instances. Every method is
// safe for concurrent use and bounded by its context.
//
// Errors: every error a Provider returns wraps one of the kinds in errors.go
// (ErrCapacity, ErrQuota, ErrInvalid, ErrThrottled, ErrTransient), so that
// callers choose retry, fallback or drop with errors.Is and never look at a
// backend's codes.
type Provider interface {
	// Name is the provider's name as it appears in logs and in metrics
	// records' cloudProvider: "aws", "dry-run", "process".
	Name() string
	// Capabilities states what the provider can do for a pool: spot,
	// dynamic sizes, GPUs, replay by token, a queue of its own, usage
	// sources. A provider of one backend states pool.Declared's entry for
	// it (validate and plan check pools against that, offline); the
	// conformance suite checks both the statement and that it is honoured.
	Capabilities() Capabilities
	// Plan turns a launch into the provider's plan: plain data the caller
	// stores before launching. It fails with ErrInvalid when the launch
	// cannot be expressed (no subnet, no image, a bad token).
	Plan(ctx context.Context, l Launch) (Plan, error)
	// Launch launches the plan's runners and delivers each its registration
	// (regs, aligned with the plan's runners) the backend's own way. With regs nil it is a replay
	// after a crash: it returns what the plan launched before (where the
	// backend can tell), delivers nothing, and does not launch runners that
	// could not get a registration. It returns an error only when nothing
	// was launched; a partial launch is a Result with per-runner errors.
	Launch(ctx context.Context, plan Plan, regs []Registration) (Result, error)
	// List returns the instances matching f, alive or recently ended, with
	// their tags. An instance that is gone for good may be absent.
	List(ctx context.Context, f Filter) ([]Instance, error)
	// Terminate ends the instances. It is idempotent: an id already gone, or
	// unknown, is not an error, and never spares the other ids.
	Terminate(ctx context.Context, ids []string) error
}

// Placer is implemented by a provider whose backend has places a launch
// may find without capacity while others have some (EC2: instance types in
// zones). Place names the set of places a launch of spec asks for, as a
// short stable string; the waiting room keeps one capacity backoff per
// pool and place. A provider without it has one place: the pool.
type Placer interface {
	Place(spec pool.Spec) string
}

// PlaceOf is p's place for spec: "" (the pool as a whole) when p has no
// places.
func PlaceOf(p Provider, spec pool.Spec) string {
	if pl, ok := p.(Placer); ok {
		return pl.Place(spec)
	}
	return ""
}

// Capabilities are what a provider can do for a pool (pool.Capabilities).
type Capabilities = pool.Capabilities

// Launch is what scale-up asks for: Runners identical runners of one pool's
// launch spec, in one request.
type Launch struct {
	// Token is the launch's idempotency token, derived from the jobs and
	// their attempts: the same jobs at the same attempts give the same token.
	// At most MaxTokenLen characters of [A-Za-z0-9-].
	Token string
	// Spec is the resolved launch spec: the shared part, and the part of
	// the pool's backend, which only that backend's provider reads.
	Spec pool.Spec
	// Runners are the runners to launch, one per job.
	Runners []RunnerRequest
}

// MaxTokenLen bounds a launch token (EC2's ClientToken is 64 characters,
// less a suffix for the on-demand fallback).
const MaxTokenLen = 61

// Check is the part of Plan's validation every provider shares: a token
// of 1 to MaxTokenLen characters and at least one runner, refused as a
// final ErrInvalid.
func (l Launch) Check() error {
	switch {
	case l.Token == "" || len(l.Token) > MaxTokenLen:
		return &Error{Kind: ErrInvalid, Code: "InvalidToken", Message: "the launch token must be 1 to 61 characters", Final: true}
	case len(l.Runners) == 0:
		return &Error{Kind: ErrInvalid, Code: "NoRunners", Message: "a launch needs at least one runner", Final: true}
	}
	return nil
}

// SpecPart is where Plan starts for a backend whose part of the spec a
// provider-wide default may stand in for (container, kubernetes): Check, a
// pool name, then the launch's own part, else def. A launch with neither
// is refused as a final ErrInvalid naming section, the part's key in a
// pool file ("container").
func SpecPart[T any](l Launch, part, def *T, section string) (*T, error) {
	if err := l.Check(); err != nil {
		return nil, err
	}
	if l.Spec.Pool == "" {
		return nil, Invalid("NoPool", "a launch needs a pool")
	}
	if part == nil {
		part = def
	}
	if part == nil {
		return nil, Invalid("No"+strings.ToUpper(section[:1])+section[1:]+"Section", fmt.Sprintf("pool %s has no %s: section", l.Spec.Pool, section))
	}
	return part, nil
}

// Lifetime is how long the launch's runners may live: the spec's
// MaxLifetime, or def where the spec sets none.
func (l Launch) Lifetime(def time.Duration) time.Duration {
	if l.Spec.MaxLifetime <= 0 {
		return def
	}
	return l.Spec.MaxLifetime
}

// LaunchName is the name a backend that names its runners itself gives
// one runner of a launch: "skiff-" and 20 hex digits of a hash of token
// and runner (26 characters, a DNS-1123 label), so that the same token and
// runner always give the same name and a replay finds what it made.
func LaunchName(token, runner string) string {
	sum := sha256.Sum256([]byte(token + "\x00" + runner))
	return "skiff-" + hex.EncodeToString(sum[:10])
}

// RunnerRequest is one runner of a launch: the job it is for.
type RunnerRequest struct {
	// Name is the runner's name as registered with GitHub (unique per
	// registration).
	Name       string
	JobID      int64
	RunID      int64
	Repository string // owner/name
	Owner      string
	// Warm is how a warm machine launched ahead of any job waits
	// (pool.WarmStopped, pool.WarmHot); "" for a job's runner. A warm
	// runner has no job (JobID 0) and its registration is ModeWarm.
	Warm pool.WarmKind
}

// Tags are the tags that mark runner r, launched for poolName under token,
// as skiff's and say which job it is for: what a backend that keeps its
// own tags gives back in List (names.Tag*).
func (r RunnerRequest) Tags(poolName, token string) map[string]string {
	return map[string]string{
		names.TagManaged: names.ManagedValue, names.TagPool: poolName, names.TagLaunchToken: token,
		names.TagJobID: strconv.FormatInt(r.JobID, 10), names.TagRunID: strconv.FormatInt(r.RunID, 10),
		names.TagRunnerName: r.Name, names.TagRepository: r.Repository, names.TagOwner: r.Owner,
	}
}

// Warmer is implemented by a provider whose machines can be launched
// ahead of their jobs and wait, stopped or hot (EC2; docs/warm-pools.md).
// A warm machine is launched with Plan and Launch like any other, its
// Runner carrying Warm and its Registration ModeWarm.
type Warmer interface {
	// Stop stops running machines: warm machines ready to wait stopped.
	// An id already stopped, or gone, is not an error.
	Stop(ctx context.Context, ids []string) error
	// Hand gives a warm machine to a job's runner: it tags the machine with
	// the runner (its name, job, run and repository), starts it when it
	// waits stopped, and delivers the registration. On an error the job
	// did not get the machine: the caller terminates it and launches cold.
	Hand(ctx context.Context, h Handover) (Instance, error)
}

// Handover is a warm machine given to one job's runner.
type Handover struct {
	InstanceID string
	// Kind is how the machine waited: a stopped one is started.
	Kind         pool.WarmKind
	Runner       RunnerRequest
	Registration Registration
}

// Plan is a provider's launch plan: opaque to the caller, who stores it with
// the launch's intent and hands it back to Launch (and to Launch again after
// a crash).
type Plan string

// BeginLaunch is what every Launch does first: it refuses an ended ctx (a
// transient error coded Canceled), decodes pl, a plan this backend's Plan
// made, into v, and checks it against the registrations Launch was given.
// whole, called after decoding, reports whether v is complete (its token,
// its image) and how many runners it has. A plan that does not decode, is
// not whole or has no runners, and registrations that are not one per
// runner (nil is a replay's, and always fits), are final ErrInvalid: no
// retry reads them otherwise.
func BeginLaunch(ctx context.Context, pl Plan, v any, backend string, regs []Registration, whole func() (ok bool, runners int)) error {
	if err := ctx.Err(); err != nil {
		return Canceled(err)
	}
	if err := json.Unmarshal([]byte(pl), v); err != nil {
		return Invalid("UnreadablePlan", "the plan is not one the "+backend+" provider made: "+err.Error())
	}
	ok, n := whole()
	switch {
	case !ok || n == 0:
		return Invalid("UnreadablePlan", "the plan is not one the "+backend+" provider made")
	case regs != nil && len(regs) != n:
		return Invalid("Registrations", fmt.Sprintf("launching: %d registrations for %d runners", len(regs), n))
	}
	return nil
}

// Capacity is how an instance is paid for.
type Capacity string

// The capacity types.
const (
	Spot     Capacity = "spot"
	OnDemand Capacity = "on-demand"
)

// State is an instance's lifecycle state, in neutral words.
type State string

// The instance states.
const (
	// Pending: launched, not yet running: booting, or held in the
	// backend's own queue (then Instance.QueueReason says why).
	Pending State = "pending"
	// Running: the instance (or process) runs.
	Running State = "running"
	// Stopping: shutting down, or stopping.
	Stopping State = "stopping"
	// Stopped: not running and not billed for compute, but not gone.
	Stopped State = "stopped"
	// Terminated: gone for good.
	Terminated State = "terminated"
)

// Alive reports whether the instance is pending or running: it may yet run a
// job, and it costs money.
func (s State) Alive() bool { return s == Pending || s == Running }

// EndReason is how a terminated runner ended, in neutral words, where its
// backend can tell (the container backend: the engine's exit code and OOM
// flag). The metrics record carries it (endReason).
type EndReason string

// The end reasons.
const (
	// EndExited: the runner exited on its own with exit code 0.
	EndExited EndReason = "exited"
	// EndFailed: the runner exited on its own with another exit code.
	EndFailed EndReason = "failed"
	// EndOOMKilled: the kernel's OOM killer ended it at its memory limit.
	EndOOMKilled EndReason = "oom-killed"
	// EndRunnerOutdated: GitHub refused the runner's version
	// (ExitVersionDeprecated).
	EndRunnerOutdated EndReason = "runner-outdated"
	// EndBackendError: the backend failed to run it (the engine's error).
	EndBackendError EndReason = "backend-error"
	// EndRemoved: skiff removed it (Terminate, or past its pool's lifetime).
	EndRemoved EndReason = "removed"
)

// Instance is one runner instance as the provider knows it.
type Instance struct {
	ID           string
	Pool         string
	InstanceType string
	Zone         string
	Capacity     Capacity
	State        State
	LaunchedAt   time.Time
	// QueueReason is the backend's reason for holding a pending runner in
	// its own queue (Slurm's Resources or Priority, a Pod's Unschedulable
	// message); "" when the runner is not queued. A queued runner is not a
	// failed boot: the pool's queue timeout bounds it.
	QueueReason string
	// RunningSince is when a runner the backend held in its queue left it
	// and started; zero when it never waited. The boot timeout counts from
	// it.
	RunningSince time.Time
	// Tags are the instance's tags (names.Tag*), including those set after
	// launch by scale-up and by the runner's job hooks.
	Tags map[string]string
	// EndReason is how a terminated instance ended, where the backend
	// tells; "" while it lives or when the backend does not say.
	EndReason EndReason
	// ExitCode is the runner's exit code with EndReason, where the
	// backend read one; nil otherwise.
	ExitCode *int
}

// Clone returns a copy of the instance that shares no map or pointer with it.
func (in Instance) Clone() Instance {
	tags := make(map[string]string, len(in.Tags))
	for k, v := range in.Tags {
		tags[k] = v
	}
	in.Tags = tags
	if in.ExitCode != nil {
		code := *in.ExitCode
		in.ExitCode = &code
	}
	return in
}

// Result is what one Launch did.
type Result struct {
	// Runners are aligned with the plan's runners.
	Runners []Launched
	// FellBack is true when the provider had to use its fallback capacity
	// (on-demand for a spot-first pool).
	FellBack bool
}

// Err is the error Launch returns with r once each runner has its outcome:
// nil when any runner launched, else the first runner's error.
func (r Result) Err() error {
	for _, l := range r.Runners {
		if l.Err == nil {
			return nil
		}
	}
	if len(r.Runners) == 0 {
		return nil
	}
	return r.Runners[0].Err
}

// Launched is one runner's outcome: its instance, or why it has none.
type Launched struct {
	// Instance is the runner's instance; its ID is "" when Err is set.
	Instance Instance
	// Err says why the runner got no instance (one of the kinds), or nil.
	Err error
}

// Filter selects instances for List. Zero fields do not filter.
type Filter struct {
	// IDs selects these instances only.
	IDs []string
	// Pool selects one pool's instances.
	Pool string
	// AliveOnly leaves out stopped and terminated instances.
	AliveOnly bool
}
