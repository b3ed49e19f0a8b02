package scaleup_test

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/queue"
	"github.com/skiffci/skiff/pkg/room"
	"github.com/skiffci/skiff/pkg/scaleup"
	"github.com/skiffci/skiff/pkg/store"
)

// roomEnv is the scale-up env with a waiting room: its queue receives the
// room's offers, and its ledger wakes the room when a runner ends.
type roomEnv struct {
	*env
	room    room.Store
	svcRoom *room.Service
	q       *queue.Memory
	ledger  room.Ledger
}

func newRoomEnv(t *testing.T) *roomEnv { return newRoomEnvWith(t, room.NewMemory()) }

// newRoomEnvWith is newRoomEnv over the given room store.
func newRoomEnvWith(t *testing.T, rm room.Store) *roomEnv {
	t.Helper()
	return newRoomEnvJitter(t, rm, func() float64 { return 0.5 })
}

// newRoomEnvJitter is newRoomEnvWith with the room's jitter (backoffs and
// probes) drawn from jitter.
func newRoomEnvJitter(t *testing.T, rm room.Store, jitter func() float64) *roomEnv {
	t.Helper()
	r := &roomEnv{room: rm, q: &queue.Memory{}}
	r.env = newEnv(t, func(o *scaleup.Options) {
		r.q.SetClock(o.Now)
		ledger := o.Ledger.(ledger.Ledger) // the whole ledger: the room reads live counts too
		svc, err := room.New(room.Options{Room: r.room, Queue: r.q, Jobs: o.Jobs.(*store.Memory), Pools: o.Pools,
			Ledger: ledger, Counter: o.Counter, Logger: o.Logger, Now: o.Now, Jitter: jitter})
		if err != nil {
			t.Fatal(err)
		}
		r.svcRoom = svc
		r.ledger = room.Ledger{Ledger: ledger, Room: svc}
		o.Ledger, o.Room = r.ledger, svc
	})
	return r
}

// offered receives what the room sent, as deliveries.
func (r *roomEnv) offered(t *testing.T) []queue.Delivery {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // what is visible now, without waiting
	ds, err := r.q.Receive(ctx, 10)
	if err != nil && ctx.Err() == nil {
		t.Fatal(err)
	}
	for _, d := range ds { // handed to scale-up: the queue's part is done
		if err := r.q.Complete(context.Background(), d, queue.Answer{Verdict: queue.Done}); err != nil {
			t.Fatal(err)
		}
	}
	return ds
}

