package room_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/pool/poolfile"
	"github.com/skiffci/skiff/pkg/queue"
	"github.com/skiffci/skiff/pkg/room"
	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/telemetry"
)

// live is a pool's count of live runners, set by the test.
type live struct {
	mu sync.Mutex
	n  int
}

func (l *live) Live(context.Context, string) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n, nil
}

// env is the room service over memory parts: a pool "p" of one slot.
type env struct {
	svc     *room.Service
	room    *room.Memory
	q       *queue.Memory
	records *store.Memory
	live    *live
	counter *telemetry.Memory
	clock   *ghsim.Clock // the shared manual clock
}

func newEnv(t *testing.T) *env {
	t.Helper()
	cfg, err := poolfile.Parse([]byte("version: 1\npools:\n  - name: p\n    labels: [p]\n    maxRunners: 1\n    process: {}\n"), "pools.yaml")
	if err != nil {
		t.Fatal(err)
	}
	e := &env{room: room.NewMemory(), q: &queue.Memory{}, records: store.NewMemory(), live: &live{},
		counter: &telemetry.Memory{}, clock: ghsim.NewClock(time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC))}
	e.q.SetClock(e.clock.Now)
	e.svc, err = room.New(room.Options{Room: e.room, Queue: e.q, Jobs: e.records, Pools: cfg, Ledger: e.live,
		Counter: e.counter, Now: e.clock.Now, Jitter: func() float64 { return 0.5 }})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func job(id int64, repo string) queue.Job {
	return queue.Job{JobID: id, RunID: 100 + id, Attempt: 1, Pool: "p", Repository: repo, Owner: "acme", InstallationID: 7, Labels: []string{"p"}}
}

