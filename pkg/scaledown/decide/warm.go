package decide

import (
	"sort"
	"time"

	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/provider"
)

// Warm machines (docs/warm-pools.md): the reconciler keeps each warm
// pool's counts of stopped and hot machines for the hour, in its ledger
// as records without a job, which count toward the pool's maxRunners. A
// warm record moves: reserved → launched (booting) → registered (ready:
// its machine tagged itself names.TagWarmReady; a stopped one is stopped
// first) → ended (taken by a job, gone, replaced or no longer wanted).

// WarmPool is one warm pool as a pass sees it.
type WarmPool struct {
	Pool string
	// Key is the pool's warm key now (pool.Spec.WarmKey): a machine with
	// another was made with other settings and is replaced.
	Key string
	// Stopped and Hot are the counts wanted now (pool.Warm.Counts).
	Stopped, Hot int
	MaxAge       time.Duration
	MaxRunners   int
	// BootTimeout bounds a warm machine's launch to ready (the pool's
	// bootTimeout).
	BootTimeout time.Duration
	// Live is the pool's live count: its runners and warm machines.
	Live int
}

// WarmInputs is what one pass decides warm machines on.
type WarmInputs struct {
	Now   time.Time
	Pools []WarmPool
	// Ledger are the live records of the warm pools (runners among them).
	Ledger []ledger.Runner
	// Instances are the provider's skiff instances, stopped ones included.
	Instances         []provider.Instance
	InstancesComplete bool
	// ListLag and OrphanGrace are Policy's.
	ListLag, OrphanGrace time.Duration
	// MaxLaunches bounds the warm launches of one pass (all pools).
	MaxLaunches int
	// Ended is when the ended warm record of each warm machine without a
	// live record ended (by instance id; absent: unknown, long ago). A job
	// takes a machine by ending its record and records its own runner on it
	// a moment later, after its registration: the machine is an orphan only
	// once OrphanGrace has passed since.
	Ended map[string]time.Time
}

// WarmDo is what to do about one warm machine.
type WarmDo string

// The warm actions.
const (
	// WarmEnd ends a record whose machine is gone.
	WarmEnd WarmDo = "end"
	// WarmRetire terminates the machine and ends its record.
	WarmRetire WarmDo = "retire"
	// WarmStop stops a stopped-kind machine that is ready.
	WarmStop WarmDo = "stop"
	// WarmReady records a machine ready (registered) for jobs to take.
	WarmReady WarmDo = "ready"
	// WarmLaunch launches a new warm machine of Kind.
	WarmLaunch WarmDo = "launch"
	// WarmOrphan terminates a warm machine without a live record (stopped:
	// the runner rules reap only alive orphans).
	WarmOrphan WarmDo = "orphan"
)

// WarmAction is one step on a warm machine.
type WarmAction struct {
	Do         WarmDo
	Pool       string
	Kind       string
	Record     string // the warm record's name ("" for launch and orphan)
	InstanceID string
	Reason     string
}

// DefaultWarmMaxLaunches bounds a pass's warm launches: a pool turning
// its schedule on fills over a few passes, never in one burst of launch
// calls.
const DefaultWarmMaxLaunches = 20

// DecideWarm returns the pass's warm actions: per pool, what each warm
// record's machine needs (end, retire, stop, ready), the records beyond
// the counts wanted retired, and launches for what is missing within
// maxRunners; then the stopped warm machines nothing accounts for.
func DecideWarm(in WarmInputs) []WarmAction {
	if in.ListLag <= 0 {
		in.ListLag = DefaultListLag
	}
	if in.MaxLaunches <= 0 {
		in.MaxLaunches = DefaultWarmMaxLaunches
	}
	byID := make(map[string]*provider.Instance, len(in.Instances))
	for i := range in.Instances {
		byID[in.Instances[i].ID] = &in.Instances[i]
	}
	var out []WarmAction
	launches := 0
	for _, wp := range in.Pools {
		kept := map[string][]ledger.Runner{}
		var records []ledger.Runner
		for _, r := range in.Ledger {
			if r.Pool == wp.Pool && ledger.IsWarm(r.Name) {
				records = append(records, r)
			}
		}
		// Oldest first: the excess retired is the newest, which has cost
		// the least and is the furthest from ready.
		sort.Slice(records, func(i, j int) bool { return records[i].ReservedAt.Before(records[j].ReservedAt) })
		for _, r := range records {
			a, keep := judgeWarm(in, wp, r, byID[r.InstanceID])
			if a.Do != "" {
				out = append(out, a)
			}
			if keep {
				kind := ledger.WarmKindOf(r.Name)
				kept[kind] = append(kept[kind], r)
			}
		}
		// A record ended this pass frees its room only once ended: the
		// next pass launches into it.
		live := wp.Live
		for _, kind := range []string{"hot", "stopped"} {
			want := wp.Hot
			if kind == "stopped" {
				want = wp.Stopped
			}
			have := kept[kind]
			for _, r := range have[min(want, len(have)):] {
				out = append(out, WarmAction{Do: WarmRetire, Pool: wp.Pool, Kind: kind, Record: r.Name, InstanceID: r.InstanceID,
					Reason: "more warm machines than the pool wants now"})
			}
			for n := len(have); n < want && live < wp.MaxRunners && launches < in.MaxLaunches; n++ {
				out = append(out, WarmAction{Do: WarmLaunch, Pool: wp.Pool, Kind: kind, Reason: "the pool wants more warm machines now"})
				live++
				launches++
			}
		}
	}
	for _, inst := range WarmOrphans(in.Instances, in.Ledger) {
		if at, ok := in.Ended[inst.ID]; ok && in.Now.Sub(at) <= in.OrphanGrace || in.Now.Sub(inst.LaunchedAt) <= in.OrphanGrace {
			continue
		}
		out = append(out, WarmAction{Do: WarmOrphan, Pool: inst.Pool, Kind: inst.Tags[names.TagWarm], InstanceID: inst.ID,
			Reason: "warm machine without a live record, not handed to a job"})
	}
	return out
}

