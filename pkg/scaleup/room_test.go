package scaleup_test

import (
	"context"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/queue"
	"github.com/skiffci/skiff/pkg/room"
	"github.com/skiffci/skiff/pkg/scaleup"
	"github.com/skiffci/skiff/pkg/store"
)

// roomEnv is the scale-up env with a waiting room: its queue receives the
// room's offers, and its ledger wakes the room when a runner ends.
type roomEnv struct {
	*env
	room    *store.RoomMemory
	svcRoom *room.Service
	q       *queue.Memory
	ledger  room.Ledger
}

func newRoomEnv(t *testing.T) *roomEnv {
	t.Helper()
	r := &roomEnv{room: store.NewRoomMemory(), q: &queue.Memory{}}
	r.env = newEnv(t, func(o *scaleup.Options) {
		r.q.SetClock(o.Now)
		svc, err := room.New(room.Options{Room: r.room, Queue: r.q, Records: o.Records.(*store.Memory), Pools: o.Pools,
			Ledger: o.Ledger, Logger: o.Logger, Now: o.Now, Jitter: func() float64 { return 0.5 }})
		if err != nil {
			t.Fatal(err)
		}
		r.svcRoom = svc
		r.ledger = room.Ledger{Ledger: o.Ledger, Room: svc}
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
		if err := r.q.Settle(context.Background(), d, queue.Answer{Verdict: queue.Done}); err != nil {
			t.Fatal(err)
		}
	}
	return ds
}

func (r *roomEnv) waiting(t *testing.T, pool string) []store.Waiting {
	t.Helper()
	ws, _, err := r.room.Waiting(context.Background(), pool, r.clock.now())
	if err != nil {
		t.Fatal(err)
	}
	return ws
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
	if resp := r.handle(ctx, r.svc, msgs...); len(resp.BatchItemFailures) != 0 {
		t.Fatalf("a full pool's jobs were returned to the queue: %+v", resp)
	}
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
	if resp := r.handle(ctx, r.svc, offers[0], offers[0], again[0]); len(resp.BatchItemFailures) != 0 {
		t.Fatalf("the offered jobs: %+v", resp)
	}
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
	if _, err := r.jobs.RecordJob(ctx, store.Job{ID: 503, Status: store.StatusInProgress, StartedAt: r.clock.now(),
		RunnerName: "elsewhere"}); err != nil {
		t.Fatal(err)
	}
	r.svcRoom.Sweep(ctx)
	offers = r.offered(t)
	if len(offers) != 1 || offers[0].Job.JobID != 504 {
		t.Fatalf("the sweep's offers: %+v; want job 504 (503 started elsewhere)", offers)
	}
	if resp := r.handle(ctx, r.svc, offers[0]); len(resp.BatchItemFailures) != 0 {
		t.Fatalf("the swept job: %+v", resp)
	}
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
	if resp := r.handle(ctx, r.svc, msg); len(resp.BatchItemFailures) != 0 {
		t.Fatalf("a job refused for capacity went back to the queue: %+v", resp)
	}
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
	if resp := r.handle(ctx, r.svc, offers[0]); len(resp.BatchItemFailures) != 0 {
		t.Fatalf("second refusal: %+v", resp)
	}
	if ws := r.waiting(t, "ondemand"); len(ws) != 1 || ws[0].WakeAt.Sub(r.clock.now()) != 30*time.Second || ws[0].Tries != 2 {
		t.Fatalf("after the second refusal: %+v; want a 30s backoff, tries 2", ws)
	}
	r.ec2.FailPool("c7i.xlarge/subnet-0aaaaaaaa/on-demand", "")
	r.clock.advance(30 * time.Second)
	offers = r.offered(t)
	if len(offers) != 1 {
		t.Fatalf("after the second backoff: %+v", offers)
	}
	if resp := r.handle(ctx, r.svc, offers[0]); len(resp.BatchItemFailures) != 0 {
		t.Fatalf("with capacity back: %+v", resp)
	}
	if got := len(r.ec2.Live()); got != 1 {
		t.Errorf("%d live instances, want 1", got)
	}
	if ws := r.waiting(t, "ondemand"); len(ws) != 0 {
		t.Errorf("still waiting after the launch: %+v", ws)
	}
}
