package scaleup_test

import (
	"context"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/queue"
	"github.com/skiffci/skiff/pkg/room"
	"github.com/skiffci/skiff/pkg/scaleup"
)

// gpuOutage is the gpu pool (maxRunners 3) with no capacity in its place:
// jobs 800 and 801 were refused at t0, and at +15 s, when their delayed
// messages came, the place's backoff had grown to 5 minutes (as after a
// long outage), so both wait until +5m15s. The place's probe, armed at the
// first refusal, is due at +25 s (the test's jitter gives 25 s exactly).
type gpuOutage struct {
	*roomEnv
	t0    time.Time
	place string
	until time.Time
}

const gpuPlace = "g6.xlarge/subnet-0aaaaaaaa/on-demand"

func newGPUOutage(t *testing.T) *gpuOutage {
	t.Helper()
	o := &gpuOutage{roomEnv: newRoomEnv(t)}
	ctx := context.Background()
	o.t0 = o.clock.now()
	o.ec2.FailPool(gpuPlace, "InsufficientInstanceCapacity")
	o.deliver(t, o.gpu(800), o.gpu(801))
	o.place = o.waiting(t, "gpu")[0].Place
	o.clock.set(o.t0.Add(15 * time.Second))
	b, err := o.room.Refused(ctx, "gpu", o.place, o.clock.now(), func(int) time.Duration { return 5 * time.Minute })
	if err != nil {
		t.Fatal(err)
	}
	o.until = b.Until
	o.deliver(t, o.offered(t)...)
	for _, w := range o.waiting(t, "gpu") {
		if !w.WakeAt.Equal(o.until) || w.Tries != 2 {
			t.Fatalf("job %d waits until %s (tries %d); want the 5-minute backoff's end %s, tries 2", w.JobID, w.WakeAt, w.Tries, o.until)
		}
	}
	return o
}

func (o *gpuOutage) gpu(id int64) queue.Delivery {
	j := job(id, "gpu")
	j.Pool = "gpu"
	return message(j, 1)
}

// deliver hands the messages to scale-up; none may go back to the queue.
func (o *gpuOutage) deliver(t *testing.T, ds ...queue.Delivery) {
	t.Helper()
	if resp := o.handle(context.Background(), o.svc, ds...); len(resp.BatchItemFailures) != 0 {
		t.Fatalf("%d messages went back to the queue", len(resp.BatchItemFailures))
	}
}

// at sets the clock to t0+d and returns what the queue shows then.
func (o *gpuOutage) at(t *testing.T, d time.Duration) []queue.Delivery {
	t.Helper()
	o.clock.set(o.t0.Add(d))
	return o.offered(t)
}

