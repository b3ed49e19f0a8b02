package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/names"
)

// RunLedger is the conformance suite of ledger.Ledger. newLedger returns an
// empty ledger whose clock is now (the suite moves it to check expiry).
func RunLedger(t *testing.T, newLedger func(t *testing.T, now func() time.Time) ledger.Ledger) {
	for _, c := range []struct {
		name string
		run  func(*testing.T, newLedgerFunc)
	}{
		{"ReserveWithinMax", ledgerReserveWithinMax},
		{"ReserveIsIdempotent", ledgerReserveIsIdempotent},
		{"ForwardOnly", ledgerForwardOnly},
		{"StartTimes", ledgerStartTimes},
		{"EndsOnce", ledgerEndsOnce},
		{"NotFound", ledgerNotFound},
		{"Concurrent", ledgerConcurrent},
		{"EndedRecordsExpire", ledgerEndedRecordsExpire},
		{"Awaiting", ledgerAwaiting},
		{"AwaitingExpires", ledgerAwaitingExpires},
		{"WarmTake", ledgerWarmTake},
	} {
		t.Run(c.name, func(t *testing.T) { c.run(t, newLedger) })
	}
}

// newLedgerFunc returns an empty ledger whose clock is now.
type newLedgerFunc = func(t *testing.T, now func() time.Time) ledger.Ledger

// fixedNow is a clock stopped at Now.
func fixedNow() time.Time { return Now }

// ledgerReserveWithinMax is RunLedger's ReserveWithinMax case.
func ledgerReserveWithinMax(t *testing.T, newLedger newLedgerFunc) {
	t.Parallel()
	l := newLedger(t, fixedNow)
	ctx := context.Background()
	n, err := l.Reserve(ctx, "cpu", 3, runners("cpu", 1, 5))
	if err != nil || n != 3 {
		t.Fatalf("Reserve(5 of max 3) = %d, %v; want 3", n, err)
	}
	if live, _ := l.Live(ctx, "cpu"); live != 3 {
		t.Errorf("live %d, want 3", live)
	}
	if n, err := l.Reserve(ctx, "cpu", 3, runners("cpu", 10, 1)); err != nil || n != 0 {
		t.Errorf("Reserve into a full pool = %d, %v; want 0", n, err)
	}
	if n, err := l.Reserve(ctx, "gpu", 1, runners("gpu", 20, 1)); err != nil || n != 1 {
		t.Errorf("another pool's count is its own: Reserve = %d, %v", n, err)
	}
	got, err := l.LiveRunners(ctx, "cpu")
	if err != nil || len(got) != 3 || got[0].State != ledger.StateReserved || got[0].JobID == 0 {
		t.Errorf("LiveRunners = %+v, %v", got, err)
	}
}

// ledgerReserveIsIdempotent is RunLedger's ReserveIsIdempotent case.
func ledgerReserveIsIdempotent(t *testing.T, newLedger newLedgerFunc) {
	t.Parallel()
	l := newLedger(t, fixedNow)
	ctx := context.Background()
	rs := runners("cpu", 1, 2)
	if n, err := l.Reserve(ctx, "cpu", 10, rs); err != nil || n != 2 {
		t.Fatalf("Reserve = %d, %v", n, err)
	}
	if n, err := l.Reserve(ctx, "cpu", 10, rs); err != nil || n != 0 {
		t.Errorf("Reserve of the same runners again = %d, %v; want 0 new", n, err)
	}
	if live, _ := l.Live(ctx, "cpu"); live != 2 {
		t.Errorf("live %d after a repeated reservation, want 2", live)
	}
}

// ledgerForwardOnly is RunLedger's ForwardOnly case.
func ledgerForwardOnly(t *testing.T, newLedger newLedgerFunc) {
	t.Parallel()
	l := newLedger(t, fixedNow)
	ctx := context.Background()
	r := runners("cpu", 1, 1)[0]
	mustReserve(t, l, r)
	if err := l.Launched(ctx, r.Name, ledger.LaunchReport{InstanceID: "i-0a", InstanceType: "c7i.large", Zone: "eu-west-1a", Spot: true, At: Now}); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		to   ledger.State
		at   time.Duration
		want ledger.State
	}{
		{ledger.StateJobStarted, 40 * time.Second, ledger.StateJobStarted},
		{ledger.StateRegistered, 30 * time.Second, ledger.StateJobStarted}, // late: fills its time only
		{ledger.StateJobCompleted, 90 * time.Second, ledger.StateJobCompleted},
		{ledger.StateJobStarted, 45 * time.Second, ledger.StateJobCompleted}, // repeated: nothing moves
	}
	for i, s := range steps {
		if err := l.Advance(ctx, r.Name, s.to, Now.Add(s.at), r.JobID); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		got, _ := l.Runner(ctx, r.Name)
		if got.State != s.want {
			t.Errorf("step %d (%s): state %s, want %s", i, s.to, got.State, s.want)
		}
	}
	got, err := l.RunnerByInstance(ctx, "i-0a")
	if err != nil || got.Name != r.Name || got.InstanceType != "c7i.large" || !got.Spot || got.Zone != "eu-west-1a" ||
		!got.RegisteredAt.Equal(Now.Add(30*time.Second)) || !got.StartedAt.Equal(Now.Add(40*time.Second)) ||
		!got.CompletedAt.Equal(Now.Add(90*time.Second)) || got.BusyJob != r.JobID {
		t.Errorf("record %+v, %v", got, err)
	}
}

