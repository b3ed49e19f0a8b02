package instanceevents_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/instanceevents"
	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/telemetry"
)

var t0 = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

// setup returns a service over a memory ledger holding one launched runner
// on instance i-0run of pool cpu.
func setup(t *testing.T) (*instanceevents.Service, *ledger.Memory, *telemetry.Memory) {
	t.Helper()
	l := ledger.NewMemory(func() time.Time { return t0 })
	ctx := context.Background()
	r := ledger.Runner{Name: "skiff-5-1", Pool: "cpu", JobID: 5, ReservedAt: t0}
	launched(t, l, r, ledger.LaunchReport{InstanceID: "i-0run", Spot: true, At: t0})
	// The runner ran its own job: its end is the events' to report.
	if err := l.Advance(ctx, r.Name, ledger.StateJobStarted, t0, r.JobID); err != nil {
		t.Fatal(err)
	}
	svc, c := newService(t, instanceevents.Options{Ledger: l})
	return svc, l, c
}

// launched reserves runner r in its pool and reports its launch la.
func launched(t *testing.T, l *ledger.Memory, r ledger.Runner, la ledger.LaunchReport) {
	t.Helper()
	ctx := context.Background()
	if n, err := l.Reserve(ctx, r.Pool, 10, []ledger.Runner{r}); err != nil || n != 1 {
		t.Fatalf("Reserve = %d, %v", n, err)
	}
	if err := l.Launched(ctx, r.Name, la); err != nil {
		t.Fatal(err)
	}
}

// newService is the service with options o, counting into the memory
// counter it returns.
func newService(t *testing.T, o instanceevents.Options) (*instanceevents.Service, *telemetry.Memory) {
	t.Helper()
	c := &telemetry.Memory{}
	o.Counter = c
	svc, err := instanceevents.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return svc, c
}

func TestStateChanged(t *testing.T) {
	t.Parallel()
	cases := []struct {
		state  string
		ends   bool
		reason string
	}{
		{"pending", false, ""},
		{"running", false, ""},
		{"shutting-down", true, "state_shutting-down"},
		{"terminated", true, "state_terminated"},
		{"stopping", true, "state_stopping"},
		{"stopped", true, "state_stopped"},
		{"rebooting", false, ""},
	}
	for _, c := range cases {
		t.Run(c.state, func(t *testing.T) {
			t.Parallel()
			svc, l, counts := setup(t)
			ctx := context.Background()
			if err := svc.StateChanged(ctx, "i-0run", c.state, t0.Add(time.Minute)); err != nil {
				t.Fatal(err)
			}
			r, _ := l.RunnerByInstance(ctx, "i-0run")
			live, _ := l.Live(ctx, "cpu")
			if c.ends {
				if r.State != ledger.StateTerminated || r.Reason != c.reason || !r.EndedAt.Equal(t0.Add(time.Minute)) || live != 0 {
					t.Errorf("runner %+v, live %d; want ended by %s", r, live, c.reason)
				}
				if counts.Get(instanceevents.MetricRunnerEnded, c.state) != 1 {
					t.Errorf("counts %v", counts.Snapshot())
				}
			} else if r.State != ledger.StateJobStarted || live != 1 || counts.Get(instanceevents.MetricIgnored, "state") != 1 {
				t.Errorf("runner %+v, live %d, counts %v; want it untouched", r, live, counts.Snapshot())
			}
		})
	}
}

// TestRepeatedAndOutOfOrder: the first ending report wins; EventBridge
// delivers at least once and in no particular order.
func TestRepeatedAndOutOfOrder(t *testing.T) {
	t.Parallel()
	svc, l, counts := setup(t)
	ctx := context.Background()
	events := []struct {
		state string
		at    time.Duration
	}{
		{"terminated", 3 * time.Minute},    // arrives first, though it happened last
		{"shutting-down", 2 * time.Minute}, // late
		{"running", time.Minute},           // very late
		{"terminated", 3 * time.Minute},    // repeated delivery
	}
	for _, e := range events {
		if err := svc.StateChanged(ctx, "i-0run", e.state, t0.Add(e.at)); err != nil {
			t.Fatal(err)
		}
	}
	r, _ := l.RunnerByInstance(ctx, "i-0run")
	if r.State != ledger.StateTerminated || r.Reason != "state_terminated" || !r.EndedAt.Equal(t0.Add(3*time.Minute)) {
		t.Errorf("runner %+v: the first report must win", r)
	}
	if live, _ := l.Live(ctx, "cpu"); live != 0 {
		t.Errorf("live %d, want 0", live)
	}
	if n := counts.Get(instanceevents.MetricRunnerEnded, "terminated") + counts.Get(instanceevents.MetricRunnerEnded, "shutting-down"); n != 1 {
		t.Errorf("%d ends counted, want 1: %v", n, counts.Snapshot())
	}
}

