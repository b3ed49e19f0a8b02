package scaledown_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/instanceevents"
	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/scaledown"
	"github.com/skiffci/skiff/pkg/scaleup"
)

// A spot interruption fails the job its runner was running: once the run
// has completed, the reconciler re-runs its failed jobs, once, and only for
// pools that opted in.
func TestRerunInterrupted(t *testing.T) {
	t.Parallel()
	for _, optIn := range []bool{true, false} {
		w := newWorld(t, 7, func(o *scaledown.Options) {
			if optIn {
				o.RerunInterrupted = []string{"cpu"}
			}
		})
		ctx := context.Background()
		job, info, in, runnerID := w.runOne(ctx)
		w.webhook(ctx)
		if js, _ := w.sim.Job(job); js.Status != "in_progress" {
			t.Fatalf("job %s, want in_progress", js.Status)
		}

		// EC2 warns, then reclaims the instance: the runner vanishes, the job fails.
		w.interrupt(ctx, in, runnerID)
		w.webhook(ctx)
		if js, _ := w.sim.Job(job); js.Conclusion != "failure" {
			t.Fatalf("job %s/%s, want failed", js.Status, js.Conclusion)
		}
		w.reconcileMinutes(ctx, 3) // later passes must not re-run it again
		run, _ := w.sim.Run(info.RunID)
		want := 1
		if optIn {
			want = 2
		}
		if run.Attempt != want || w.counter.Get(scaledown.MetricReruns, "spot") != want-1 {
			t.Errorf("opted in %v: run attempt %d, %v re-runs counted; want attempt %d", optIn, run.Attempt,
				w.counter.Get(scaledown.MetricReruns, "spot"), want)
		}
		if !optIn {
			continue
		}
		w.checkOnDemandRerun(ctx, run)
	}
}

// runOne launches one runner for a 30-minute job, connects it and lets a
// minute pass: the job is then in progress on it.
func (w *world) runOne(ctx context.Context) (job int64, info ghsim.RunInfo, in provider.Instance, runnerID int64) {
	w.t.Helper()
	job, info, in = w.launchOne(ctx, 30*time.Minute)
	return job, info, in, w.connect(in)
}

// connect connects the runner of instance in with the registration it was
// delivered and lets a minute pass; it returns the runner's GitHub id.
func (w *world) connect(in provider.Instance) int64 {
	w.t.Helper()
	reg, ok := w.dry.Delivered(in.ID)
	if !ok {
		w.t.Fatal("no registration delivered")
	}
	runnerID, err := w.sim.ConnectRunner(reg.JITConfig)
	if err != nil {
		w.t.Fatal(err)
	}
	w.clock.Advance(time.Minute)
	return runnerID
}

// reconcileMinutes runs n reconciler passes a minute apart.
func (w *world) reconcileMinutes(ctx context.Context, n int) {
	w.t.Helper()
	for range n {
		w.clock.Advance(time.Minute)
		if _, err := w.down.Reconcile(ctx); err != nil {
			w.t.Fatal(err)
		}
	}
}

// checkOnDemandRerun checks that the re-run's job, queued again under a new
// id, is launched on on-demand capacity, once.
func (w *world) checkOnDemandRerun(ctx context.Context, run ghsim.RunState) {
	w.t.Helper()
	if len(run.JobIDs) != 2 {
		w.t.Fatalf("run jobs %v, want the first attempt's and the re-run's", run.JobIDs)
	}
	w.jobs[run.JobIDs[1]] = &simJob{id: run.JobIDs[1], attempt: 2}
	w.webhook(ctx)
	w.scaleUp(ctx)
	live, _ := w.dry.List(ctx, provider.Filter{AliveOnly: true})
	if len(live) != 1 || live[0].Capacity != provider.OnDemand {
		w.t.Fatalf("after the re-run: %+v; want one on-demand instance", live)
	}
	if got := w.counter.Get(scaleup.MetricOnDemandReruns, "cpu"); got != 1 {
		w.t.Errorf("%v on-demand re-runs counted, want 1", got)
	}
}

