package scaledown_test

import (
	"context"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/metrics"
	"github.com/skiffci/skiff/pkg/metrics/recordstest"
	"github.com/skiffci/skiff/pkg/metrics/writer"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/scaledown"
	"github.com/skiffci/skiff/pkg/store"
)

// TestRecordOfAJobNamedAfterItsRunnerEnded: a job ran on a skiff runner,
// and the runner's ledger record ended before any event said so. Whatever
// order the events then come in, however many passes run, and across a
// restart of the reconciler (a new Service, nothing carried in memory), the
// job gets exactly one metrics record, of the runner it ran on; the
// runner's slot is freed at its end, not held for the events.
func TestRecordOfAJobNamedAfterItsRunnerEnded(t *testing.T) {
	t.Parallel()
	started := func(w *world, ctx context.Context, job int64, runner string) {
		js, _ := w.sim.Job(job)
		w.event(ctx, store.JobRecord{ID: job, Status: store.StatusInProgress, StartedAt: js.StartedAt, RunnerName: runner})
	}
	completed := func(w *world, ctx context.Context, job int64, runner string) {
		js, _ := w.sim.Job(job)
		w.event(ctx, store.JobRecord{ID: job, Status: store.StatusCompleted, StartedAt: js.StartedAt, CompletedAt: js.StartedAt.Add(jobLength),
			Conclusion: js.Conclusion, RunnerName: runner})
	}
	for _, tc := range []struct {
		name string
		// mid runs mid-job.
		mid func(w *world, ctx context.Context)
		// end runs the job on its runner and ends the runner's record with no
		// event naming the job; the rule that ended it is checked.
		end  func(w *world, ctx context.Context, in provider.Instance)
		rule string
		// after delivers the events late, between passes.
		after []func(w *world, ctx context.Context, job int64, runner string)
		// gap is the time between the runner's end and the first event.
		gap time.Duration
	}{
		{
			// The job-completed hook's tag ends the runner (the job_completed
			// rule); the completed delivery comes before the in_progress one,
			// which the webhook takes for a duplicate.
			name: "completed before in_progress, runner ended by its hooks' tags",
			end: func(w *world, ctx context.Context, in provider.Instance) {
				js, _ := w.sim.Job(w.onlyJob())
				w.prov.tag(in.ID, names.TagJobStarted, js.StartedAt.Format(time.RFC3339))
				w.prov.tag(in.ID, names.TagJobCompleted, js.StartedAt.Add(jobLength).Format(time.RFC3339))
			},
			rule:  "job_completed",
			after: []func(w *world, ctx context.Context, job int64, runner string){completed, started},
			gap:   time.Minute,
		},
		{
			// GitHub's busy flag is all the reconciler saw of the job; the
			// instance is gone before any event named it (instance_gone).
			name: "runner ended before any event, seen only through the busy flag",
			mid:  func(w *world, ctx context.Context) { w.reconcile(ctx) }, // GitHub says busy
			end: func(w *world, ctx context.Context, in provider.Instance) {
				if err := w.dry.Terminate(ctx, []string{in.ID}); err != nil {
					t.Fatal(err)
				}
			},
			rule:  "instance_gone",
			after: []func(w *world, ctx context.Context, job int64, runner string){started, completed},
			gap:   time.Minute,
		},
		{
			// Nothing named the job before the end; its in_progress delivery
			// is lost, and its completed one comes ten minutes later.
			name: "the completed event ten minutes after the end, in_progress lost",
			end: func(w *world, ctx context.Context, in provider.Instance) {
				if err := w.dry.Terminate(ctx, []string{in.ID}); err != nil {
					t.Fatal(err)
				}
			},
			rule:  "instance_gone",
			after: []func(w *world, ctx context.Context, job int64, runner string){completed},
			gap:   10 * time.Minute,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			out := &metrics.MemoryRecords{}
			var opts scaledown.Options
			w := newWorld(t, 11, func(o *scaledown.Options) {
				o.Metrics = &writer.RecordWriter{Pools: []string{"cpu"}, Jobs: o.Jobs.(writer.JobRecords), Ledger: o.Ledger, Out: out,
					CloudProvider: "aws", Region: "us-east-1"}
				opts = *o
			})
			job, _, in := w.launchOne(ctx, jobLength)
			reg, _ := w.dry.Delivered(in.ID)
			if _, err := w.sim.ConnectRunner(reg.JITConfig); err != nil {
				t.Fatal(err)
			}
			w.clock.Advance(2 * time.Minute)
			if tc.mid != nil {
				tc.mid(w, ctx)
			}
			w.clock.Advance(5 * time.Minute)
			js, _ := w.sim.Job(job)
			if js.Status != "completed" || js.RunnerName != in.Tags[names.TagRunnerName] {
				t.Fatalf("job %s on %q, want completed on %s", js.Status, js.RunnerName, in.Tags[names.TagRunnerName])
			}
			runner := js.RunnerName
			tc.end(w, ctx, in)
			w.reconcile(ctx)
			if got := w.counter.Get(scaledown.MetricActions, tc.rule); got != 1 {
				t.Fatalf("%s counted %v times, want 1: the runner's record must end by that rule", tc.rule, got)
			}
			if n, _ := w.ledger.Live(ctx, "cpu"); n != 0 {
				t.Fatalf("%d live ledger records after the end, want 0: the slot is not held for the events", n)
			}
			// The reconciler restarts: nothing it kept in memory survives.
			opts.Metrics = &writer.RecordWriter{Pools: []string{"cpu"}, Jobs: opts.Jobs.(writer.JobRecords), Ledger: opts.Ledger, Out: out,
				CloudProvider: "aws", Region: "us-east-1"}
			var err error
			if w.down, err = scaledown.New(opts); err != nil {
				t.Fatal(err)
			}
			w.clock.Advance(tc.gap)
			for _, ev := range tc.after {
				w.reconcile(ctx)
				ev(w, ctx, job, runner)
				ev(w, ctx, job, runner) // GitHub delivers at least once
				w.clock.Advance(time.Minute)
			}
			for range 3 {
				w.reconcile(ctx)
				w.clock.Advance(time.Minute)
			}
			recs := recordstest.List(t, out, metrics.Filter{})
			if len(recs) != 1 || recs[0].JobID != job || recs[0].RunnerName != runner {
				t.Fatalf("metrics records %+v, want exactly one, job %d's on %s", recs, job, runner)
			}
			if err := metrics.Validate(recs[0]); err != nil {
				t.Errorf("the record fails its schema: %v", err)
			}
			if got, err := w.ledger.Awaiting(ctx, "cpu"); err != nil || len(got) != 0 {
				t.Errorf("awaiting runners %+v, %v; want none once the record is written", got, err)
			}
		})
	}
}