func (r *roomEnv) waiting(t *testing.T, pool string) []room.Waiting {
	t.Helper()
	ws, _, err := r.room.Waiting(context.Background(), pool, r.clock.now())
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

// handleKept hands ds to scale-up and fails the test, naming what, if
// any of them goes back to the queue.
func (r *roomEnv) handleKept(ctx context.Context, t *testing.T, what string, ds ...queue.Delivery) {
	t.Helper()
	if resp := r.handle(ctx, r.svc, ds...); len(resp.BatchItemFailures) != 0 {
		t.Fatalf("%s: %+v", what, resp)
	}
}

// wakeOffsets is when each job waiting in pool wakes, as the time from
// since; 0 for a job waiting for a slot.
func (r *roomEnv) wakeOffsets(t *testing.T, pool string, since time.Time) map[int64]time.Duration {
	t.Helper()
	out := map[int64]time.Duration{}
	for _, w := range r.waiting(t, pool) {
		out[w.JobID] = 0
		if !w.WakeAt.IsZero() {
			out[w.JobID] = w.WakeAt.Sub(since)
		}
	}
	return out
}

// gpuMessage is the first delivery of job id, routed to the pool gpu.
func gpuMessage(id int64) queue.Delivery {
	j := job(id, "gpu")
	j.Pool = "gpu"
	return message(j, 1)
}

// TestWaitingRoomFullPool: a pool of 2 gets 5 jobs. Two launch; three wait
// in the room with their messages done (no attempt spent, nothing
// dead-lettered). Each runner that ends offers the next job at once, which
// launches; a duplicate wake launches nothing more; a wake lost in a crash
// is made good by the reconciler's sweep; a job that started elsewhere
// leaves the room without taking the slot.
func TestWaitingRoomFullPool(t *testing.T) {
	t.Parallel()
	r := newRoomEnv(t)
	ctx := context.Background()
	msgs := jobs(500, 5, "small")
	for i := range msgs {
		msgs[i].Job.Pool = "small"
		msgs[i] = message(msgs[i].Job, 1)
	}
	r.handleKept(ctx, t, "a full pool's jobs were returned to the queue", msgs...)
	if got := len(r.ec2.Live()); got != 2 {
		t.Fatalf("%d live instances, want 2 (maxRunners)", got)
	}
	if got := len(r.waiting(t, "small")); got != 3 {
		t.Fatalf("%d jobs waiting, want 3", got)
	}
	if n := len(r.dlq.DeadLetters()); n != 0 || r.counter.Get(scaleup.MetricWaiting, "max_runners") != 3 {
		t.Errorf("%d dead letters, %d counted waiting; want 0 and 3", n, r.counter.Get(scaleup.MetricWaiting, "max_runners"))
	}

	// A runner ends (its instance's state change, say): the oldest waiting job is offered at once, and launches.
	live, _ := r.env.ledger.LiveRunners(ctx, "small")
	if _, err := r.ledger.End(ctx, live[0].Name, r.clock.now(), "state_terminated"); err != nil {
		t.Fatal(err)
	}
	r.ec2.SetState(live[0].InstanceID, "terminated")
	offers := r.offered(t)
	if len(offers) != 1 || offers[0].Job.JobID != 502 || offers[0].Job.Waited != 1 {
		t.Fatalf("offers after one runner ended: %+v; want job 502, waited once", offers)
	}
	// A second wake for the same end (two reporters) does not offer 502
	// again while its offer is under way: it offers the next job.
	r.svcRoom.Wake(ctx, "small", 1)
	again := r.offered(t)
	if len(again) != 1 || again[0].Job.JobID != 503 {
		t.Fatalf("offers of a second wake: %+v; want job 503", again)
	}
	// The offers, 502's delivered twice (SQS at-least-once): one slot, so
	// 502 launches once and 503 waits again.
	r.handleKept(ctx, t, "the offered jobs", offers[0], offers[0], again[0])
	if got := len(r.ec2.Live()); got != 2 {
		t.Errorf("%d live instances after the offers, want 2", got)
	}
	if ws := r.waiting(t, "small"); len(ws) != 2 || ws[0].JobID != 503 || ws[0].Tries != 2 {
		t.Errorf("waiting after the launch: %+v; want 503 (entered twice) and 504", ws)
	}

	// A runner ends but its wake-up is lost (the reporter crashed after the
	// ledger's end): the reconciler's sweep offers for the free slot.
	live, _ = r.env.ledger.LiveRunners(ctx, "small")
	if _, err := r.env.ledger.End(ctx, live[0].Name, r.clock.now(), "state_terminated"); err != nil {
		t.Fatal(err)
	}
	r.ec2.SetState(live[0].InstanceID, "terminated")
	if got := r.offered(t); len(got) != 0 {
		t.Fatalf("offers without a wake: %+v", got)
	}
	// Job 503 started on some other runner meanwhile: it leaves without taking the slot.
	if _, err := r.jobs.RecordJob(ctx, store.JobRecord{ID: 503, Status: store.StatusInProgress, StartedAt: r.clock.now(),
		RunnerName: "elsewhere"}); err != nil {
		t.Fatal(err)
	}
	r.svcRoom.Sweep(ctx)
	offers = r.offered(t)
	if len(offers) != 1 || offers[0].Job.JobID != 504 {
		t.Fatalf("the sweep's offers: %+v; want job 504 (503 started elsewhere)", offers)
	}
	r.handleKept(ctx, t, "the swept job", offers[0])
	if ws := r.waiting(t, "small"); len(ws) != 0 {
		t.Errorf("still waiting: %+v", ws)
	}
	if got := len(r.ec2.Live()); got != 2 {
		t.Errorf("%d live instances at the end, want 2", got)
	}
}

// TestWaitingRoomCapacity: a job refused for capacity waits out a backoff
// (15 s, then 30 s, …) through a delayed message, not the queue's
// visibility timeout; when capacity returns it launches.
func TestWaitingRoomCapacity(t *testing.T) {
	t.Parallel()
	r := newRoomEnv(t)
	ctx := context.Background()
	r.ec2.FailPool("c7i.xlarge/subnet-0aaaaaaaa/on-demand", "InsufficientInstanceCapacity")
	msg := message(job(700, "ondemand"), 1)
	msg.Job.Pool = "ondemand"
	msg = message(msg.Job, 1)
	r.handleKept(ctx, t, "a job refused for capacity went back to the queue", msg)
	ws := r.waiting(t, "ondemand")
	if len(ws) != 1 || ws[0].Reason != "launch_capacity" || ws[0].Detail == "" {
		t.Fatalf("waiting: %+v; want job 700 for launch_capacity with the provider's detail", ws)
	}
	if got := ws[0].WakeAt.Sub(r.clock.now()); got != 15*time.Second {
		t.Errorf("first backoff %s, want 15s", got)
	}
	if got := r.offered(t); len(got) != 0 {
		t.Fatalf("offered before the backoff: %+v", got)
	}
	r.clock.advance(15 * time.Second)
	offers := r.offered(t)
	if len(offers) != 1 || offers[0].Job.Waited != 1 {
		t.Fatalf("after the backoff: %+v", offers)
	}
	// Still no capacity: the next backoff is twice as long.
	r.handleKept(ctx, t, "second refusal", offers[0])
	if ws := r.waiting(t, "ondemand"); len(ws) != 1 || ws[0].WakeAt.Sub(r.clock.now()) != 30*time.Second || ws[0].Tries != 2 {
		t.Fatalf("after the second refusal: %+v; want a 30s backoff, tries 2", ws)
	}
	// Capacity returns. The place's probe, armed at the first refusal for
	// +25s, comes before the backoff's end (+45s) and launches the job.
	r.ec2.FailPool("c7i.xlarge/subnet-0aaaaaaaa/on-demand", "")
	r.clock.advance(10 * time.Second)
	offers = r.offered(t)
	if len(offers) != 1 || !offers[0].Job.Probe || offers[0].Job.JobID != 700 {
		t.Fatalf("at +25s: %+v; want the probe of job 700", offers)
	}
	r.handleKept(ctx, t, "with capacity back", offers[0])
	if got := len(r.ec2.Live()); got != 1 {
		t.Errorf("%d live instances, want 1", got)
	}
	if ws := r.waiting(t, "ondemand"); len(ws) != 0 {
		t.Errorf("still waiting after the launch: %+v", ws)
	}
	// The job's own delayed message at the backoff's end launches nothing more.
	r.clock.advance(20 * time.Second)
	r.handleKept(ctx, t, "the late message", r.offered(t)...)
	if got := r.counter.Get(scaleup.MetricLaunched, "ondemand"); got != 1 {
		t.Errorf("%d launches, want 1", got)
	}
}

// TestWaitingRoomSharedBackoff: the jobs of a pool refused for capacity in
// one place share one backoff, whichever invocation refused them: a job
// refused while it is under way waits for the same end, and a failed try
// at the end doubles it once, not once per job. When a launch there
// succeeds, the backoff ends and the waiting jobs are offered at once, one
// per free slot; the rest go at the next freed slot, and the delayed
// messages still on their way launch nothing more.
func TestWaitingRoomSharedBackoff(t *testing.T) {
	t.Parallel()
	r := newRoomEnv(t)
	ctx := context.Background()
	const capacityPool = "g6.xlarge/subnet-0aaaaaaaa/on-demand"
	t0 := r.clock.now()
	r.ec2.FailPool(capacityPool, "InsufficientInstanceCapacity")
	for i, id := range []int64{800, 801, 802} { // three invocations, 5 s apart
		if i > 0 {
			r.clock.advance(5 * time.Second)
		}
		r.handleKept(ctx, t, fmt.Sprintf("job %d went back to the queue", id), gpuMessage(id))
	}
	if got, want := r.wakeOffsets(t, "gpu", t0), map[int64]time.Duration{800: 15 * time.Second, 801: 15 * time.Second, 802: 15 * time.Second}; !maps.Equal(got, want) {
		t.Fatalf("wake times after three refusals in one place: %v; want all at the shared backoff's end, %v", got, want)
	}
	r.clock.set(t0.Add(15 * time.Second))
	offers := r.offered(t)
	if len(offers) != 3 {
		t.Fatalf("%d delayed messages at the backoff's end, want 3", len(offers))
	}
	// The try at the end fails for all three: the backoff doubles once.
	r.handleKept(ctx, t, "the second refusal", offers...)
	if got, want := r.wakeOffsets(t, "gpu", t0), map[int64]time.Duration{800: 45 * time.Second, 801: 45 * time.Second, 802: 45 * time.Second}; !maps.Equal(got, want) {
		t.Fatalf("wake times after the failed try: %v; want all at +15s+30s, %v", got, want)
	}

	// Capacity returns; a fresh job launches: the place's waiting jobs are
	// offered at once, as many as the pool has free slots (3 - 1 = 2),
	// oldest first.
	r.clock.set(t0.Add(24 * time.Second)) // a second before the place's probe
	r.ec2.FailPool(capacityPool, "")
	r.handleKept(ctx, t, "the fresh job", gpuMessage(803))
	offers = r.offered(t)
	if len(offers) != 2 || offers[0].Job.JobID != 800 || offers[1].Job.JobID != 801 {
		t.Fatalf("offers when capacity returned: %+v; want jobs 800 and 801 (two free slots)", offers)
	}
	r.handleKept(ctx, t, "the woken jobs", offers...)
	if got := len(r.ec2.Live()); got != 3 {
		t.Fatalf("%d live instances, want 3 (maxRunners)", got)
	}
	// 802 no longer waits out a backoff: the next freed slot takes it.
	if got := r.wakeOffsets(t, "gpu", t0); !maps.Equal(got, map[int64]time.Duration{802: 0}) {
		t.Fatalf("waiting after the woken jobs launched: %v; want 802 for a slot", got)
	}
	live, _ := r.env.ledger.LiveRunners(ctx, "gpu")
	if _, err := r.ledger.End(ctx, live[0].Name, r.clock.now(), "state_terminated"); err != nil {
		t.Fatal(err)
	}
	r.ec2.SetState(live[0].InstanceID, "terminated")
	offers = r.offered(t)
	if len(offers) != 1 || offers[0].Job.JobID != 802 {
		t.Fatalf("offers after a runner ended: %+v; want job 802", offers)
	}
	r.handleKept(ctx, t, "job 802", offers...)
	// The probe (+25s) and the delayed messages of the failed try (+45s)
	// arrive: the launch claims stop them.
	r.clock.set(t0.Add(45 * time.Second))
	late := r.offered(t)
	if len(late) != 4 {
		t.Fatalf("%d late messages, want 4 (the probe and 3 delayed)", len(late))
	}
	r.handleKept(ctx, t, "the late messages", late...)
	if got := len(r.ec2.Live()); got != 3 {
		t.Errorf("%d live instances after the late messages, want 3", got)
	}
	if got := r.counter.Get(scaleup.MetricLaunched, "gpu"); got != 4 {
		t.Errorf("%d runners launched, want 4 (jobs 800-803, each once)", got)
	}
	if n := len(r.dlq.DeadLetters()); n != 0 {
		t.Errorf("%d dead letters, want 0", n)
	}
	if ws := r.waiting(t, "gpu"); len(ws) != 0 {
		t.Errorf("still waiting: %+v", ws)
	}
}