// sent is what the room has sent so far that is visible now.
func (e *env) sent(t *testing.T) []int64 {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ds, err := e.q.Receive(ctx, 10)
	if err != nil && ctx.Err() == nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, d := range ds {
		ids = append(ids, d.Job.JobID)
		if err := e.q.Complete(context.Background(), d, queue.Answer{Verdict: queue.Done}); err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

func (e *env) waiting(t *testing.T) []room.Waiting {
	t.Helper()
	ws, _, err := e.room.Waiting(context.Background(), "p", e.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

// TestCrashBetweenEntryAndOffer: the room entry is written but the offer
// never leaves (the delayed send fails, or the process dies between the
// offer's mark and its send). The entry stays, is not offered twice while
// its lease runs, and the reconciler's sweep offers it once the lease is
// over.
func TestCrashBetweenEntryAndOffer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("delayed send lost", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.q.SetErr(errors.New("queue unavailable"))
		if err := e.svc.Wait(ctx, job(1, "acme/a"), "", "launch_capacity", "g6.xlarge: no capacity"); err != nil {
			t.Fatalf("Wait with the queue down = %v; the entry alone keeps the job", err)
		}
		e.q.SetErr(nil)
		ws := e.waiting(t)
		if len(ws) != 1 {
			t.Fatalf("waiting %+v, want job 1", ws)
		}
		e.clock.Advance(ws[0].OfferedUntil.Sub(e.clock.Now()) - time.Second)
		e.svc.Sweep(ctx)
		if got := e.sent(t); len(got) != 0 {
			t.Fatalf("offered %v while the lost send's lease still ran", got)
		}
		e.clock.Advance(2 * time.Second)
		e.svc.Sweep(ctx)
		if got := e.sent(t); len(got) != 1 || got[0] != 1 {
			t.Fatalf("the sweep after the lease offered %v, want [1]", got)
		}
	})

	t.Run("marked, never sent", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.live.n = 1
		if err := e.svc.Wait(ctx, job(2, "acme/a"), "", "max_runners", ""); err != nil {
			t.Fatal(err)
		}
		e.live.n = 0
		e.q.SetErr(errors.New("queue unavailable"))
		if n := e.svc.Wake(ctx, "p", 1); n != 0 {
			t.Fatalf("Wake with the queue down offered %d", n)
		}
		e.q.SetErr(nil)
		e.svc.Sweep(ctx)
		if got := e.sent(t); len(got) != 0 {
			t.Fatalf("offered %v again before the lost offer's lease ran out", got)
		}
		e.clock.Advance(room.DefaultOfferLease + time.Second)
		e.svc.Sweep(ctx)
		if got := e.sent(t); len(got) != 1 || got[0] != 2 {
			t.Fatalf("the sweep after the lease offered %v, want [2]", got)
		}
	})
}

// barrierRoom holds every reader of the room until n have read it, so that
// n wakers all see the job unoffered: the store's conditional offer alone
// must keep it from going out twice.
type barrierRoom struct {
	*room.Memory
	read *sync.WaitGroup
}

func (r barrierRoom) Waiting(ctx context.Context, pool string, now time.Time) ([]room.Waiting, map[string]time.Time, error) {
	ws, served, err := r.Memory.Waiting(ctx, pool, now)
	r.read.Done()
	r.read.Wait()
	return ws, served, err
}

// TestDuplicateWakeUps: several reporters of one freed slot (the EC2
// state-change function and the reconciler, each its own process) wake the
// room at the same moment; the job is offered once.
func TestDuplicateWakeUps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	if err := e.svc.Wait(ctx, job(3, "acme/a"), "", "max_runners", ""); err != nil {
		t.Fatal(err)
	}
	const wakers = 8
	var read sync.WaitGroup
	read.Add(wakers)
	shared := barrierRoom{Memory: e.room, read: &read}
	offered := make(chan int, wakers)
	var wg sync.WaitGroup
	for range wakers {
		svc, err := room.New(room.Options{Room: shared, Queue: e.q, Jobs: e.records, Ledger: e.live, Now: e.clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { offered <- svc.Wake(ctx, "p", 1) })
	}
	wg.Wait()
	close(offered)
	total := 0
	for n := range offered {
		total += n
	}
	if got := e.sent(t); total != 1 || len(got) != 1 {
		t.Fatalf("%d wakes for one slot: %d counted, %v sent; want one offer", wakers, total, got)
	}
}

// TestLeavingWhileWaiting: a job cancelled or completed while it waits,
// or one that has waited GitHub's 24-hour limit, leaves the room with its
// reason when its turn comes, without taking the slot.
func TestLeavingWhileWaiting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	for _, id := range []int64{10, 11, 12} {
		if err := e.svc.Wait(ctx, job(id, "acme/a"), "", "max_runners", ""); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(time.Second)
	}
	// 10 is cancelled, 11 completes on a runner of another pool.
	for _, j := range []store.JobRecord{
		{ID: 10, Repository: "acme/a", Status: store.StatusCompleted, Conclusion: "cancelled", CompletedAt: e.clock.Now()},
		{ID: 11, Repository: "acme/a", Status: store.StatusCompleted, Conclusion: "success", CompletedAt: e.clock.Now(), RunnerName: "other"},
	} {
		if _, err := e.records.RecordJob(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	if n := e.svc.Wake(ctx, "p", 1); n != 1 {
		t.Fatalf("Wake offered %d, want 1 (job 12)", n)
	}
	if got := e.sent(t); len(got) != 1 || got[0] != 12 {
		t.Fatalf("offered %v, want [12]: 10 and 11 need no runner", got)
	}
	if got := e.counter.Get(room.MetricLeft, "completed"); got != 2 {
		t.Errorf("left as completed: %d, want 2", got)
	}
	if ws := e.waiting(t); len(ws) != 1 || ws[0].JobID != 12 {
		t.Fatalf("waiting %+v, want only the offered 12", ws)
	}

	// 13 waits a whole day: GitHub has cancelled it by then.
	if err := e.svc.Wait(ctx, job(13, "acme/b"), "", "max_runners", ""); err != nil {
		t.Fatal(err)
	}
	e.svc.Leave(ctx, job(12, "acme/a"), "launched")
	e.live.n = 1 // the pool stays full
	e.clock.Advance(room.Limit - time.Minute)
	e.live.n = 0
	e.svc.Sweep(ctx)
	if got := e.sent(t); len(got) != 0 {
		t.Fatalf("offered %v: a job at GitHub's limit needs no runner", got)
	}
	if got := e.counter.Get(room.MetricLeft, "github_limit"); got != 1 {
		t.Errorf("left at GitHub's limit: %d, want 1", got)
	}
	if ws := e.waiting(t); len(ws) != 0 {
		t.Errorf("still waiting: %+v", ws)
	}
}
