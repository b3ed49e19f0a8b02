package loadtest

import (
	"context"
	"fmt"
	"strings"
	"time"
	_ "time/tzdata" // the warm schedule's time zone, on a machine without a tz database

	sdkec2 "github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/queue"
)

// Warm machines in the harness (docs/warm-pools.md). The large pool keeps
// stopped and hot machines while its schedule holds: from the world's
// start (10:00 in Berlin, 09:00 UTC) until the last planned arrival, so
// that its jobs find them ready and the world ends quiet (the reconciler
// retires them when the schedule ends). The jobs start arriving after
// warmUp: a deployment keeps its warm machines at all hours of its
// schedule, and the first ones are ready three passes after the first.
//
// What the harness checks of them, besides every invariant of a job:
//
//   - a handover (guardedWarmer.Hand) is of a machine launched warm, whose
//     warm record the taker ended, never handed before, of the job's pool,
//     spec key and the kind its record names;
//   - after every pass, no pool counts more live records than its
//     maxRunners; a warm record whose machine ended is ended within
//     warmRefillPasses passes, and a pool with room has its warm counts
//     back within as many: lost machines are replaced; no warm record stays
//     short of ready past its boot timeout and two passes;
//   - at the end, each job's start kind in the ledger and the metrics
//     records is what its machine did (check.go), no stopped machine is
//     left, and warm pools that held machines while their jobs came
//     started some of them warm.

// warmUp is how long before the first job the warm pool's schedule
// starts: the first pass launches, the second finds them ready (hot) or
// stops them, the third finds the stopped ones stopped.
const warmUp = 4 * time.Minute

// warmZone is the time zone the warm schedule is read in: its 10:00 is
// the world's start, 09:00 UTC in December.
const warmZone = "Europe/Berlin"

// warmRefillPasses is how many passes in a row a warm pool with room may
// have fewer live warm records than it wants: each pass launches what is
// missing, so only failed launches (a lost fleet answer) leave it short
// after one.
const warmRefillPasses = 3

// warmCrashSteps is how many steps of a warm start the warm crash plan
// counts, from the take (the invocation's second step) on.
const warmCrashSteps = 7

// warmBatch reports whether a scale-up batch holds a job of a pool that
// keeps warm machines now.
func (w *world) warmBatch(ds []queue.Delivery) bool {
	now := w.clock.Now()
	for _, d := range ds {
		if p := w.pools.Pool(d.Job.Pool); p != nil && p.Warm.Total() > 0 && p.Warm.On(now) {
			return true
		}
	}
	return false
}

// largeMaxRunners is the large pool's maxRunners for a run of n jobs: 12
// up to 100 jobs, so that its five warm machines and its jobs contend for
// room (a full pool still admits the jobs that take a warm machine), and
// 12 per 100 jobs beyond, up to 80 (a 1,000-job run's, as before warm
// pools).
func largeMaxRunners(n int) int { return min(80, max(12, n*12/100)) }

// poolsYAML is the operator's configuration: a spot pool over three
// instance types and three zones, and an on-demand pool with labels of its
// own, largeMax runners, dynamic disk sizes and warm machines from start
// until end (read in warmZone, rounded up to the minute; at most the
// day's end).
func poolsYAML(start, end time.Time, largeMax int) string {
	loc, err := time.LoadLocation(warmZone)
	if err != nil {
		loc = time.UTC
	}
	from, to := start.In(loc), end.In(loc)
	until := "24:00"
	if to.YearDay() == from.YearDay() {
		if t := to.Truncate(time.Minute); t.Before(to) {
			to = t.Add(time.Minute)
		}
		until = to.Format("15:04")
	}
	return fmt.Sprintf(`version: 1
defaults:
  image: {ssm: /aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64}
  subnets: [subnet-0aaaaaaaa, subnet-0bbbbbbbb, subnet-0cccccccc]
pools:
  - name: standard
    labels: [self-hosted, linux, x64]
    instanceTypes: [c7i.large, c6i.large, m7i.large]
    capacity: spot-then-on-demand
    maxRunners: 400
  - name: large
    labels: [large]
    instanceTypes: [c7i.2xlarge, m7i.2xlarge]
    capacity: on-demand
    maxRunners: %d
    dynamic: {maxDiskGiB: 200}
    warm:
      stopped: 3
      hot: 2
      timeZone: %s
      schedules: [{days: [%s], from: "%s", to: "%s"}]
`, largeMax, warmZone, strings.ToLower(from.Weekday().String()[:3]), from.Format("15:04"), until)
}

// WarmFigures are what the warm pools did in a run.
type WarmFigures struct {
	// Taken counts the warm machines jobs took (their records ended by
	// scale-up); Handed the handovers it asked for (failed ones included).
	Taken, Handed int
	// LongestShort is the longest a warm pool had fewer ready machines of
	// a kind than it wanted, from a pass with room for them to a pass that
	// found them ready or the pool full (jobs taking them included).
	LongestShort time.Duration
}