// ledgerStartTimes is RunLedger's StartTimes case: the times a metrics
// record's start is built from (reserved, launched, registered) keep their
// milliseconds, the start kind is the first launch report's, and a runner
// whose launch report named no kind has none.
func ledgerStartTimes(t *testing.T, newLedger newLedgerFunc) {
	t.Parallel()
	l := newLedger(t, fixedNow)
	ctx := context.Background()
	rs := runners("cpu", 1, 2)
	rs[0].ReservedAt, rs[1].ReservedAt = Now.Add(1234*time.Millisecond), Now
	mustReserve(t, l, rs...)
	steps := []struct {
		runner string
		l      ledger.LaunchReport
	}{
		{rs[0].Name, ledger.LaunchReport{InstanceID: "i-0s", StartKind: ledger.StartStopped, At: Now.Add(2500 * time.Millisecond)}},
		// A repeated report, naming another kind: the first one stands.
		{rs[0].Name, ledger.LaunchReport{InstanceID: "i-0s", StartKind: ledger.StartCold, At: Now.Add(9 * time.Second)}},
		{rs[1].Name, ledger.LaunchReport{InstanceID: "i-0n", At: Now.Add(time.Second)}},
	}
	for i, s := range steps {
		if err := l.Launched(ctx, s.runner, s.l); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	if err := l.Advance(ctx, rs[0].Name, ledger.StateRegistered, Now.Add(20*time.Second+7*time.Millisecond), 0); err != nil {
		t.Fatal(err)
	}
	got, err := l.Runner(ctx, rs[0].Name)
	if err != nil || !got.ReservedAt.Equal(Now.Add(1234*time.Millisecond)) || !got.LaunchedAt.Equal(Now.Add(2500*time.Millisecond)) ||
		!got.RegisteredAt.Equal(Now.Add(20*time.Second+7*time.Millisecond)) || got.StartKind != ledger.StartStopped {
		t.Errorf("record %+v, %v; want reserved +1.234 s, launched +2.5 s, registered +20.007 s, a stopped start", got, err)
	}
	other, err := l.Runner(ctx, rs[1].Name)
	if err != nil || other.StartKind != "" || !other.RegisteredAt.IsZero() {
		t.Errorf("record %+v, %v; want no start kind and no registration", other, err)
	}
}

// ledgerEndsOnce is RunLedger's EndsOnce case.
func ledgerEndsOnce(t *testing.T, newLedger newLedgerFunc) {
	t.Parallel()
	l := newLedger(t, fixedNow)
	ctx := context.Background()
	rs := runners("cpu", 1, 2)
	mustReserve(t, l, rs...)
	if err := l.Launched(ctx, rs[0].Name, ledger.LaunchReport{InstanceID: "i-0b", At: Now}); err != nil {
		t.Fatal(err)
	}
	first, err := l.EndInstance(ctx, "i-0b", Now.Add(time.Minute), "state_change")
	if err != nil || !first {
		t.Fatalf("EndInstance = %v, %v; want the first end", first, err)
	}
	for _, again := range []func() (bool, error){
		func() (bool, error) { return l.End(ctx, rs[0].Name, Now.Add(2*time.Minute), "reconciler") },
		func() (bool, error) { return l.EndInstance(ctx, "i-0b", Now.Add(3*time.Minute), "state_change") },
	} {
		if ended, err := again(); err != nil || ended {
			t.Errorf("a repeated end = %v, %v; want false, nil", ended, err)
		}
	}
	if live, _ := l.Live(ctx, "cpu"); live != 1 {
		t.Errorf("live %d after ending one of two, want 1", live)
	}
	got, _ := l.Runner(ctx, rs[0].Name)
	if got.State != ledger.StateTerminated || got.Reason != "state_change" || !got.EndedAt.Equal(Now.Add(time.Minute)) {
		t.Errorf("ended record %+v: the first report must win", got)
	}
	if err := l.Advance(ctx, rs[0].Name, ledger.StateJobStarted, Now.Add(30*time.Second), rs[0].JobID); err != nil {
		t.Fatal(err)
	}
	if got, _ := l.Runner(ctx, rs[0].Name); got.State != ledger.StateTerminated || got.StartedAt.IsZero() {
		t.Errorf("a late job-started report reopened or lost: %+v", got)
	}
	if ended, err := l.End(ctx, rs[1].Name, Now, "released"); err != nil || !ended {
		t.Errorf("releasing a reservation = %v, %v", ended, err)
	}
	if live, _ := l.Live(ctx, "cpu"); live != 0 {
		t.Errorf("live %d, want 0", live)
	}
}

// ledgerNotFound is RunLedger's NotFound case.
func ledgerNotFound(t *testing.T, newLedger newLedgerFunc) {
	t.Parallel()
	l := newLedger(t, fixedNow)
	ctx := context.Background()
	if err := l.Advance(ctx, "skiff-404-1", ledger.StateJobStarted, Now, 404); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("Advance(unknown) = %v", err)
	}
	if _, err := l.End(ctx, "skiff-404-1", Now, "x"); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("End(unknown) = %v", err)
	}
	if _, err := l.EndInstance(ctx, "i-0404", Now, "x"); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("EndInstance(unknown) = %v", err)
	}
	if _, err := l.Runner(ctx, "skiff-404-1"); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("Runner(unknown) = %v", err)
	}
}

