package loadtest

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/provider/ec2"
	"github.com/skiffci/skiff/pkg/queue"
	"github.com/skiffci/skiff/pkg/scaleup"
)

// Run runs cfg.Jobs jobs through the whole pipeline and returns what it
// found. It fails t only when the harness itself cannot run (an emulator
// missing, a server that does not start); skiff's broken promises are the
// report's Failures, for the caller to judge.
func Run(t testing.TB, cfg Config) Report {
	t.Helper()
	wallStart := time.Now()
	rep := newWorld(t, cfg).run()
	rep.Wall = time.Since(wallStart)
	return rep
}

// run steps the world until it is quiet (or past its drain limit) and
// judges it.
func (w *world) run() Report {
	deadline := w.plan[len(w.plan)-1].at + drainLimit
	lastReconcile := w.start
	nextProgress := w.start.Add(10 * time.Minute)
	for {
		now := w.clock.Now()
		w.arrive(now)
		w.ec2Faults(now)
		w.githubBursts(now)
		w.proxy.flush()
		w.scaleUp()
		w.loseStopped(now)
		w.instances(now)
		w.deliverEvents(now)
		if now.Sub(lastReconcile) >= time.Minute {
			lastReconcile = now
			w.passStart = now
			before := w.beforePass()
			if _, err := w.down.Reconcile(w.ctx); err != nil {
				w.log.Error("reconcile failed", "err", err)
			}
			w.observePools(now, before)
		}
		w.releaseStalled(now)
		w.sample()
		if w.cfg.Progress != nil && !now.Before(nextProgress) {
			nextProgress = nextProgress.Add(10 * time.Minute)
			fmt.Fprintf(w.cfg.Progress, "  +%-8s %s\n", now.Sub(w.start), w.status())
		}
		if w.next == len(w.plan) && w.quiet() {
			break
		}
		if now.Sub(w.start) > deadline {
			w.violate("not drained " + drainLimit.String() + " after the last arrival: " + w.status())
			break
		}
		w.clock.Advance(tick)
		w.sim.Step()
	}
	return w.check()
}

// arrive starts the runs whose time has come.
func (w *world) arrive(now time.Time) {
	for w.next < len(w.plan) && w.start.Add(w.plan[w.next].at).Compare(now) <= 0 {
		p := w.plan[w.next]
		w.next++
		repo := []string{"app", "api", "web"}[w.rng.IntN(3)]
		info, err := w.sim.StartRun(ghsim.RunSpec{Repo: org + "/" + repo, Workflow: "CI", Event: "push", Jobs: p.jobs})
		if err != nil {
			w.t.Fatalf("starting a run: %v", err)
		}
		w.runs = append(w.runs, &runRec{id: info.RunID, jobs: len(info.JobIDs)})
		for _, id := range info.JobIDs {
			w.jobs[id] = &jobRec{id: id, run: info.RunID, queuedAt: now, original: true}
			if p.probe != noProbe {
				w.pmu.Lock()
				w.probes[id] = p.probe
				w.pmu.Unlock()
			}
		}
	}
}

// ec2Faults opens and closes EC2's capacity faults in windows: two
// instance types short of spot capacity everywhere and one zone short of
// everything, for 20 of every 40 minutes; fleets filled short for 3 of
// every 15 minutes.
func (w *world) ec2Faults(now time.Time) {
	f := w.cfg.Faults
	min := int(now.Sub(w.start) / time.Minute)
	if f.InsufficientCap {
		code := ""
		if min%40 < 20 {
			code = "InsufficientInstanceCapacity"
		}
		if now.Sub(w.start)%time.Minute == 0 {
			for s := range subnets {
				for _, typ := range []string{"c7i.large", "c6i.large"} {
					w.fake.FailPool(ec2.PlaceKey(typ, s, true), code)
				}
			}
			for _, p := range w.pools.Pools {
				if p.EC2 == nil {
					continue
				}
				for _, typ := range p.EC2.InstanceTypes {
					for _, spot := range []bool{true, false} {
						w.fake.FailPool(ec2.PlaceKey(typ, "subnet-0cccccccc", spot), code)
					}
				}
			}
			if code != "" {
				w.faults["ice_minutes"]++
			}
		}
	}
	if f.PartialFills && now.Sub(w.start)%time.Minute == 0 {
		if min%15 < 3 {
			w.fake.SetFillLimit(1 + w.rng.IntN(3))
			w.faults["partial_fill_minutes"]++
		} else {
			w.fake.SetFillLimit(0)
		}
	}
}

// githubBursts opens a secondary rate-limit window of one to three minutes
// on JIT generation, runner listing or job reads, every ten minutes or so.
func (w *world) githubBursts(now time.Time) {
	if !w.cfg.Faults.RateLimitBursts || now.Sub(w.start)%time.Minute != 0 || w.rng.IntN(10) != 0 {
		return
	}
	op := []string{ghsim.OpGenerateOrgJITConfig, ghsim.OpListOrgRunners, ghsim.OpGetJob}[w.rng.IntN(3)]
	w.setGitHubFaultsUntil(now.Add(time.Duration(1+w.rng.IntN(3))*time.Minute), op)
	w.faults["rate_limit_bursts"]++
}