func (f WarmFigures) String() string {
	return fmt.Sprintf("%d warm machines taken, %d handed over; ready warm machines short of the counts for %s at most", f.Taken,
		f.Handed, f.LongestShort)
}

// warmWatch is what the harness follows of the warm pools.
type warmWatch struct {
	handed    map[string]int64     // instance → the job it was handed to
	short     map[string]int       // pool/kind → passes in a row with fewer live warm records than wanted, room left
	shortFrom map[string]time.Time // pool/kind → since when fewer are ready than wanted, room left
	late      map[string]bool      // warm records reported not ready in time
	gone      map[string]time.Time // warm record → the pass that first saw it live, its machine ended
	figures   WarmFigures
}

func newWarmWatch() warmWatch {
	return warmWatch{handed: map[string]int64{}, short: map[string]int{}, shortFrom: map[string]time.Time{}, late: map[string]bool{},
		gone: map[string]time.Time{}}
}

// checkHand is the guard's check of a handover of a warm machine, and the
// place where EC2 refuses some starts (Faults.WarmStartFailures) or
// throttles them (Faults.WarmThrottles).
func (w *world) checkHand(_ context.Context, h provider.Handover) {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	w.warm.figures.Handed++
	job := h.Runner.JobID
	in := w.insts[h.InstanceID]
	switch {
	case in == nil || in.warmName == "":
		w.violate(fmt.Sprintf("instance %s handed to job %d, and it was not launched warm", h.InstanceID, job))
	default:
		if r, err := w.be.peek.Runner(w.ctx, in.warmName); err == nil && r.State.Live() {
			w.violate(fmt.Sprintf("warm machine %s handed to job %d while its warm record %s is still live (%s): nobody took it",
				in.id, job, in.warmName, r.State))
		}
		if string(h.Kind) != in.warm {
			w.violate(fmt.Sprintf("warm machine %s of kind %s handed to job %d as %s", in.id, in.warm, job, h.Kind))
		}
		w.checkHandSpec(in, job)
	}
	if prev, ok := w.warm.handed[h.InstanceID]; ok {
		w.violate(fmt.Sprintf("warm machine %s handed to job %d after job %d: one machine, two jobs", h.InstanceID, job, prev))
	}
	w.warm.handed[h.InstanceID] = job
	if in != nil && in.handSeq == 0 {
		in.handSeq, in.reboot = w.warm.figures.Handed, w.bootTime(Stopped, w.warmRng)
	}
	f := w.cfg.Faults
	switch draw := w.warmRng.Float64(); {
	case h.Kind != "stopped":
	case draw < f.WarmStartFailures:
		w.fake.FailOp("StartInstances", "InsufficientInstanceCapacity")
		w.faults["warm_start_failures"]++
	case draw < f.WarmStartFailures+f.WarmThrottles:
		w.fake.FailOp("StartInstances", "RequestLimitExceeded")
		w.faults["warm_throttles"]++
	}
}

// checkHandSpec: a warm machine goes only to a job of its pool whose spec
// has the machine's key (the job's labels resolved as scale-up resolves
// them; no runner version is resolved in the harness).
func (w *world) checkHandSpec(in *instance, job int64) {
	js, ok := w.sim.Job(job)
	if !ok {
		w.violate(fmt.Sprintf("warm machine %s handed to job %d, which GitHub does not know", in.id, job))
		return
	}
	spec, err := w.pools.Resolve(js.Labels)
	if err != nil {
		w.violate(fmt.Sprintf("warm machine %s handed to job %d, whose labels %v resolve to no pool: %v", in.id, job, js.Labels, err))
		return
	}
	_, key, _ := names.ParseWarmRunnerName(in.warmName)
	machinePool := ""
	for _, fi := range w.fake.Instances() {
		if fi.ID == in.id {
			machinePool = fi.Tags[names.TagPool]
		}
	}
	if machinePool != spec.Pool || key != spec.WarmKey("") {
		w.violate(fmt.Sprintf("warm machine %s (pool %s, key %s) handed to job %d of pool %s, key %s (labels %v)", in.id, machinePool,
			key, job, spec.Pool, spec.WarmKey(""), js.Labels))
	}
}

// stopping is the guard's hook before a warm stop: EC2 throttles some
// (Faults.WarmThrottles).
func (w *world) stopping() {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	if w.warmRng.Float64() < w.cfg.Faults.WarmThrottles {
		w.fake.FailOp("StopInstances", "RequestLimitExceeded")
		w.faults["warm_throttles"]++
	}
}

// loseStopped is EC2 ending stopped warm machines (Faults.WarmLosses), once
// a minute.
func (w *world) loseStopped(now time.Time) {
	if w.cfg.Faults.WarmLosses <= 0 || now.Sub(w.start)%time.Minute != 0 {
		return
	}
	for _, id := range sortedKeys(w.insts) {
		in := w.insts[id]
		if in.state != stopped || w.warmRng.Float64() >= w.cfg.Faults.WarmLosses {
			continue
		}
		if _, err := w.fake.TerminateInstances(w.ctx, &sdkec2.TerminateInstancesInput{InstanceIds: []string{id}}); err == nil {
			w.faults["warm_lost_stopped"]++
			w.gone(in, now)
		}
	}
}

