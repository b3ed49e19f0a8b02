package queue_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/queue"
	"github.com/skiffci/skiff/pkg/queue/queuetest"
	"github.com/skiffci/skiff/pkg/telemetry"
)

// TestMemoryReceiver: the in-memory queue delivers at least once, hides a
// received message for the visibility timeout, counts receives, and completes
// each verdict as SQS would.
func TestMemoryReceiver(t *testing.T) {
	t.Parallel()
	var now atomic.Int64
	now.Store(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC).UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	q := &queue.Memory{}
	q.SetClock(clock)
	q.SetVisibility(time.Minute)
	queuetest.RunReceiver(t, q, func(d time.Duration) { now.Add(int64(d)) }, func() {},
		func() ([]queue.DeadLetterRecord, error) { return q.DeadLetters(), nil })
	if q.Depth() != 1 {
		t.Fatalf("a retried message must stay: depth %d", q.Depth())
	}
}

type failingDL struct{ err error }

func (f failingDL) DeadLetter(context.Context, queue.Delivery, string, string) error { return f.err }

// TestCompleteBatch: retries and dead letters that could not be queued are
// redelivered; done and queued dead letters are not; nothing is lost.
func TestCompleteBatch(t *testing.T) {
	t.Parallel()
	ds := []queue.Delivery{
		queue.NewDelivery("done", `{}`, 1, ""), queue.NewDelivery("retry", `{}`, 1, ""), queue.NewDelivery("dead", `{}`, 3, ""),
	}
	as := []queue.Answer{{Verdict: queue.Done}, {Verdict: queue.Retry, Reason: "max_runners"}, {Verdict: queue.DeadLetter, Reason: "launch_invalid"}}
	log := slog.New(slog.NewJSONHandler(&testenv.SyncBuffer{}, nil))
	cases := []struct {
		name string
		dl   queue.DeadLetterer
		want []string
	}{
		{"dead letter queued", &queue.Memory{}, []string{"retry"}},
		{"dead letter failed: redelivered", failingDL{errors.New("dlq down")}, []string{"retry", "dead"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			counter := &telemetry.Memory{}
			got := queue.CompleteBatch(context.Background(), tc.dl, ds, as, counter, log)
			if !slices.Equal(got, tc.want) {
				t.Errorf("redeliver %v, want %v", got, tc.want)
			}
			if _, failed := tc.dl.(failingDL); failed && counter.Get(queue.MetricDeadLetterFailed, "launch_invalid") != 1 {
				t.Errorf("failed dead letter not counted: %v", counter.Snapshot())
			}
		})
	}
}

// TestConsume: the poll loop hands batches to the handler and completes every
// answer until the context ends.
func TestConsume(t *testing.T) {
	t.Parallel()
	q := &queue.Memory{}
	ctx, cancel := context.WithCancel(context.Background())
	for _, id := range []int64{1, 2, 3} {
		if err := q.Send(ctx, jobN(id)); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var seen []int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		queue.Consume(ctx, q, 2, func(_ context.Context, ds []queue.Delivery) []queue.Answer {
			as := make([]queue.Answer, len(ds))
			mu.Lock()
			defer mu.Unlock()
			for i, d := range ds {
				seen = append(seen, d.Job.JobID)
				if d.Job.JobID == 3 {
					as[i] = queue.Answer{Verdict: queue.DeadLetter, Reason: "launch_invalid"}
				}
			}
			if len(seen) == 3 {
				cancel()
			}
			return as
		}, slog.New(slog.NewJSONHandler(&testenv.SyncBuffer{}, nil)))
	}()
	<-done
	if !slices.Equal(seen, []int64{1, 2, 3}) || q.Depth() != 0 || len(q.DeadLetters()) != 1 {
		t.Errorf("seen %v, depth %d, dead letters %d; want 1,2,3 all completed and one dead letter", seen, q.Depth(), len(q.DeadLetters()))
	}
}

// TestConsumeConcurrently: the loops handle batches at once — each of
// these handlers returns only when all of them have started, which a
// single loop would never see (the test would hang) — and every answer is
// completed.
func TestConsumeConcurrently(t *testing.T) {
	t.Parallel()
	const workers = 3
	q := &queue.Memory{}
	ctx, cancel := context.WithCancel(context.Background())
	for id := range int64(workers) {
		if err := q.Send(ctx, jobN(id+1)); err != nil {
			t.Fatal(err)
		}
	}
	var started sync.WaitGroup
	started.Add(workers)
	var handled atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		queue.ConsumeConcurrently(ctx, q, 1, workers, func(_ context.Context, ds []queue.Delivery) []queue.Answer {
			started.Done()
			started.Wait()
			if handled.Add(int32(len(ds))) == workers {
				cancel()
			}
			return make([]queue.Answer, len(ds))
		}, slog.New(slog.NewJSONHandler(&testenv.SyncBuffer{}, nil)))
	}()
	<-done
	if handled.Load() != workers || q.Depth() != 0 {
		t.Errorf("handled %d, depth %d; want %d handled at once and completed", handled.Load(), q.Depth(), workers)
	}
}