// ledgerConcurrent is RunLedger's Concurrent case.
func ledgerConcurrent(t *testing.T, newLedger newLedgerFunc) {
	t.Parallel()
	l := newLedger(t, fixedNow)
	ctx := context.Background()
	var reserved atomic.Int64
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := l.Reserve(ctx, "cpu", 10, runners("cpu", int64(100+i), 1))
			if err != nil {
				t.Error(err)
			}
			reserved.Add(int64(n))
		}()
	}
	wg.Wait()
	if reserved.Load() != 10 {
		t.Fatalf("%d reserved by concurrent callers under max 10, want 10", reserved.Load())
	}
	live, _ := l.LiveRunners(ctx, "cpu")
	var ends atomic.Int64
	for _, r := range live {
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if ended, err := l.End(ctx, r.Name, Now, "concurrent"); err != nil {
					t.Error(err)
				} else if ended {
					ends.Add(1)
				}
			}()
		}
	}
	wg.Wait()
	if n, _ := l.Live(ctx, "cpu"); ends.Load() != 10 || n != 0 {
		t.Errorf("%d ends reported first for 10 runners ended 3 times each, live %d; want 10 and 0", ends.Load(), n)
	}
}

// ledgerEndedRecordsExpire is RunLedger's EndedRecordsExpire case.
func ledgerEndedRecordsExpire(t *testing.T, newLedger newLedgerFunc) {
	t.Parallel()
	clock := &setClock{at: Now}
	l := newLedger(t, clock.now)
	ctx := context.Background()
	rs := runners("cpu", 1, 2)
	mustReserve(t, l, rs...)
	if _, err := l.End(ctx, rs[0].Name, Now, "done"); err != nil {
		t.Fatal(err)
	}
	clock.set(Now.Add(ledger.DefaultRunnerTTL + time.Hour))
	if _, err := l.Runner(ctx, rs[0].Name); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("an ended record past its retention = %v, want ErrNotFound", err)
	}
	if got, err := l.Runner(ctx, rs[1].Name); err != nil || got.State != ledger.StateReserved {
		t.Errorf("a live record must never expire: %+v, %v", got, err)
	}
}