// WarmOrphans are the warm machines, stopped or alive, that no live record
// holds and that no job's runner was handed (their runner-name tag is still
// the warm record's): taken by a job that then failed, or left by a crash.
func WarmOrphans(insts []provider.Instance, records []ledger.Runner) []provider.Instance {
	linked := map[string]bool{}
	for _, r := range records {
		if r.InstanceID != "" {
			linked[r.InstanceID] = true
		}
	}
	var out []provider.Instance
	for _, inst := range insts {
		if inst.Tags[names.TagWarm] == "" || linked[inst.ID] || !ledger.IsWarm(inst.Tags[names.TagRunnerName]) ||
			inst.Tags[names.TagManaged] != names.ManagedValue || !inst.State.Alive() && inst.State != provider.Stopped {
			continue
		}
		out = append(out, inst)
	}
	return out
}

// judgeWarm decides one warm record: the action its machine needs, and
// whether it still counts among the pool's warm machines.
func judgeWarm(in WarmInputs, wp WarmPool, r ledger.Runner, inst *provider.Instance) (WarmAction, bool) {
	kind := ledger.WarmKindOf(r.Name)
	a := WarmAction{Pool: wp.Pool, Kind: kind, Record: r.Name, InstanceID: r.InstanceID}
	do := func(d WarmDo, reason string) (WarmAction, bool) {
		a.Do, a.Reason = d, reason
		return a, d != WarmEnd && d != WarmRetire
	}
	_, key, _ := names.ParseWarmRunnerName(r.Name)
	since := r.LaunchedAt
	if since.IsZero() {
		since = r.ReservedAt
	}
	switch {
	case r.InstanceID == "":
		if in.Now.Sub(r.ReservedAt) > wp.BootTimeout {
			return do(WarmEnd, "reserved and never launched")
		}
		return a, true
	case inst == nil:
		if in.InstancesComplete && in.Now.Sub(since) > in.ListLag {
			return do(WarmEnd, "warm machine is gone")
		}
		return a, true
	case inst.State == provider.Terminated || inst.State == provider.Stopping && kind == "hot":
		return do(WarmEnd, "warm machine is "+string(inst.State))
	case key != wp.Key:
		return do(WarmRetire, "the pool's launch settings, image or runner changed")
	case wp.MaxAge > 0 && in.Now.Sub(since) > wp.MaxAge:
		return do(WarmRetire, "warm machine is older than the pool's warm maxAge "+wp.MaxAge.String())
	case r.State >= ledger.StateRegistered:
		if kind == "stopped" && inst.State != provider.Stopped {
			return do(WarmRetire, "a ready stopped machine is "+string(inst.State)+" without a job")
		}
		return a, true // ready, waiting for a job
	}
	_, ready := inst.Tags[names.TagWarmReady]
	switch {
	case ready && kind == "hot" && inst.State == provider.Running:
		return do(WarmReady, "warm machine is ready")
	case ready && kind == "stopped" && inst.State == provider.Stopped:
		return do(WarmReady, "warm machine is ready and stopped")
	case ready && kind == "stopped" && inst.State == provider.Running:
		return do(WarmStop, "warm machine is ready: stopping it")
	case in.Now.Sub(since) > wp.BootTimeout && inst.State != provider.Stopping:
		return do(WarmRetire, "warm machine not ready "+in.Now.Sub(since).Round(time.Second).String()+" after launch")
	}
	return a, true
}
