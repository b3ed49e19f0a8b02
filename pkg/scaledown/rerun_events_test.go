package scaledown_test

import (
	"context"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/instanceevents"
	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/provider"
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