func TestNotSkiffInstances(t *testing.T) {
	t.Parallel()
	svc, l, counts := setup(t)
	ctx := context.Background()
	if err := svc.StateChanged(ctx, "i-0other", "terminated", t0); err != nil {
		t.Errorf("StateChanged(not skiff) = %v, want nil", err)
	}
	if err := svc.SpotInterruption(ctx, "i-0other", t0); err != nil {
		t.Errorf("SpotInterruption(not skiff) = %v, want nil", err)
	}
	if counts.Get(instanceevents.MetricIgnored, "not_skiff") != 2 {
		t.Errorf("counts %v", counts.Snapshot())
	}
	if live, _ := l.Live(ctx, "cpu"); live != 1 {
		t.Errorf("live %d: another instance's event touched skiff's runner", live)
	}
	if err := svc.StateChanged(ctx, "", "terminated", t0); err == nil {
		t.Error("StateChanged without an instance id = nil, want an error")
	}
}

func TestSpotInterruption(t *testing.T) {
	t.Parallel()
	svc, l, counts := setup(t)
	ctx := context.Background()
	for _, at := range []time.Duration{time.Minute, 2 * time.Minute} {
		if err := svc.SpotInterruption(ctx, "i-0run", t0.Add(at)); err != nil {
			t.Fatal(err)
		}
	}
	r, _ := l.RunnerByInstance(ctx, "i-0run")
	if r.State != ledger.StateJobStarted || !r.InterruptedAt.Equal(t0.Add(time.Minute)) {
		t.Errorf("runner %+v: want the first warning's time and no state change", r)
	}
	if counts.Get(instanceevents.MetricSpotInterruption, "") != 2 {
		t.Errorf("counts %v", counts.Snapshot())
	}
}

// failing is a ledger whose store is down.
type failing struct{}

var errDown = errors.New("store down")

func (failing) EndInstance(context.Context, string, time.Time, string) (bool, error) {
	return false, errDown
}
func (failing) MarkInterrupted(context.Context, string, time.Time) error { return errDown }
func (failing) RunnerByInstance(context.Context, string) (ledger.Runner, error) {
	return ledger.Runner{}, errDown
}