// backoff reads the place's backoff (a refusal while it is under way
// changes nothing).
func (o *gpuOutage) backoff(t *testing.T) room.Backoff {
	t.Helper()
	b, err := o.room.Refused(context.Background(), "gpu", o.place, o.clock.now(), func(int) time.Duration { return time.Hour })
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func isProbe(ds []queue.Delivery, job int64) bool {
	return len(ds) == 1 && ds[0].Job.Probe && ds[0].Job.JobID == job
}

// TestProbe: while the place backs off for 5 minutes, its oldest job is
// offered again every 25 s. A refused probe grows neither the backoff nor
// the job's tries, sends nothing but the next probe, dead-letters
// nothing. When capacity returns, the next probe launches within 25 s,
// ending the backoff, and the place's other job is offered at once.
func TestProbe(t *testing.T) {
	t.Parallel()
	o := newGPUOutage(t)
	before := o.backoff(t)
	for i := 1; i <= 4; i++ {
		due := time.Duration(i) * 25 * time.Second
		if got := o.at(t, due-time.Second); len(got) != 0 {
			t.Fatalf("a second before probe %d: %d messages", i, len(got))
		}
		ds := o.at(t, due)
		if !isProbe(ds, 800) {
			t.Fatalf("at +%s: %+v; want the probe of job 800, the oldest", due, ds)
		}
		o.deliver(t, ds...)
		b := o.backoff(t)
		if b.Failures != before.Failures || !b.Until.Equal(before.Until) {
			t.Fatalf("after probe %d the backoff is %+v; want it unchanged, %+v", i, b, before)
		}
		if want := o.clock.now().Add(25 * time.Second); !b.ProbeAt.Equal(want) {
			t.Fatalf("after probe %d the next is due at %s, want %s", i, b.ProbeAt, want)
		}
		for _, w := range o.waiting(t, "gpu") {
			if w.Tries != 2 || !w.WakeAt.Equal(o.until) {
				t.Fatalf("after probe %d job %d waits until %s, tries %d; want its entry unchanged", i, w.JobID, w.WakeAt, w.Tries)
			}
		}
	}
	if n := len(o.dlq.DeadLetters()); n != 0 {
		t.Fatalf("%d dead letters", n)
	}
	if got := o.counter.Get(scaleup.MetricWaiting, "launch_capacity"); got != 4 {
		t.Errorf("%d jobs counted entering the room, want 4 (two jobs, twice each; the probes none)", got)
	}
	// Capacity returns at +110 s: the probe at +125 s launches job 800 and
	// offers 801 at once (the pool of 3 has 2 free slots).
	o.clock.set(o.t0.Add(110 * time.Second))
	o.ec2.FailPool(gpuPlace, "")
	ds := o.at(t, 125*time.Second)
	if !isProbe(ds, 800) {
		t.Fatalf("the probe after capacity returned: %+v", ds)
	}
	o.deliver(t, ds...)
	ds = o.offered(t)
	if len(ds) != 1 || ds[0].Job.JobID != 801 || ds[0].Job.Probe {
		t.Fatalf("offers after the probe launched: %+v; want job 801", ds)
	}
	o.deliver(t, ds...)
	if got := len(o.ec2.Live()); got != 2 {
		t.Errorf("%d live instances, want 2", got)
	}
	if ws := o.waiting(t, "gpu"); len(ws) != 0 {
		t.Errorf("still waiting: %+v", ws)
	}
	// No further probe, and the delayed messages at the old backoff's end launch nothing more.
	if got := o.at(t, 200*time.Second); len(got) != 0 {
		t.Errorf("messages after the recovery: %+v", got)
	}
	o.deliver(t, o.at(t, o.until.Sub(o.t0))...)
	if got := o.counter.Get(scaleup.MetricLaunched, "gpu"); got != 2 {
		t.Errorf("%d launches, want 2", got)
	}
}

// TestProbeLost: a probe's message is lost (a crash after the arm, a
// failed send). Once it was due, the reconciler's sweep arms the next,
// and so does the next refusal in the place.
func TestProbeLost(t *testing.T) {
	t.Parallel()
	o := newGPUOutage(t)
	ctx := context.Background()
	if !isProbe(o.at(t, 25*time.Second), 800) { // received, never handled: lost
		t.Fatal("no probe at +25s")
	}
	o.clock.set(o.t0.Add(30 * time.Second))
	o.svcRoom.Sweep(ctx) // the lost probe is due: armed again, for +55 s
	if got := o.at(t, 54*time.Second); len(got) != 0 {
		t.Fatalf("before the re-armed probe: %+v", got)
	}
	if !isProbe(o.at(t, 55*time.Second), 800) { // lost again
		t.Fatal("the sweep armed no probe after the first was lost")
	}
	o.clock.set(o.t0.Add(60 * time.Second))
	o.deliver(t, o.gpu(802)) // a fresh job, refused: arms the next probe, for +85 s
	o.clock.set(o.t0.Add(70 * time.Second))
	o.svcRoom.Sweep(ctx) // a probe is on its way: nothing more
	if !isProbe(o.at(t, 85*time.Second), 800) {
		t.Fatal("want one probe at +85s: the refusal's, after the last was lost")
	}
}

// TestProbeTwice: the probe delivered twice (SQS at-least-once) when
// capacity is back launches its job once, whether the two deliveries race
// (two invocations: the second takes the launch claim while the first is
// about to) or come one after the other. The launch claim is the gate.
func TestProbeTwice(t *testing.T) {
	t.Parallel()
	o := newGPUOutage(t)
	ctx := context.Background()
	o.ec2.FailPool(gpuPlace, "")
	ds := o.at(t, 25*time.Second)
	if !isProbe(ds, 800) {
		t.Fatalf("at +25s: %+v", ds)
	}
	first := o.opts
	first.Launches = &hookLaunches{Launches: o.store, beforeClaim: func() { o.deliver(t, ds[0]) }}
	racing, err := scaleup.New(first)
	if err != nil {
		t.Fatal(err)
	}
	if resp := o.handle(ctx, racing, ds[0]); len(resp.BatchItemFailures) != 1 {
		t.Errorf("the probe that lost the race: %+v; want it back to the queue as a claim conflict", resp)
	}
	o.deliver(t, ds[0])
	o.deliver(t, o.offered(t)...) // job 801, woken by the recovery
	if got := len(o.ec2.Live()); got != 2 {
		t.Errorf("%d live instances, want 2 (800 once, 801)", got)
	}
	if got := o.counter.Get(scaleup.MetricLaunched, "gpu"); got != 2 {
		t.Errorf("%d launches, want 2", got)
	}
}
