package scaledown_test

import (
	"context"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/scaledown"
	"github.com/skiffci/skiff/pkg/store"
)

// TestStrandTrustsAStartedJobRecord: a runner ended without running its
// job; the webhook saw that job start elsewhere (another runner took it).
// GitHub never queues a started job again, so the reconciler launches no
// replacement and spends no GitHub call on it — in a burst whose runners
// take each other's jobs, those calls would use up the pass's job checks
// that stranded jobs need.
func TestStrandTrustsAStartedJobRecord(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 11, false)
	ctx := context.Background()
	info, err := w.sim.StartRun(ghsim.RunSpec{Repo: "acme/app", Jobs: []ghsim.JobSpec{{Labels: []string{"self-hosted", "linux", "x64"}}}})
	if err != nil {
		t.Fatal(err)
	}
	job := info.JobIDs[0]
	w.jobs[job] = &simJob{id: job}
	w.webhook(ctx)
	w.scaleUp(ctx)
	live, _ := w.dry.List(ctx, provider.Filter{AliveOnly: true})
	if len(live) != 1 {
		t.Fatalf("%d instances, want 1", len(live))
	}
	// The job starts on a runner that is not this one; this one's instance ends.
	if _, err := w.records.RecordJob(ctx, store.Job{ID: job, Status: store.StatusInProgress, StartedAt: w.clock.Now(),
		RunnerName: "someone-else"}); err != nil {
		t.Fatal(err)
	}
	if err := w.dry.Terminate(ctx, []string{live[0].ID}); err != nil {
		t.Fatal(err)
	}
	before := w.sim.Requests(ghsim.OpGetJob)
	w.clock.Advance(time.Minute)
	rep, err := w.down.Reconcile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Replacements != 0 || w.counter.Get(scaledown.MetricReplacements, "instance_gone") != 0 {
		t.Errorf("%d replacements for a job the webhook saw start", rep.Replacements)
	}
	if got := w.sim.Requests(ghsim.OpGetJob) - before; got != 0 {
		t.Errorf("%d GitHub job checks, want 0", got)
	}
	if n, _ := w.ledger.Live(ctx, "cpu"); n != 0 {
		t.Errorf("%d live records, want the ended runner's record ended", n)
	}
}