// passView is a pool as a pass finds it: its live count and its live warm
// records' names.
type passView struct {
	live int
	warm map[string]bool
}

// beforePass reads the pools as the pass about to run reads them first.
func (w *world) beforePass() map[string]passView {
	out := map[string]passView{}
	for _, p := range w.pools.Pools {
		v := passView{warm: map[string]bool{}}
		if p.Warm.Total() == 0 {
			v.live, _ = w.be.peek.Live(w.ctx, p.Name)
		} else if live, err := w.be.peek.LiveRunners(w.ctx, p.Name); err == nil {
			v.live = len(live)
			for _, r := range live {
				if ledger.IsWarm(r.Name) {
					v.warm[r.Name] = true
				}
			}
		}
		out[p.Name] = v
	}
	return out
}

// observePools runs after every reconciler pass, given the pools as it
// found them: no pool counts more live records than its maxRunners; a warm
// pool's counts come back (see warmRefillPasses) and its machines get
// ready. A pass launches warm machines into the room it found (the records
// it ends free theirs for the next pass), so a pass that found no room
// for all it launched and all still missing is excused.
func (w *world) observePools(now time.Time, before map[string]passView) {
	for _, p := range w.pools.Pools {
		live, err := w.be.peek.LiveRunners(w.ctx, p.Name)
		if err != nil {
			continue
		}
		records, ready := map[string]int{}, map[string]int{}
		launched := 0
		for _, r := range live {
			kind := ledger.WarmKindOf(r.Name)
			if kind == "" {
				continue
			}
			records[kind]++
			if !before[p.Name].warm[r.Name] {
				launched++
			}
			if r.State == ledger.StateRegistered {
				ready[kind]++
			}
			w.checkWarmGone(r, now)
			if bound := p.BootTimeout + 2*time.Minute; r.State < ledger.StateRegistered && now.Sub(r.ReservedAt) > bound && !w.warm.late[r.Name] {
				w.warm.late[r.Name] = true
				w.violate(fmt.Sprintf("warm record %s of pool %s is %s %s after its reservation: neither ready nor retired",
					r.Name, p.Name, r.State, now.Sub(r.ReservedAt)))
			}
		}
		if len(live) > p.MaxRunners {
			w.violate(fmt.Sprintf("pool %s counts %d live records (%d warm), beyond its maxRunners %d", p.Name, len(live),
				records["stopped"]+records["hot"], p.MaxRunners))
		}
		if p.Warm.Total() == 0 {
			continue
		}
		wantStopped, wantHot := p.Warm.Counts(now)
		missing := max(0, wantStopped-records["stopped"]) + max(0, wantHot-records["hot"])
		room := p.MaxRunners-before[p.Name].live >= launched+missing
		for _, kw := range []struct {
			kind string
			want int
		}{{"hot", wantHot}, {"stopped", wantStopped}} {
			kind, want := kw.kind, kw.want
			k := p.Name + "/" + kind
			if records[kind] < want && room {
				if w.warm.short[k]++; w.warm.short[k] == warmRefillPasses {
					w.violate(fmt.Sprintf("pool %s has %d live %s warm records of %d wanted, %d passes in a row, with room", p.Name,
						records[kind], kind, want, warmRefillPasses))
				}
			} else {
				w.warm.short[k] = 0
			}
			from, short := w.warm.shortFrom[k]
			switch {
			case ready[kind] < want && room && !short:
				w.warm.shortFrom[k] = now
			case ready[kind] >= want || len(live) >= p.MaxRunners:
				if short {
					w.warm.figures.LongestShort = max(w.warm.figures.LongestShort, now.Sub(from))
				}
				delete(w.warm.shortFrom, k)
			}
		}
	}
}

// checkWarmGone: a live warm record whose machine ended (EC2 lost it, a
// failed handover terminated it, it shut down) is ended within
// warmRefillPasses passes, so that the next pass replaces it.
func (w *world) checkWarmGone(r ledger.Runner, now time.Time) {
	in := w.insts[r.InstanceID]
	if in == nil || in.state != off {
		return
	}
	since, ok := w.warm.gone[r.Name]
	switch {
	case !ok:
		w.warm.gone[r.Name] = now
	case now.Sub(since) == warmRefillPasses*time.Minute:
		w.violate(fmt.Sprintf("warm record %s of pool %s is %s, %d passes after its machine %s ended", r.Name, r.Pool, r.State,
			warmRefillPasses, in.id))
	}
}

// warmArrivals counts the jobs queued for a warm pool while its schedule
// held.
func (w *world) warmArrivals() int {
	n := 0
	for _, j := range w.jobs {
		js, ok := w.sim.Job(j.id)
		if !ok {
			continue
		}
		if spec, err := w.pools.Resolve(js.Labels); err == nil && spec.Warm.On(j.queuedAt) {
			n++
		}
	}
	return n
}
