package scaleup_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/queue"
	"github.com/skiffci/skiff/pkg/scaleup"
	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/userdata"
)

// crashAt cancels an invocation's context at its n-th call to the provider,
// the launch store or the ledger (counted together), like a Lambda that dies
// there; calls after it see the canceled context.
type crashAt struct {
	n      int
	calls  atomic.Int64
	cancel context.CancelFunc
}

func (c *crashAt) tick() {
	if int(c.calls.Add(1)) == c.n {
		c.cancel()
	}
}

type crashingProvider struct {
	provider.Provider
	c *crashAt
}

func (p crashingProvider) Plan(ctx context.Context, l provider.Launch) (provider.Plan, error) {
	p.c.tick()
	return p.Provider.Plan(ctx, l)
}

func (p crashingProvider) Launch(ctx context.Context, pl provider.Plan, regs []provider.Registration) (provider.Result, error) {
	p.c.tick()
	if err := ctx.Err(); err != nil {
		return provider.Result{}, err
	}
	res, err := p.Provider.Launch(ctx, pl, regs)
	p.c.tick()
	return res, err
}

type crashingLaunches struct {
	scaleup.Launches
	c *crashAt
}

func (l crashingLaunches) ClaimLaunch(ctx context.Context, c ledger.Claim, prev int, now time.Time) error {
	l.c.tick()
	return l.Launches.ClaimLaunch(ctx, c, prev, now)
}

func (l crashingLaunches) PutLaunch(ctx context.Context, f ledger.Launch) error {
	l.c.tick()
	return l.Launches.PutLaunch(ctx, f)
}

func (l crashingLaunches) FinishLaunch(ctx context.Context, token string, instances []string, reason string) error {
	l.c.tick()
	return l.Launches.FinishLaunch(ctx, token, instances, reason)
}

type crashingLedger struct {
	scaleup.Ledger
	c *crashAt
}

func (l crashingLedger) Reserve(ctx context.Context, pool string, max int, rs []ledger.Runner) (int, error) {
	l.c.tick()
	return l.Ledger.Reserve(ctx, pool, max, rs)
}

func (l crashingLedger) Launched(ctx context.Context, name string, la ledger.LaunchReport) error {
	l.c.tick()
	return l.Ledger.Launched(ctx, name, la)
}

// message of the simulated queue.
type simMessage struct {
	d         queue.Delivery
	visibleAt time.Time
}

// TestRandomInterleaving runs scale-up invocations, duplicate deliveries,
// crashes at every step, instance state-change events in any order and the
// runners' own reports, seeded (SKIFF_SEED reruns a failure). Invariants:
// never two live instances for one job; every message ends launched,
// skipped or dead-lettered; at the end every pool's live count equals its
// live instances.
func TestRandomInterleaving(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("SKIFF_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	for round := range 8 {
		s := seed + uint64(round)
		t.Run(fmt.Sprintf("seed=%d", s), func(t *testing.T) {
			t.Parallel()
			interleave(t, s)
		})
	}
}

func interleave(t *testing.T, seed uint64) {
	w := &interleaving{t: t, seed: seed, rng: rand.New(rand.NewPCG(seed, seed^0x5eed)),
		e:     newEnv(t, func(o *scaleup.Options) { o.MaxAttempts = 1000 }), // retries are the point here
		ended: map[string]bool{}}
	e := w.e
	for i := range interleaveJobs {
		labels := []string{"self-hosted", "linux", "x64"}
		if i%4 == 0 {
			labels = []string{"small"}
		}
		m := &simMessage{d: message(job(int64(1000+i), labels...), 0), visibleAt: e.clock.now()}
		w.queue = append(w.queue, m)
		_ = e.jobs.RecordRun(context.Background(), store.RunRecord{ID: m.d.Job.RunID, Attempt: 1, Event: "push",
			UpdatedAt: e.clock.now(), ExpiresAt: e.clock.now().Add(24 * time.Hour)})
	}
	for step := 0; step < 600 && len(w.queue) > 0; step++ {
		switch r := w.rng.IntN(10); {
		case r < 5: // an invocation takes up to 10 visible messages
			w.invoke()
		case r < 6: // a duplicate delivery of a job already in the queue or done
			m := &simMessage{d: message(job(int64(1000+w.rng.IntN(interleaveJobs))), 0), visibleAt: e.clock.now()}
			w.queue = append(w.queue, m)
		case r < 8: // a runner takes its job, reports it, finishes, powers off
			w.runnerEnds()
		default: // state-change events, late, repeated and in any order
			w.events()
		}
		w.check(step)
	}
	w.drain()
	w.checkCounts()
}

// interleaveJobs is how many jobs an interleaving queues.
const interleaveJobs = 40

// interleaving is one random interleaving of invocations, duplicate
// deliveries, runners ending and state-change events over an env: the
// messages in its simulated queue, and the instances whose end was
// reported.
type interleaving struct {
	t     *testing.T
	seed  uint64
	rng   *rand.Rand
	e     *env
	queue []*simMessage
	ended map[string]bool
}

// fail fails the test, saying how to replay the interleaving.
func (w *interleaving) fail(format string, args ...any) {
	w.t.Helper()
	w.t.Fatalf("seed %d (rerun with SKIFF_SEED=%d): "+format, append([]any{w.seed, w.seed}, args...)...)
}

// check fails the test when a job has more than one live instance.
func (w *interleaving) check(step int) {
	w.t.Helper()
	if most := w.e.maxLivePerJobByTags(); most > 1 {
		w.fail("step %d: a job has %d live instances\n%s", step, most, w.e.logs.String())
	}
}