// ledgerAwaiting is RunLedger's Awaiting case: EndAwaiting ends a live
// runner once, as End does, and puts it on its pool's awaiting list whoever
// ended it; the list shows what later events fill in (the busy job), never
// a live runner nor another pool's; StopAwaiting takes a runner off it, once or
// many times, and is no error for a runner not on it or unknown.
func ledgerAwaiting(t *testing.T, newLedger newLedgerFunc) {
	t.Parallel()
	l := newLedger(t, fixedNow)
	ctx := context.Background()
	rs := runners("cpu", 1, 4) // 1: awaited by its end; 2: ended before; 3: ended by End; 4: live
	for _, r := range append(rs, runners("gpu", 9, 1)...) {
		mustReserve(t, l, r)
		if err := l.Launched(ctx, r.Name, ledger.LaunchReport{InstanceID: "i-" + r.Name, At: Now}); err != nil {
			t.Fatal(err)
		}
	}
	if ended, err := l.EndAwaiting(ctx, rs[0].Name, Now.Add(time.Minute), "instance_gone"); err != nil || !ended {
		t.Fatalf("EndAwaiting(live) = %v, %v; want the first end", ended, err)
	}
	if _, err := l.EndInstance(ctx, "i-"+rs[1].Name, Now.Add(time.Minute), "state_terminated"); err != nil {
		t.Fatal(err)
	}
	if ended, err := l.EndAwaiting(ctx, rs[1].Name, Now.Add(2*time.Minute), "instance_gone"); err != nil || ended {
		t.Errorf("EndAwaiting(ended) = %v, %v; want false, nil", ended, err)
	}
	if ended, err := l.EndAwaiting(ctx, rs[0].Name, Now.Add(2*time.Minute), "again"); err != nil || ended {
		t.Errorf("a repeated EndAwaiting = %v, %v; want false, nil", ended, err)
	}
	if _, err := l.End(ctx, rs[2].Name, Now.Add(time.Minute), "job_completed"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.EndAwaiting(ctx, "gpu-unknown", Now, "x"); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("EndAwaiting(unknown) = %v, want ErrNotFound", err)
	}
	if _, err := l.EndAwaiting(ctx, runners("gpu", 9, 1)[0].Name, Now.Add(time.Minute), "idle"); err != nil {
		t.Fatal(err)
	}
	if live, _ := l.Live(ctx, "cpu"); live != 1 {
		t.Errorf("live %d, want 1: EndAwaiting takes a runner off its pool's count once", live)
	}
	// A late event names the job rs[0] ran, after its end.
	if err := l.Advance(ctx, rs[0].Name, ledger.StateJobCompleted, Now.Add(90*time.Second), 77); err != nil {
		t.Fatal(err)
	}
	names := func() []string {
		t.Helper()
		got, err := l.Awaiting(ctx, "cpu")
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range got {
			out = append(out, r.Name)
			if r.State != ledger.StateTerminated {
				t.Errorf("awaiting %s in state %s, want terminated", r.Name, r.State)
			}
			if r.Name == rs[0].Name && (r.BusyJob != 77 || r.Reason != "instance_gone" || !r.EndedAt.Equal(Now.Add(time.Minute))) {
				t.Errorf("awaiting record %+v: want busy job 77 from the late event, and the first end", r)
			}
		}
		return out
	}
	if got, want := fmt.Sprint(names()), fmt.Sprint([]string{rs[0].Name, rs[1].Name}); got != want {
		t.Errorf("Awaiting(cpu) = %s, want %s", got, want)
	}
	if got, err := l.LiveRunners(ctx, "cpu"); err != nil || len(got) != 1 || got[0].Name != rs[3].Name {
		t.Errorf("LiveRunners(cpu) = %+v, %v; want only %s: awaiting runners are not live", got, err, rs[3].Name)
	}
	for _, name := range []string{rs[0].Name, rs[0].Name, rs[2].Name, rs[3].Name, "skiff-404-1"} {
		if err := l.StopAwaiting(ctx, name); err != nil {
			t.Errorf("StopAwaiting(%s) = %v", name, err)
		}
	}
	if got, want := fmt.Sprint(names()), fmt.Sprint([]string{rs[1].Name}); got != want {
		t.Errorf("Awaiting(cpu) after StopAwaiting = %s, want %s", got, want)
	}
	if got, err := l.LiveRunners(ctx, "cpu"); err != nil || len(got) != 1 {
		t.Errorf("LiveRunners(cpu) after taking a live runner off the awaiting list = %+v, %v; want it still live", got, err)
	}
	if got, err := l.Awaiting(ctx, "gpu"); err != nil || len(got) != 1 {
		t.Errorf("Awaiting(gpu) = %+v, %v; want its one runner", got, err)
	}
}

// ledgerAwaitingExpires is RunLedger's AwaitingExpires case: an awaiting
// runner whose record has expired is off the list.
func ledgerAwaitingExpires(t *testing.T, newLedger newLedgerFunc) {
	t.Parallel()
	clock := &setClock{at: Now}
	l := newLedger(t, clock.now)
	ctx := context.Background()
	r := runners("cpu", 1, 1)[0]
	mustReserve(t, l, r)
	if _, err := l.EndAwaiting(ctx, r.Name, Now, "instance_gone"); err != nil {
		t.Fatal(err)
	}
	clock.set(Now.Add(ledger.DefaultRunnerTTL + time.Hour))
	if got, err := l.Awaiting(ctx, "cpu"); err != nil || len(got) != 0 {
		t.Errorf("Awaiting past the record's retention = %+v, %v; want none", got, err)
	}
}