// TestRerunInterruptedUnrecordedInstance: scale-up launched the runner but
// could not write its instance into the ledger. The reconciler finds the
// instance by its runner-name tag and records it, so that the spot warning,
// which names only the instance, reaches the runner's record: the job the
// interruption failed is re-run, and only then is the record ended.
func TestRerunInterruptedUnrecordedInstance(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 29, func(o *scaledown.Options) { o.RerunInterrupted = []string{"cpu"} })
	events, err := instanceevents.New(instanceevents.Options{Ledger: w.ledger, Counter: w.counter, RecordPools: []string{"*"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	w.unrecorded.Store(true)
	job, info, in := w.launchOne(ctx, 30*time.Minute)
	w.unrecorded.Store(false)
	name := in.Tags[names.TagRunnerName]
	if r, err := w.ledger.Runner(ctx, name); err != nil || r.InstanceID != "" {
		t.Fatalf("runner record %+v (%v); want one without its instance", r, err)
	}
	runnerID := w.startJob(ctx, job, in)
	// A pass while the job runs: the runner is busy, and kept.
	if _, err := w.down.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if r, _ := w.ledger.Runner(ctx, name); r.InstanceID != in.ID {
		t.Errorf("after a pass the record names instance %q, want %s (its runner-name tag's)", r.InstanceID, in.ID)
	}
	w.clock.Advance(30 * time.Second)
	w.reclaim(ctx, events, job, in, runnerID)
	w.reconcileMinutes(ctx, 3)
	w.rerunOnce(ctx, info, name)
}

// TestRerunInterruptedThroughInstanceEvents: the spot warning and the
// instance's end reach the ledger through the EC2-event service, as
// deployed, with metrics records off (the default) and on. The runner ran
// its own job, which the interruption failed: its record must stay live for
// the reconciler, which re-runs the job on on-demand capacity and only then
// ends the record.
func TestRerunInterruptedThroughInstanceEvents(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		records []string
	}{{"records off", nil}, {"records on", []string{"*"}}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, 23, func(o *scaledown.Options) { o.RerunInterrupted = []string{"cpu"} })
			events, err := instanceevents.New(instanceevents.Options{Ledger: w.ledger, Counter: w.counter, RecordPools: tc.records})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			job, info, in := w.launchOne(ctx, 30*time.Minute)
			name := in.Tags[names.TagRunnerName]
			runnerID := w.startJob(ctx, job, in)
			w.reclaim(ctx, events, job, in, runnerID)
			if r, _ := w.ledger.Runner(ctx, name); !r.State.Live() {
				t.Errorf("the EC2 events ended the interrupted runner (%s, %s): the reconciler never sees it", r.State, r.Reason)
			}
			w.reconcileMinutes(ctx, 3)
			run := w.rerunOnce(ctx, info, name)
			w.checkOnDemandRerun(ctx, run)
		})
	}
}

// startJob connects the runner of instance in, lets job start on it and
// records the start in the ledger (the webhook's in_progress event). It
// returns the runner's GitHub id.
func (w *world) startJob(ctx context.Context, job int64, in provider.Instance) int64 {
	w.t.Helper()
	runnerID := w.connect(in)
	js, _ := w.sim.Job(job)
	if js.Status != "in_progress" {
		w.t.Fatalf("job %s, want in_progress", js.Status)
	}
	if err := w.ledger.Advance(ctx, in.Tags[names.TagRunnerName], ledger.StateJobStarted, js.StartedAt, job); err != nil {
		w.t.Fatal(err)
	}
	return runnerID
}

// reclaim plays EC2 reclaiming spot instance in while its runner runs job:
// the warning, and two minutes later the instance's end, both through the
// EC2-event service; the runner vanishes and the job fails.
func (w *world) reclaim(ctx context.Context, events *instanceevents.Service, job int64, in provider.Instance, runnerID int64) {
	w.t.Helper()
	w.spotEnd(ctx, in, runnerID, events.SpotInterruption)
	for _, state := range []string{"shutting-down", "terminated"} {
		if err := events.StateChanged(ctx, in.ID, state, w.clock.Now()); err != nil {
			w.t.Fatal(err)
		}
	}
	w.webhook(ctx)
	if js, _ := w.sim.Job(job); js.Conclusion != "failure" {
		w.t.Fatalf("job %s/%s, want failed", js.Status, js.Conclusion)
	}
}

// rerunOnce checks that the run was re-run once, and that the interrupted
// runner's record ended; it returns the run.
func (w *world) rerunOnce(ctx context.Context, info ghsim.RunInfo, name string) ghsim.RunState {
	w.t.Helper()
	run, _ := w.sim.Run(info.RunID)
	if run.Attempt != 2 || w.counter.Get(scaledown.MetricReruns, "spot") != 1 {
		w.t.Fatalf("run attempt %d, %v re-runs counted; want the run re-run once", run.Attempt, w.counter.Get(scaledown.MetricReruns, "spot"))
	}
	if r, _ := w.ledger.Runner(ctx, name); r.State.Live() {
		w.t.Errorf("the interrupted runner's record is still live after its re-run: %+v", r)
	}
	return run
}

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
