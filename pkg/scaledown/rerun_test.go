package scaledown_test

import (
	"context"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/github/ghsim"
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