// runners returns n runners of pool for jobs from, from+1, … (generation 1).
func runners(pool string, from int64, n int) []ledger.Runner {
	out := make([]ledger.Runner, n)
	for i := range out {
		job := from + int64(i)
		out[i] = ledger.Runner{Name: fmt.Sprintf("skiff-%d-1", job), Pool: pool, JobID: job, RunID: 1, Attempt: 1,
			Token: "tok", ReservedAt: Now}
	}
	return out
}

// setClock is a clock a case moves, read by the ledger under test from
// any goroutine.
type setClock struct {
	mu sync.Mutex
	at time.Time
}

func (c *setClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at
}

func (c *setClock) set(at time.Time) {
	c.mu.Lock()
	c.at = at
	c.mu.Unlock()
}

// mustReserve reserves each runner in a Reserve of its own.
func mustReserve(t *testing.T, l ledger.Ledger, rs ...ledger.Runner) {
	t.Helper()
	for _, r := range rs {
		if n, err := l.Reserve(context.Background(), r.Pool, 1000, []ledger.Runner{r}); err != nil || n != 1 {
			t.Fatalf("Reserve(%s) = %d, %v", r.Name, n, err)
		}
	}
}

// ledgerWarmTake is RunLedger's WarmTake case: a warm machine's record has
// no job and counts toward its pool; two jobs ending it at once, only one
// wins; the winner's runner, recorded on the same machine, is the one its
// instance id finds, and the pool's count is one machine throughout.
func ledgerWarmTake(t *testing.T, newLedger newLedgerFunc) {
	t.Parallel()
	l := newLedger(t, fixedNow)
	ctx := context.Background()
	warm := ledger.Runner{Name: names.WarmRunnerName("", "stopped", "abc123", "1"), Pool: "cpu", ReservedAt: Now}
	if n, err := l.Reserve(ctx, "cpu", 2, []ledger.Runner{warm}); err != nil || n != 1 {
		t.Fatalf("Reserve(warm) = %d, %v", n, err)
	}
	if err := l.Launched(ctx, warm.Name, ledger.LaunchReport{InstanceID: "i-0warm", InstanceType: "m7i.large", At: Now}); err != nil {
		t.Fatal(err)
	}
	if err := l.Advance(ctx, warm.Name, ledger.StateRegistered, Now.Add(time.Minute), 0); err != nil {
		t.Fatalf("the warm machine's ready: %v", err)
	}
	var wins atomic.Int32
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if ok, err := l.End(ctx, warm.Name, Now.Add(2*time.Minute), "taken"); err != nil {
				t.Error(err)
			} else if ok {
				wins.Add(1)
			}
		}()
	}
	wg.Wait()
	if wins.Load() != 1 {
		t.Fatalf("%d takes of one warm machine won; want exactly 1", wins.Load())
	}
	job := runners("cpu", 7, 1)
	if n, err := l.Reserve(ctx, "cpu", 2, job); err != nil || n != 1 {
		t.Fatalf("Reserve(the taker's runner) = %d, %v", n, err)
	}
	if err := l.Launched(ctx, job[0].Name, ledger.LaunchReport{InstanceID: "i-0warm", InstanceType: "m7i.large",
		StartKind: ledger.StartStopped, At: Now.Add(2 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if live, _ := l.Live(ctx, "cpu"); live != 1 {
		t.Errorf("live %d after the take, want 1 (one machine)", live)
	}
	got, err := l.RunnerByInstance(ctx, "i-0warm")
	if err != nil || got.Name != job[0].Name || got.StartKind != ledger.StartStopped {
		t.Errorf("RunnerByInstance after the take = %+v, %v; want the taker's runner, started stopped", got, err)
	}
	if ended, err := l.EndInstance(ctx, "i-0warm", Now.Add(time.Hour), "terminated"); err != nil || !ended {
		t.Errorf("EndInstance of the taken machine = %v, %v; want the taker's runner ended", ended, err)
	}
	if r, err := l.Runner(ctx, job[0].Name); err != nil || r.State != ledger.StateTerminated {
		t.Errorf("the taker's runner = %+v, %v", r, err)
	}
}
