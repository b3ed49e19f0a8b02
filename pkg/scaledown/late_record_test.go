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
	for _, tc := range []lateCase{
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
			after: []lateEvent{deliverCompleted, deliverStarted},
			gap:   time.Minute,
		},
		{
			// GitHub's busy flag is all the reconciler saw of the job; the
			// instance is gone before any event named it (instance_gone).
			name:  "runner ended before any event, seen only through the busy flag",
			mid:   func(w *world, ctx context.Context) { w.reconcile(ctx) }, // GitHub says busy
			end:   terminate,
			rule:  "instance_gone",
			after: []lateEvent{deliverStarted, deliverCompleted},
			gap:   time.Minute,
		},
		{
			// Nothing named the job before the end; its in_progress delivery
			// is lost, and its completed one comes ten minutes later.
			name:  "the completed event ten minutes after the end, in_progress lost",
			end:   terminate,
			rule:  "instance_gone",
			after: []lateEvent{deliverCompleted},
			gap:   10 * time.Minute,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			out := &metrics.MemoryRecords{}
			var opts scaledown.Options
			w := newWorld(t, 11, func(o *scaledown.Options) {
				o.Metrics = recordWriter(*o, out)
				opts = *o
			})
			job, runner := runThenEnd(ctx, w, tc)
			// The reconciler restarts: nothing it kept in memory survives.
			opts.Metrics = recordWriter(opts, out)
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
			checkOneRecord(ctx, w, out, job, runner)
		})
	}
}

// lateCase is a job whose runner's record ends before the events naming
// the job arrive.
type lateCase struct {
	name string
	// mid runs mid-job.
	mid func(w *world, ctx context.Context)
	// end runs the job on its runner and ends the runner's record with no
	// event naming the job; the rule that ended it is checked.
	end  func(w *world, ctx context.Context, in provider.Instance)
	rule string
	// after delivers the events late, between passes.
	after []lateEvent
	// gap is the time between the runner's end and the first event.
	gap time.Duration
}

// lateEvent delivers one of the job's events, naming the runner it ran on.
type lateEvent func(w *world, ctx context.Context, job int64, runner string)

// deliverStarted delivers the job's in_progress event.
func deliverStarted(w *world, ctx context.Context, job int64, runner string) {
	js, _ := w.sim.Job(job)
	w.event(ctx, store.JobRecord{ID: job, Status: store.StatusInProgress, StartedAt: js.StartedAt, RunnerName: runner})
}

// deliverCompleted delivers the job's completed event.
func deliverCompleted(w *world, ctx context.Context, job int64, runner string) {
	js, _ := w.sim.Job(job)
	w.event(ctx, store.JobRecord{ID: job, Status: store.StatusCompleted, StartedAt: js.StartedAt, CompletedAt: js.StartedAt.Add(jobLength),
		Conclusion: js.Conclusion, RunnerName: runner})
}

// terminate ends the runner's instance.
func terminate(w *world, ctx context.Context, in provider.Instance) {
	w.t.Helper()
	if err := w.dry.Terminate(ctx, []string{in.ID}); err != nil {
		w.t.Fatal(err)
	}
}

// recordWriter writes the metrics records of the pool cpu to out.
func recordWriter(o scaledown.Options, out *metrics.MemoryRecords) *writer.RecordWriter {
	return &writer.RecordWriter{Pools: []string{"cpu"}, Jobs: o.Jobs.(writer.JobRecords), Ledger: o.Ledger, Out: out,
		CloudProvider: "aws", Region: "us-east-1"}
}

// runThenEnd launches a runner, runs the world's job on it to completion
// with no event delivered, and ends the runner's record by tc's end. It
// checks that tc's rule ended the record and freed the slot, and returns
// the job and the name of the runner it ran on.
func runThenEnd(ctx context.Context, w *world, tc lateCase) (int64, string) {
	t := w.t
	t.Helper()
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
	tc.end(w, ctx, in)
	w.reconcile(ctx)
	if got := w.counter.Get(scaledown.MetricActions, tc.rule); got != 1 {
		t.Fatalf("%s counted %v times, want 1: the runner's record must end by that rule", tc.rule, got)
	}
	if n, _ := w.ledger.Live(ctx, "cpu"); n != 0 {
		t.Fatalf("%d live ledger records after the end, want 0: the slot is not held for the events", n)
	}
	return job, js.RunnerName
}

// checkOneRecord checks that out holds exactly one record, job's on
// runner, that it validates, and that no runner still awaits its record.
func checkOneRecord(ctx context.Context, w *world, out *metrics.MemoryRecords, job int64, runner string) {
	t := w.t
	t.Helper()
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
		o.Metrics = recordWriter(*o, out)
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
