package scaledown_test

import (
	"context"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/instanceevents"
	"github.com/skiffci/skiff/pkg/launch"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/scaledown"
)

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
	reg, ok := w.dry.Delivered(in.ID)
	if !ok {
		t.Fatal("no registration delivered")
	}
	runnerID, err := w.sim.ConnectRunner(reg.JITConfig)
	if err != nil {
		t.Fatal(err)
	}
	w.clock.Advance(time.Minute)
	js, _ := w.sim.Job(job)
	if js.Status != "in_progress" {
		t.Fatalf("job %s, want in_progress", js.Status)
	}
	if err := w.ledger.Advance(ctx, name, launch.StateJobStarted, js.StartedAt, job); err != nil {
		t.Fatal(err)
	}
	// A pass while the job runs: the runner is busy, and kept.
	if _, err := w.down.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if r, _ := w.ledger.Runner(ctx, name); r.InstanceID != in.ID {
		t.Errorf("after a pass the record names instance %q, want %s (its runner-name tag's)", r.InstanceID, in.ID)
	}

	// EC2 warns, then reclaims the instance; both reach the EC2-event service.
	w.clock.Advance(30 * time.Second)
	if err := events.SpotInterruption(ctx, in.ID, w.clock.Now()); err != nil {
		t.Fatal(err)
	}
	w.clock.Advance(2 * time.Minute)
	if err := w.dry.Terminate(ctx, []string{in.ID}); err != nil {
		t.Fatal(err)
	}
	if err := w.sim.DisconnectRunner(runnerID); err != nil {
		t.Fatal(err)
	}
	if err := events.StateChanged(ctx, in.ID, "terminated", w.clock.Now()); err != nil {
		t.Fatal(err)
	}
	w.webhook(ctx)
	if js, _ := w.sim.Job(job); js.Conclusion != "failure" {
		t.Fatalf("job %s/%s, want failed", js.Status, js.Conclusion)
	}
	for range 3 {
		w.clock.Advance(time.Minute)
		if _, err := w.down.Reconcile(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if run, _ := w.sim.Run(info.RunID); run.Attempt != 2 || w.counter.Get(scaledown.MetricReruns, "spot") != 1 {
		t.Errorf("run attempt %d, %v re-runs counted; want the run re-run once", run.Attempt, w.counter.Get(scaledown.MetricReruns, "spot"))
	}
	if r, _ := w.ledger.Runner(ctx, name); r.State.Live() {
		t.Errorf("the interrupted runner's record is still live after its re-run: %+v", r)
	}
}
