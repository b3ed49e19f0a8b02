package scaledown_test

import (
	"context"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/instanceevents"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/provisioning"
	"github.com/skiffci/skiff/pkg/scaledown"
)

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
			job, info, in, runnerID := w.runOne(ctx)
			js, _ := w.sim.Job(job)
			if js.Status != "in_progress" {
				t.Fatalf("job %s, want in_progress", js.Status)
			}
			// The webhook's in_progress event names the job on the runner.
			name := in.Tags[names.TagRunnerName]
			if err := w.ledger.Advance(ctx, name, provisioning.StateJobStarted, js.StartedAt, job); err != nil {
				t.Fatal(err)
			}

			// EC2 warns, then reclaims the instance; both reach the EC2-event service.
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
			for _, state := range []string{"shutting-down", "terminated"} {
				if err := events.StateChanged(ctx, in.ID, state, w.clock.Now()); err != nil {
					t.Fatal(err)
				}
			}
			if r, _ := w.ledger.Runner(ctx, name); !r.State.Live() {
				t.Errorf("the EC2 events ended the interrupted runner (%s, %s): the reconciler never sees it", r.State, r.Reason)
			}
			w.webhook(ctx)
			if js, _ := w.sim.Job(job); js.Conclusion != "failure" {
				t.Fatalf("job %s/%s, want failed", js.Status, js.Conclusion)
			}
			w.reconcileMinutes(ctx, 3)
			run, _ := w.sim.Run(info.RunID)
			if run.Attempt != 2 || w.counter.Get(scaledown.MetricReruns, "spot") != 1 {
				t.Fatalf("run attempt %d, %v re-runs counted; want the run re-run once", run.Attempt, w.counter.Get(scaledown.MetricReruns, "spot"))
			}
			if r, _ := w.ledger.Runner(ctx, name); r.State.Live() {
				t.Errorf("the interrupted runner's record is still live after its re-run: %+v", r)
			}
			w.checkOnDemandRerun(ctx, run)
		})
	}
}