// TestStoreFailureIsAnError: the function must fail so Lambda retries the event.
func TestStoreFailureIsAnError(t *testing.T) {
	t.Parallel()
	svc, err := instanceevents.New(instanceevents.Options{Ledger: failing{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := svc.StateChanged(ctx, "i-0run", "terminated", t0); !errors.Is(err, errDown) {
		t.Errorf("StateChanged = %v, want the store's error", err)
	}
	if err := svc.SpotInterruption(ctx, "i-0run", t0); !errors.Is(err, errDown) {
		t.Errorf("SpotInterruption = %v, want the store's error", err)
	}
	if _, err := instanceevents.New(instanceevents.Options{}); err == nil {
		t.Error("New without a ledger = nil error")
	}
}

// TestRunnerWithoutItsJobIsLeftToTheReconciler: a runner whose instance
// ended before it ran the job it was launched for (another job took it, or
// none came) stays live, so that the reconciler sees its job may be
// stranded and launches a replacement; one that ran its own job ends.
func TestRunnerWithoutItsJobIsLeftToTheReconciler(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		ran   int64 // the job it ran, 0 for none
		ended bool
	}{
		{"ran another job", 77, false},
		{"never got a job", 0, false},
		{"ran its own job", 5, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := ledger.NewMemory(func() time.Time { return t0 })
			ctx := context.Background()
			r := ledger.Runner{Name: "skiff-5-1", Pool: "cpu", JobID: 5, ReservedAt: t0}
			launched(t, l, r, ledger.LaunchReport{InstanceID: "i-0x", At: t0})
			if tc.ran != 0 {
				if err := l.Advance(ctx, r.Name, ledger.StateJobCompleted, t0, tc.ran); err != nil {
					t.Fatal(err)
				}
			}
			svc, c := newService(t, instanceevents.Options{Ledger: l})
			if err := svc.StateChanged(ctx, "i-0x", "terminated", t0.Add(time.Minute)); err != nil {
				t.Fatal(err)
			}
			got, _ := l.Runner(ctx, r.Name)
			if ended := got.State == ledger.StateTerminated; ended != tc.ended {
				t.Errorf("state %s, want ended %v (counts %v)", got.State, tc.ended, c.Snapshot())
			}
			if !tc.ended && c.Get(instanceevents.MetricLeftToReconciler, "cpu") != 1 {
				t.Errorf("not counted: %v", c.Snapshot())
			}
		})
	}
}

// TestRecordPoolsLeftToReconciler: with metrics records on for its pool, a
// runner that ran its own job is not ended by the event: the reconciler
// writes the job's record first, then ends it. Other pools end at once.
func TestRecordPoolsLeftToReconciler(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pools []string
		live  int
	}{{[]string{"CPU"}, 1}, {[]string{"*"}, 1}, {[]string{"gpu"}, 0}, {nil, 0}} {
		_, l, _ := setup(t)
		svc, c := newService(t, instanceevents.Options{Ledger: l, RecordPools: tc.pools})
		ctx := context.Background()
		if err := svc.StateChanged(ctx, "i-0run", "terminated", t0.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		if live, _ := l.Live(ctx, "cpu"); live != tc.live {
			t.Errorf("record pools %v: live %d, want %d", tc.pools, live, tc.live)
		}
		if n := c.Get(instanceevents.MetricLeftToReconciler, "cpu"); n != tc.live {
			t.Errorf("record pools %v: %d left to the reconciler, want %d", tc.pools, n, tc.live)
		}
	}
}

// TestInterruptedRunnerIsLeftToTheReconciler: a runner a spot interruption
// ended ran its own job, which failed; with metrics records off its record
// stays live all the same, for the reconciler to decide the re-run.
func TestInterruptedRunnerIsLeftToTheReconciler(t *testing.T) {
	t.Parallel()
	svc, l, c := setup(t)
	ctx := context.Background()
	if err := svc.SpotInterruption(ctx, "i-0run", t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	for _, state := range []string{"shutting-down", "terminated"} {
		if err := svc.StateChanged(ctx, "i-0run", state, t0.Add(3*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	if live, _ := l.Live(ctx, "cpu"); live != 1 {
		t.Errorf("live %d, want 1: the interrupted runner was ended before the reconciler saw it", live)
	}
	if n := c.Get(instanceevents.MetricLeftToReconciler, "cpu"); n != 2 {
		t.Errorf("%d left to the reconciler, want 2 (one per report): %v", n, c.Snapshot())
	}
}

// TestWarmMachineStopsAreNotEnds: the reconciler stops a stopped-kind warm
// machine while it waits (docs/warm-pools.md): its stopping and stopped
// events end nothing; its termination ends its record. Once a job has
// taken and started it, a late stop event from before the job's launch
// does not end the job's runner.
func TestWarmMachineStopsAreNotEnds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := ledger.NewMemory(func() time.Time { return t0 })
	warm := names.WarmRunnerName("", "stopped", "k1", "a")
	launched(t, l, ledger.Runner{Name: warm, Pool: "cpu", ReservedAt: t0}, ledger.LaunchReport{InstanceID: "i-0warm", At: t0})
	svc, _ := newService(t, instanceevents.Options{Ledger: l})
	for _, st := range []string{"stopping", "stopped"} {
		if err := svc.StateChanged(ctx, "i-0warm", st, t0.Add(2*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	if r, _ := l.Runner(ctx, warm); r.State != ledger.StateLaunched {
		t.Fatalf("the warm machine's record after its stop = %+v; want it live", r)
	}
	// A job takes it at minute 10; the stop's events arrive again, late.
	if ok, err := l.End(ctx, warm, t0.Add(10*time.Minute), "taken"); err != nil || !ok {
		t.Fatal(err)
	}
	job := ledger.Runner{Name: "skiff-9-1", Pool: "cpu", JobID: 9, ReservedAt: t0.Add(10 * time.Minute)}
	if n, err := l.Reserve(ctx, "cpu", 10, []ledger.Runner{job}); err != nil || n != 1 {
		t.Fatal(err)
	}
	if err := l.Launched(ctx, job.Name, ledger.LaunchReport{InstanceID: "i-0warm", StartKind: ledger.StartStopped, At: t0.Add(10 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if err := l.Advance(ctx, job.Name, ledger.StateJobStarted, t0.Add(11*time.Minute), job.JobID); err != nil {
		t.Fatal(err)
	}
	if err := svc.StateChanged(ctx, "i-0warm", "stopped", t0.Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if r, _ := l.Runner(ctx, job.Name); r.State != ledger.StateJobStarted {
		t.Fatalf("the job's runner after a stop event from before its start = %+v; want it live", r)
	}
	// Its termination ends it.
	if err := svc.StateChanged(ctx, "i-0warm", "terminated", t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if r, _ := l.Runner(ctx, job.Name); r.State != ledger.StateTerminated {
		t.Errorf("the job's runner after its termination = %+v; want it ended", r)
	}
}
