package scaledown_test

import (
	"context"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/metrics"
	"github.com/skiffci/skiff/pkg/metrics/recordstest"
	"github.com/skiffci/skiff/pkg/metrics/writer"
	"github.com/skiffci/skiff/pkg/scaledown"
	"github.com/skiffci/skiff/pkg/store"
)

// TestBackfillLostCompletion: the webhook saw the job start on our runner,
// but its completed event never arrived (lost, and so was its one
// redelivery). Once the runner has ended, the reconciler asks GitHub how
// the job ended and completes the record, so the job gets its metrics
// record and the runner's ledger record ends — instead of both waiting a
// day for the event.
func TestBackfillLostCompletion(t *testing.T) {
	t.Parallel()
	out := &metrics.MemoryRecords{}
	w := newWorld(t, 5, func(o *scaledown.Options) {
		o.Metrics = &writer.RecordWriter{Pools: []string{"cpu"}, Jobs: o.Jobs.(writer.JobRecords), Ledger: o.Ledger, Out: out,
			CloudProvider: "aws", Region: "us-east-1"}
	})
	ctx := context.Background()
	job, _, in := w.launchOne(ctx, 2*time.Minute)
	reg, _ := w.dry.Delivered(in.ID)
	if _, err := w.sim.ConnectRunner(reg.JITConfig); err != nil {
		t.Fatal(err)
	}
	w.clock.Advance(time.Minute)
	js, _ := w.sim.Job(job)
	// The start reaches the webhook; the end never does.
	if _, err := w.records.RecordJob(ctx, store.JobRecord{ID: job, Status: store.StatusInProgress, StartedAt: js.StartedAt,
		RunnerName: js.RunnerName}); err != nil {
		t.Fatal(err)
	}
	w.clock.Advance(5 * time.Minute)
	if js, _ := w.sim.Job(job); js.Status != "completed" {
		t.Fatalf("job %s, want completed", js.Status)
	}
	if err := w.dry.Terminate(ctx, []string{in.ID}); err != nil { // the runner powers off
		t.Fatal(err)
	}
	w.reconcileMinutes(ctx, 2)
	if rec, _ := w.records.Job(ctx, job); rec.Status != store.StatusCompleted || rec.Conclusion != "success" {
		t.Errorf("job record %v/%q, want completed from GitHub's answer", rec.Status, rec.Conclusion)
	}
	if n := len(recordstest.List(t, out, metrics.Filter{})); n != 1 {
		t.Errorf("%d metrics records, want 1", n)
	}
	if n, _ := w.ledger.Live(ctx, "cpu"); n != 0 {
		t.Errorf("%d live ledger records, want 0", n)
	}
	if got := w.counter.Get(scaledown.MetricBackfills, "completed"); got != 1 {
		t.Errorf("%v backfills counted, want 1", got)
	}
}