// jobLength is how long the test's job runs.
const jobLength = 5 * time.Minute

// event plays the webhook's lifecycle write: the job's record, then the
// runner's step in the ledger (store.LifecycleRecorder's contract).
func (w *world) event(ctx context.Context, j store.JobRecord) {
	w.t.Helper()
	if _, err := w.records.RecordJob(ctx, j); err != nil {
		w.t.Fatal(err)
	}
	to, at := ledger.StateJobStarted, j.StartedAt
	if j.Status == store.StatusCompleted {
		to, at = ledger.StateJobCompleted, j.CompletedAt
	}
	if err := w.ledger.Advance(ctx, j.RunnerName, to, at, j.ID); err != nil {
		w.t.Fatal(err)
	}
}

// reconcile runs one pass, failing the test on an error.
func (w *world) reconcile(ctx context.Context) {
	w.t.Helper()
	if _, err := w.down.Reconcile(ctx); err != nil {
		w.t.Fatal(err)
	}
}

// onlyJob is the id of the world's one job.
func (w *world) onlyJob() int64 {
	for id := range w.jobs {
		return id
	}
	w.t.Fatal("no job")
	return 0
}

// TestRecordOfAJobNamedWhileItsRunnerEnds: the job's events land after
// the pass read the runner's and the job's records (nothing named the job)
// and before it ended the runner. The job still gets exactly one record.
func TestRecordOfAJobNamedWhileItsRunnerEnds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	out := &metrics.MemoryRecords{}
	var w *world
	var fired bool
	w = newWorld(t, 12, func(o *scaledown.Options) {
		o.Metrics = &writer.RecordWriter{Pools: []string{"cpu"}, Jobs: o.Jobs.(writer.JobRecords), Ledger: o.Ledger, Out: out,
			CloudProvider: "aws", Region: "us-east-1"}
		o.Ledger = beforeEnd{Ledger: o.Ledger, before: func(name string) {
			if fired {
				return
			}
			fired = true
			js, _ := w.sim.Job(w.onlyJob())
			w.event(ctx, store.JobRecord{ID: js.ID, Status: store.StatusCompleted, StartedAt: js.StartedAt, CompletedAt: js.StartedAt.Add(jobLength),
				Conclusion: js.Conclusion, RunnerName: name})
		}}
	})
	job, _, in := w.launchOne(ctx, jobLength)
	reg, _ := w.dry.Delivered(in.ID)
	if _, err := w.sim.ConnectRunner(reg.JITConfig); err != nil {
		t.Fatal(err)
	}
	w.clock.Advance(7 * time.Minute)
	if err := w.dry.Terminate(ctx, []string{in.ID}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		w.reconcile(ctx)
		w.clock.Advance(time.Minute)
	}
	if !fired {
		t.Fatal("the runner never ended awaiting")
	}
	if recs := recordstest.List(t, out, metrics.Filter{}); len(recs) != 1 || recs[0].JobID != job {
		t.Fatalf("metrics records %+v, want exactly one, job %d's", recs, job)
	}
}

// beforeEnd is a ledger that runs before(name) right before EndAwaiting
// ends the runner name.
type beforeEnd struct {
	scaledown.Ledger
	before func(name string)
}

func (l beforeEnd) EndAwaiting(ctx context.Context, name string, at time.Time, reason string) (bool, error) {
	l.before(name)
	return l.Ledger.EndAwaiting(ctx, name, at, reason)
}
