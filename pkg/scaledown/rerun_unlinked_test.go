package scaledown_test

import (
	"context"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/instanceevents"
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
