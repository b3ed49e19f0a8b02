package scaledown_test

import (
	"context"
	"testing"

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
	w := newWorld(t, 11)
	ctx := context.Background()
	job, _, in := w.launchOne(ctx, 0)
	// The job starts on a runner that is not this one; this one's instance ends.
	if _, err := w.records.RecordJob(ctx, store.JobRecord{ID: job, Status: store.StatusInProgress, StartedAt: w.clock.Now(),
		RunnerName: "someone-else"}); err != nil {
		t.Fatal(err)
	}
	rep, got := w.endThenReconcile(ctx, in)
	if rep.Replacements != 0 || w.counter.Get(scaledown.MetricReplacements, "instance_gone") != 0 {
		t.Errorf("%d replacements for a job the webhook saw start", rep.Replacements)
	}
	if got != 0 {
		t.Errorf("%d GitHub job checks, want 0", got)
	}
	if n, _ := w.ledger.Live(ctx, "cpu"); n != 0 {
		t.Errorf("%d live records, want the ended runner's record ended", n)
	}
}

// TestStrandLeavesTheQueuedCheckToScaleUp: where scale-up checks that a
// job is still queued before launching (local mode), a stranded job's
// replacement is sent on its record's word, with no GitHub call here; by
// default the reconciler asks GitHub first.
func TestStrandLeavesTheQueuedCheckToScaleUp(t *testing.T) {
	t.Parallel()
	for _, scaleUpChecks := range []bool{false, true} {
		w := newWorld(t, 13, func(o *scaledown.Options) { o.ScaleUpChecksQueued = scaleUpChecks })
		ctx := context.Background()
		_, _, in := w.launchOne(ctx, 0)
		rep, got := w.endThenReconcile(ctx, in) // it never ran anything
		wantChecks := 1
		if scaleUpChecks {
			wantChecks = 0
		}
		if rep.Replacements != 1 || got != wantChecks {
			t.Errorf("scale-up checks %v: %d replacements and %d GitHub job checks, want 1 and %d", scaleUpChecks,
				rep.Replacements, got, wantChecks)
		}
	}
}
