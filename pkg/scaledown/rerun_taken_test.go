package scaledown_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/scaledown"
)

// A runner launched for one job may run another (GitHub gives an idle
// runner any queued job its labels match). When a spot interruption then
// fails the job it ran, that job's run is the one to re-run, not the run
// of the job it was launched for (found by the fault harness,
// internal/loadtest: the interrupted job was never re-run).
func TestRerunInterruptedTakenRunner(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 11, func(o *scaledown.Options) { o.RerunInterrupted = []string{"cpu"} })
	ctx := context.Background()
	first, second, inB, runnerID := w.takenRunner(ctx, 30*time.Minute, 30*time.Minute)
	a := first.JobIDs[0]
	w.clock.Advance(time.Minute)
	w.webhook(ctx)
	if js, _ := w.sim.Job(a); js.Status != "in_progress" || js.RunnerName != inB.Tags[names.TagRunnerName] {
		t.Fatalf("job a: %+v; want it running on job b's runner", js)
	}
	w.interrupt(ctx, inB, runnerID)
	w.webhook(ctx)
	w.reconcileMinutes(ctx, 3)
	if run, _ := w.sim.Run(first.RunID); run.Attempt != 2 {
		t.Errorf("the run of the interrupted job a is at attempt %d, want 2 (re-run); re-runs counted %d", run.Attempt,
			w.counter.Get(scaledown.MetricReruns, "spot"))
	}
	if run, _ := w.sim.Run(second.RunID); run.Attempt != 1 {
		t.Errorf("the run of job b, which never failed, is at attempt %d, want 1", run.Attempt)
	}
}

// TestRerunInterruptedUnknownJob: the runner's hooks said a job started,
// but no event has named it yet when the spot interruption ends the
// runner, and the job it was launched for completes on another runner
// meanwhile. Re-running on the strength of that job would re-run nothing;
// the reconciler waits for the late event and re-runs the job that failed.
func TestRerunInterruptedUnknownJob(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 19, func(o *scaledown.Options) { o.RerunInterrupted = []string{"cpu"} })
	ctx := context.Background()
	first, second, inB, runnerID := w.takenRunner(ctx, 30*time.Minute, time.Minute)
	a, b := first.JobIDs[0], second.JobIDs[0]
	runnerB := inB.Tags[names.TagRunnerName]
	// Job a's events are late: the ledger knows only what the hooks said.
	held := w.jobs[a]
	delete(w.jobs, a)
	w.clock.Advance(30 * time.Second)
	if err := w.ledger.Advance(ctx, runnerB, ledger.StateJobStarted, w.clock.Now(), 0); err != nil {
		t.Fatal(err)
	}
	w.interrupt(ctx, inB, runnerID)
	// Job b gets a replacement runner and succeeds on it.
	for range 4 {
		w.clock.Advance(time.Minute)
		if _, err := w.down.Reconcile(ctx); err != nil {
			t.Fatal(err)
		}
		w.scaleUp(ctx)
		alive, _ := w.dry.List(ctx, provider.Filter{AliveOnly: true})
		for _, in := range alive {
			if reg, ok := w.dry.Delivered(in.ID); ok && in.ID != inB.ID && !w.booted[in.ID] {
				w.booted[in.ID] = true
				if _, err := w.sim.ConnectRunner(reg.JITConfig); err != nil {
					t.Fatal(err)
				}
			}
		}
		w.webhook(ctx)
	}
	if js, _ := w.sim.Job(b); js.Conclusion != "success" {
		t.Fatalf("job b: %+v; want it completed on its replacement", js)
	}
	if run, _ := w.sim.Run(first.RunID); run.Attempt != 1 {
		t.Fatalf("run of job a re-run before any event named the failed job: attempt %d", run.Attempt)
	}
	// The late events arrive: job a ran on job b's runner and failed.
	w.jobs[a] = held
	w.webhook(ctx)
	w.reconcileMinutes(ctx, 3)
	if run, _ := w.sim.Run(first.RunID); run.Attempt != 2 {
		t.Errorf("the run of the interrupted job a is at attempt %d, want 2 (re-run)", run.Attempt)
	}
	if run, _ := w.sim.Run(second.RunID); run.Attempt != 1 {
		t.Errorf("the run of job b, which succeeded, is at attempt %d, want 1", run.Attempt)
	}
}

// interrupt plays a spot interruption of instance in, whose runner has
// GitHub id runnerID, as scale-down sees it without the EC2-event service:
// the warning in the ledger, and two minutes later the instance's end; the
// runner vanishes.
func (w *world) interrupt(ctx context.Context, in provider.Instance, runnerID int64) {
	w.t.Helper()
	w.spotEnd(ctx, in, runnerID, w.ledger.MarkInterrupted)
}

// spotEnd plays a spot interruption of instance in, whose runner has GitHub
// id runnerID: the warning, which warn delivers, and two minutes later the
// instance's end; the runner vanishes.
func (w *world) spotEnd(ctx context.Context, in provider.Instance, runnerID int64, warn func(ctx context.Context, instanceID string, at time.Time) error) {
	w.t.Helper()
	if err := warn(ctx, in.ID, w.clock.Now()); err != nil {
		w.t.Fatal(err)
	}
	w.clock.Advance(2 * time.Minute)
	if err := w.dry.Terminate(ctx, []string{in.ID}); err != nil {
		w.t.Fatal(err)
	}
	if err := w.sim.DisconnectRunner(runnerID); err != nil {
		w.t.Fatal(err)
	}
}

// takenRunner starts two one-job runs (a lasting da, then b lasting db),
// launches their runners and connects job b's, which takes job a (GitHub
// gives the older queued job to an idle runner whose labels fit). It
// returns both runs, job b's instance and the runner's GitHub id.
func (w *world) takenRunner(ctx context.Context, da, db time.Duration) (first, second ghsim.RunInfo, inB provider.Instance, runnerID int64) {
	w.t.Helper()
	labels := []string{"self-hosted", "linux", "x64"}
	var err error
	if first, err = w.sim.StartRun(ghsim.RunSpec{Repo: "acme/app", Jobs: []ghsim.JobSpec{{Labels: labels, Duration: da}}}); err != nil {
		w.t.Fatal(err)
	}
	if second, err = w.sim.StartRun(ghsim.RunSpec{Repo: "acme/app", Jobs: []ghsim.JobSpec{{Labels: labels, Duration: db}}}); err != nil {
		w.t.Fatal(err)
	}
	a, b := first.JobIDs[0], second.JobIDs[0]
	w.jobs[a], w.jobs[b] = &simJob{id: a}, &simJob{id: b}
	w.webhook(ctx)
	w.scaleUp(ctx)
	live, _ := w.dry.List(ctx, provider.Filter{AliveOnly: true})
	for _, in := range live {
		if in.Tags[names.TagJobID] == strconv.FormatInt(b, 10) {
			inB = in
		}
	}
	reg, ok := w.dry.Delivered(inB.ID)
	if !ok {
		w.t.Fatalf("no registration delivered for job %d's runner (instances %+v)", b, live)
	}
	if runnerID, err = w.sim.ConnectRunner(reg.JITConfig); err != nil {
		w.t.Fatal(err)
	}
	return first, second, inB, runnerID
}