// scaleUp plays SQS's event source: batches of up to ten visible
// messages, one invocation each, until none is visible. A message
// received more than maxReceives times is redriven to the dead-letter
// queue, as SQS does.
func (w *world) scaleUp() {
	for {
		// A cancelled context makes Receive return what is visible now
		// instead of waiting (in real time) for a send.
		rctx, cancel := context.WithCancel(w.ctx)
		cancel()
		ds, _ := w.q.Receive(rctx, 10)
		if len(ds) == 0 {
			return
		}
		live := ds[:0]
		for _, d := range ds {
			if d.ReceiveCount > maxReceives {
				_ = w.q.DeadLetter(w.ctx, d, "sqs_redrive", "received too many times")
				_ = w.q.Complete(w.ctx, d, queue.Answer{Verdict: queue.Done})
				continue
			}
			live = append(live, d)
		}
		if len(live) > 0 {
			w.invoke(live)
		}
	}
}

// invoke is one scale-up invocation, which may crash or stall as planned.
func (w *world) invoke(ds []queue.Delivery) {
	w.invocations++
	f := w.cfg.Faults
	ctx, cancel := context.WithCancel(w.ctx)
	defer cancel()
	var inv *invocation
	stall := w.stalls < f.Stalls && (w.invocations == 3 || w.invocations%40 == 0)
	switch {
	case stall:
		inv = &invocation{at: 2 + w.rng.IntN(3), stalled: make(chan struct{}), release: make(chan struct{})}
	case f.Crashes > 0 && w.rng.Float64() < f.Crashes:
		inv = &invocation{at: w.crashes%crashSteps + 1, cancel: cancel}
		w.faults["crashes_planned"]++
	case f.WarmCrashes > 0 && w.warmBatch(ds) && w.warmRng.Float64() < f.WarmCrashes:
		// From the take on: the take, reserve, JIT, the handover before
		// and after its answer, launch done, ledger launched.
		inv = &invocation{at: 2 + w.faults["warm_crashes_planned"]%warmCrashSteps, cancel: cancel}
		w.faults["warm_crashes_planned"]++
	}
	if inv != nil {
		ctx = context.WithValue(ctx, invocationKey{}, inv)
	}
	if f.LostFleetAnswers > 0 && w.rng.Float64() < f.LostFleetAnswers {
		w.fake.LoseAnswers(1)
		w.faults["lost_fleet_answers"]++
	}
	handle := func(ctx context.Context) []queue.Answer { return w.up.Handle(ctx, ds) }
	if inv != nil && inv.stalled != nil {
		done := make(chan []queue.Answer, 1)
		sctx := context.WithoutCancel(ctx)
		go func() { done <- handle(sctx) }()
		select {
		case answers := <-done:
			w.complete(ds, answers)
		case <-inv.stalled:
			w.stalls++
			if inv.took.Load() {
				w.faults["stalls_after_warm_take"]++
			}
			w.stalled = append(w.stalled, &stalledInvocation{inv: inv, ds: ds, done: done,
				releaseAt: w.clock.Now().Add(scaleup.DefaultClaimLease + time.Minute)})
			// GitHub delivers the stalled jobs again meanwhile.
			for _, d := range ds {
				_ = w.q.Send(w.ctx, d.Job)
			}
		}
		return
	}
	answers := handle(ctx)
	if inv != nil && ctx.Err() != nil {
		w.crashes++ // the invocation died: nothing is completed, the messages come back
		if inv.took.Load() {
			w.faults["crashes_after_warm_take"]++
		}
		return
	}
	w.complete(ds, answers)
}

// stalledInvocation is a scale-up invocation blocked in a port call until
// its claim's lease has passed.
type stalledInvocation struct {
	inv       *invocation
	ds        []queue.Delivery
	done      chan []queue.Answer
	releaseAt time.Time
}

func (w *world) releaseStalled(now time.Time) {
	rest := w.stalled[:0]
	for _, s := range w.stalled {
		if now.Before(s.releaseAt) {
			rest = append(rest, s)
			continue
		}
		close(s.inv.release)
		w.complete(s.ds, <-s.done)
	}
	w.stalled = rest
}

// complete answers the deliveries as functions/scaleup does: dead letters
// sent, failures reported for redelivery, the rest deleted.
func (w *world) complete(ds []queue.Delivery, answers []queue.Answer) {
	retry := map[string]bool{}
	for _, id := range queue.CompleteBatch(w.ctx, w.q, ds, answers, w.counter, w.log) {
		retry[id] = true
	}
	for _, d := range ds {
		if !retry[d.ID] {
			_ = w.q.Complete(w.ctx, d, queue.Answer{Verdict: queue.Done})
		}
	}
}

func (w *world) sample() {
	var ms runtime.MemStats
	if w.clock.Now().Sub(w.start)%time.Minute == 0 {
		runtime.ReadMemStats(&ms)
		w.peakHeap = max(w.peakHeap, ms.HeapAlloc)
	}
	live := map[int64]int{}
	for _, in := range w.fake.Live() {
		if id := jobTag(in.Tags); id != 0 {
			live[id]++
		}
	}
	for id, n := range live {
		w.peakLive[id] = max(w.peakLive[id], n)
	}
}