// invoke runs an invocation on up to 10 visible messages (the clock moves
// on a minute when none is); one in three dies at one of its calls.
func (w *interleaving) invoke() {
	e, ctx := w.e, context.Background()
	var batch []*simMessage
	for _, m := range w.queue {
		if len(batch) < 10 && !m.visibleAt.After(e.clock.now()) {
			batch = append(batch, m)
		}
	}
	if len(batch) == 0 {
		e.clock.advance(time.Minute)
		return
	}
	ds := make([]queue.Delivery, len(batch))
	for i, m := range batch {
		m.d.ReceiveCount++
		m.visibleAt = e.clock.now().Add(time.Minute) // the visibility timeout
		ds[i] = m.d
	}
	svc, ictx, crashed := e.svc, ctx, (*crashAt)(nil)
	if w.rng.IntN(3) == 0 { // this invocation dies at one of its calls
		c, cancel := context.WithCancel(ctx)
		crashed = &crashAt{n: 1 + w.rng.IntN(8), cancel: cancel}
		o := e.opts
		o.Provider = crashingProvider{Provider: o.Provider, c: crashed}
		o.Launches = crashingLaunches{Launches: o.Launches, c: crashed}
		o.Ledger = crashingLedger{Ledger: o.Ledger, c: crashed}
		var err error
		if svc, err = scaleup.New(o); err != nil {
			w.t.Fatal(err)
		}
		ictx = c
	}
	answers := svc.Handle(ictx, ds)
	if crashed != nil && ictx.Err() != nil {
		return // died: no answer reaches the queue; every message comes back
	}
	for i, a := range answers {
		if a.Verdict != queue.Retry {
			w.queue = remove(w.queue, batch[i])
		}
	}
}

// runnerEnds has a live instance's runner take its job, report it (or
// not), finish and power off.
func (w *interleaving) runnerEnds() {
	e, ctx := w.e, context.Background()
	live := e.ec2.Live()
	if len(live) == 0 {
		return
	}
	in := live[w.rng.IntN(len(live))]
	name := in.Tags["skiff:runner-name"]
	if name != "" && w.rng.IntN(2) == 0 {
		_ = e.ledger.Advance(ctx, name, ledger.StateJobStarted, e.clock.now(), 0)
		_ = e.ledger.Advance(ctx, name, ledger.StateJobCompleted, e.clock.now(), 0)
	}
	e.ec2.SetState(in.ID, "terminated")
}

// events reports the ended instances, late, repeated and in any order, and
// moves the clock on.
func (w *interleaving) events() {
	e, ctx := w.e, context.Background()
	for _, in := range e.ec2.Instances() {
		if in.State == "terminated" && (!w.ended[in.ID] || w.rng.IntN(4) == 0) {
			if _, err := e.ledger.EndInstance(ctx, in.ID, e.clock.now(), "state_terminated"); err == nil {
				w.ended[in.ID] = true
			}
		}
	}
	e.clock.advance(time.Duration(w.rng.IntN(90)) * time.Second)
}

// drain delivers what is left, after the leases, until every message is
// done.
func (w *interleaving) drain() {
	e, ctx := w.e, context.Background()
	for try := 0; len(w.queue) > 0; try++ {
		if try > 50 {
			w.fail("%d messages never finished\n%s", len(w.queue), e.logs.String())
		}
		e.clock.advance(scaleup.DefaultClaimLease + time.Minute)
		var ds []queue.Delivery
		for _, m := range w.queue {
			m.d.ReceiveCount++
			ds = append(ds, m.d)
		}
		batch := w.queue[:min(len(w.queue), 10)]
		answers := e.svc.Handle(ctx, ds[:len(batch)])
		var done []*simMessage
		for i, a := range answers {
			if a.Verdict != queue.Retry {
				done = append(done, batch[i])
			}
		}
		for _, m := range done {
			w.queue = remove(w.queue, m)
		}
		w.check(-1)
	}
}

// checkCounts fails the test unless, every ended instance reported
// (EventBridge delivers each at least once; one that came before the
// ledger knew the instance is reported again by the reconciler's pass),
// each pool's live count is its live instances, and nothing was
// dead-lettered.
func (w *interleaving) checkCounts() {
	e, ctx := w.e, context.Background()
	for _, in := range e.ec2.Instances() {
		if in.State == "terminated" {
			_, _ = e.ledger.EndInstance(ctx, in.ID, e.clock.now(), "state_terminated")
		}
	}
	for _, pool := range []string{"cpu", "small"} {
		n, _ := e.ledger.Live(ctx, pool)
		alive := 0
		for _, in := range e.ec2.Live() {
			if in.Tags["skiff:pool"] == pool {
				alive++
			}
		}
		if n != alive {
			runners, _ := e.ledger.LiveRunners(ctx, pool)
			w.fail("pool %s: live count %d, live instances %d; live records %+v", pool, n, alive, runners)
		}
	}
	if dead := e.dlq.DeadLetters(); len(dead) != 0 {
		w.fail("dead letters %+v", dead)
	}
}

func remove(ms []*simMessage, m *simMessage) []*simMessage {
	for i, x := range ms {
		if x == m {
			return append(ms[:i], ms[i+1:]...)
		}
	}
	return ms
}

// maxLivePerJobByTags counts live instances per job from what the instance
// itself says: its job-id tag, else its registration's runner name.
func (e *env) maxLivePerJobByTags() int {
	regs := e.regs.all()
	per := map[string]int{}
	for _, in := range e.ec2.Live() {
		job := in.Tags["skiff:job-id"]
		if job == "" {
			if r, ok := regs[userdata.InstanceARN("aws", "eu-west-1", "123456789012", in.ID)]; ok {
				job = strings.Split(r.RunnerName, "-")[1] // skiff-<job id>-<gen>
			}
		}
		if job != "" {
			per[job]++
		}
	}
	most := 0
	for _, n := range per {
		most = max(most, n)
	}
	return most
}
