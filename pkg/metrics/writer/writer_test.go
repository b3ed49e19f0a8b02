package writer_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/metrics"
	"github.com/skiffci/skiff/pkg/metrics/writer"
	"github.com/skiffci/skiff/pkg/provider/ec2/ec2prices"
	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/telemetry"
)

// peaks is a PeakReader that answers from a table, leaves the windows it
// is told to pending, or fails.
type peaks struct {
	cpu     float64
	pending bool
	err     error
	calls   int
}

func (p *peaks) Read(_ context.Context, ws []metrics.PeakWindow) (metrics.PeakResult, error) {
	p.calls++
	if p.err != nil {
		return metrics.PeakResult{}, p.err
	}
	res := metrics.PeakResult{Peaks: map[metrics.Key]*metrics.Peaks{}, Calls: 1}
	for _, w := range ws {
		if p.pending {
			res.Pending = append(res.Pending, w)
			continue
		}
		cpu := p.cpu
		res.Peaks[w.Key] = &metrics.Peaks{CPUPeak: &cpu}
	}
	return res, nil
}

var m0 = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

// recordWorld holds job 7 (run 70, push), which ran on skiff-7-1 and
// completed, and job 8, which skiff-9-1 (launched for job 9) took.
func recordWorld(t *testing.T) (*store.Memory, *ledger.Memory) {
	t.Helper()
	ctx := context.Background()
	st := store.NewMemory()
	led := ledger.NewMemory(func() time.Time { return m0 })
	if err := st.RecordRun(ctx, store.RunRecord{ID: 70, Attempt: 1, Event: "push", WorkflowName: "ci", Repository: "acme/app",
		UpdatedAt: m0, ExpiresAt: m0.AddDate(10, 0, 0)}); err != nil {
		t.Fatal(err)
	}
	for _, j := range []store.JobRecord{
		{ID: 7, RunID: 70, Attempt: 1, Repository: "acme/app", Owner: "acme", Status: store.StatusCompleted, Pool: "cpu",
			WorkflowName: "ci", JobName: "build", QueuedAt: m0, StartedAt: m0.Add(time.Minute), CompletedAt: m0.Add(6 * time.Minute),
			RunnerName: "skiff-7-1", Conclusion: "success", UpdatedAt: m0, ExpiresAt: m0.AddDate(10, 0, 0)},
		{ID: 8, RunID: 70, Attempt: 1, Repository: "acme/app", Owner: "acme", Status: store.StatusCompleted, Pool: "cpu",
			QueuedAt: m0, StartedAt: m0.Add(time.Minute), CompletedAt: m0.Add(2 * time.Minute),
			RunnerName: "skiff-9-1", Conclusion: "success", UpdatedAt: m0, ExpiresAt: m0.AddDate(10, 0, 0)},
	} {
		if _, err := st.RecordJob(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	// skiff-7-1 was requested 2 s after its job was queued, launched 3 s
	// later and seen online at 50 s; its job was assigned at 1 min.
	for _, r := range []ledger.Runner{{Name: "skiff-7-1", Pool: "cpu", JobID: 7, ReservedAt: m0.Add(2 * time.Second)}, {Name: "skiff-8-1", Pool: "cpu", JobID: 8, ReservedAt: m0},
		{Name: "skiff-9-1", Pool: "cpu", JobID: 9, ReservedAt: m0}} {
		launched(t, led, r, ledger.LaunchReport{InstanceID: "i-" + r.Name, InstanceType: "c7i.xlarge", Zone: "us-east-1a",
			Spot: true, StartKind: ledger.StartCold, At: r.ReservedAt.Add(3 * time.Second)})
	}
	if err := led.Advance(ctx, "skiff-7-1", ledger.StateRegistered, m0.Add(50*time.Second), 0); err != nil {
		t.Fatal(err)
	}
	// skiff-9-1, launched for job 9, ran job 8.
	if err := led.Advance(ctx, "skiff-9-1", ledger.StateJobStarted, m0.Add(time.Minute), 8); err != nil {
		t.Fatal(err)
	}
	return st, led
}

// launched reserves runner r in its pool and reports its launch l.
func launched(t *testing.T, led *ledger.Memory, r ledger.Runner, l ledger.LaunchReport) {
	t.Helper()
	ctx := context.Background()
	if _, err := led.Reserve(ctx, r.Pool, 10, []ledger.Runner{r}); err != nil {
		t.Fatal(err)
	}
	if err := led.Launched(ctx, r.Name, l); err != nil {
		t.Fatal(err)
	}
}

func TestRecordWriter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, led := recordWorld(t)
	out := &metrics.MemoryRecords{}
	pk := &peaks{cpu: 87.5, pending: true}
	counts := &telemetry.Memory{}
	w := &writer.RecordWriter{Pools: []string{"cpu"}, Jobs: st, Ledger: led, Peaks: pk, Out: out,
		CloudProvider: "aws", Region: "us-east-1", Wait: 10 * time.Minute, Counter: counts}
	if !w.Enabled("CPU") || w.Enabled("gpu") {
		t.Error("Enabled: want the listed pool (any case) only")
	}
	jobs := []writer.MetricsJob{{Runner: "skiff-7-1", Pool: "cpu", JobID: 7, InstanceID: "i-skiff-7-1"},
		{Runner: "skiff-8-1", Pool: "cpu", JobID: 8, InstanceID: "i-skiff-8-1"}, {Runner: "skiff-99-1", Pool: "cpu", JobID: 99},
		{Runner: "skiff-9-1", Pool: "cpu", JobID: 9, InstanceID: "i-skiff-9-1"}}

	// Within CloudWatch's metric lag: job 7's runner waits; the runner whose job
	// another took, and which the ledger knows no job of, is awaited (an
	// event may yet name a job it ran); one with no ledger record and whose
	// job skiff never recorded is done, not run.
	done := w.Write(ctx, m0.Add(7*time.Minute), jobs)
	if done["skiff-7-1"] != writer.Wait || done["skiff-8-1"] != writer.Await || done["skiff-99-1"] != writer.Done {
		t.Fatalf("done %v: want job 7 waiting for its peaks, skiff-8-1 awaited, skiff-99-1 done", done)
	}
	if n := len(collect(t, out)); n != 0 {
		t.Fatalf("%d records within the metric lag", n)
	}

	// Past the lag: job 7's record, with the peaks, the trigger and the
	// instance; and job 8's, from the runner that ran it.
	pk.pending = false
	if done = w.Write(ctx, m0.Add(8*time.Minute), []writer.MetricsJob{jobs[0], jobs[3]}); done["skiff-7-1"] != writer.Done ||
		done["skiff-9-1"] != writer.Done {
		t.Fatalf("done %v past the metric lag", done)
	}
	recs := collect(t, out)
	if len(recs) != 2 || recs[1].JobID != 8 || recs[1].RunnerName != "skiff-9-1" {
		t.Fatalf("records %+v, want job 7's and job 8's (run by skiff-9-1)", recs)
	}
	r := recs[0]
	if r.JobID != 7 || r.Trigger != "push" || r.WorkflowName != "ci" || r.InstanceType != "c7i.xlarge" || r.RunnerName != "skiff-7-1" ||
		r.CapacityType != "spot" || r.Runtime.Std() != 5*time.Minute || r.CPU == nil || r.CPU.PeakPercent == nil || *r.CPU.PeakPercent != 87.5 {
		t.Errorf("record %+v", r)
	}
	if err := metrics.Validate(r); err != nil {
		t.Errorf("the record fails its schema: %v", err)
	}
	if st := r.Start; st == nil || st.Kind != metrics.StartCold || st.Phases == nil || st.Phases.QueuedToRequested == nil ||
		*st.Phases.QueuedToRequested != 2 || st.Phases.RequestedToLaunched == nil || *st.Phases.RequestedToLaunched != 3 ||
		st.Phases.LaunchedToOnline == nil || *st.Phases.LaunchedToOnline != 45 || st.Phases.OnlineToAssigned == nil ||
		*st.Phases.OnlineToAssigned != 10 || st.Phases.QueuedToAssigned == nil || *st.Phases.QueuedToAssigned != 60 {
		t.Errorf("start %+v, want cold: 2 s requested, 3 s launch, 45 s to online, 10 s to assigned, 60 s in all", r.Start)
	}

	// Job 8 ran on skiff-9-1, requested for job 9: no request, hence no
	// skiff share, in job 8's start.
	if st := recs[1].Start; st != nil && (st.LaunchRequestedAt != nil || st.Phases != nil && (st.Phases.QueuedToRequested != nil || st.Phases.RequestedToLaunched != nil)) {
		t.Errorf("job 8's start %+v names the request of job 9's runner", st)
	}

	// A later pass (the ledger end failed after the write): written once, done.
	if done = w.Write(ctx, m0.Add(9*time.Minute), jobs[:1]); done["skiff-7-1"] != writer.Done || len(collect(t, out)) != 2 {
		t.Errorf("done %v, %d records: a repeat must be done and write nothing", done, len(collect(t, out)))
	}
	if counts.Get(writer.MetricRecords, "written") != 2 || counts.Get(writer.MetricRecords, "exists") != 1 ||
		counts.Get(writer.MetricRecords, "pending") != 2 || counts.Get(writer.MetricRecords, "awaiting") != 1 ||
		counts.Get(writer.MetricRecords, "not_run") != 1 {
		t.Errorf("counts %v", counts.Snapshot())
	}
}

func TestRecordWriterGivesUpOnPeaks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, led := recordWorld(t)
	out := &metrics.MemoryRecords{}
	pk := &peaks{err: errors.New("throttled")}
	w := &writer.RecordWriter{Pools: []string{"*"}, Jobs: st, Ledger: led, Peaks: pk, Out: out, CloudProvider: "aws",
		Region: "us-east-1", Wait: 10 * time.Minute}
	job := []writer.MetricsJob{{Runner: "skiff-7-1", Pool: "cpu", JobID: 7}}
	// Within the wait a failed read holds the record back ...
	if done := w.Write(ctx, m0.Add(15*time.Minute), job); done["skiff-7-1"] != writer.Wait || len(collect(t, out)) != 0 {
		t.Fatalf("done %v: a failed peak read within the wait must hold the record", done)
	}
	// ... past it the record is written without peaks, so the ledger is not held forever.
	if done := w.Write(ctx, m0.Add(17*time.Minute), job); done["skiff-7-1"] != writer.Done {
		t.Fatalf("done %v: past the wait the record must be written without peaks", done)
	}
	recs := collect(t, out)
	if len(recs) != 1 || recs[0].CPU != nil && recs[0].CPU.PeakPercent != nil {
		t.Errorf("records %+v: want one, without a CPU peak", recs)
	}
}

func collect(t *testing.T, out *metrics.MemoryRecords) []metrics.Record {
	t.Helper()
	var recs []metrics.Record
	for r, err := range out.List(context.Background(), metrics.Filter{}) {
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	return recs
}

// ranOn records the webhook's in_progress and completed events of job id
// on runner: the job ran there from started to completed, successfully.
func ranOn(t *testing.T, st *store.Memory, runner string, id int64, started, completed time.Time) {
	t.Helper()
	for _, j := range []store.JobRecord{{ID: id, Status: store.StatusInProgress, StartedAt: started, RunnerName: runner},
		{ID: id, Status: store.StatusCompleted, CompletedAt: completed, Conclusion: "success", RunnerName: runner}} {
		if _, err := st.RecordJob(context.Background(), j); err != nil {
			t.Fatal(err)
		}
	}
}

// writePass is the metrics part of a reconciler's pass: Write judges the
// runners ending now and the pool's awaiting ones; a runner ending now is
// ended (awaiting, when Write awaits it), an awaited one Write is done
// with is taken off its awaiting list.
func writePass(t *testing.T, w *writer.RecordWriter, led ledger.Ledger, at time.Time, ending []writer.MetricsJob) map[string]writer.Outcome {
	t.Helper()
	ctx := context.Background()
	awaited, err := led.Awaiting(ctx, "cpu")
	if err != nil {
		t.Fatal(err)
	}
	jobs := slices.Clone(ending)
	for i := range awaited {
		jobs = append(jobs, writer.AwaitedJob(&awaited[i]))
	}
	done := w.Write(ctx, at, jobs)
	for _, j := range jobs {
		switch {
		case j.Awaited != nil && done[j.Runner] == writer.Done:
			err = led.StopAwaiting(ctx, j.Runner)
		case j.Awaited != nil:
		case done[j.Runner] == writer.Done:
			_, err = led.End(ctx, j.Runner, at, "instance_gone")
		case done[j.Runner] == writer.Await:
			_, err = led.EndAwaiting(ctx, j.Runner, at, "instance_gone")
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return done
}

// TestRecordWriterAwaitsALateStart: runners ended while their jobs'
// records still say "queued" (the start events are late) are awaited, so
// their slots free at once; job 10's events arrive after its runner's end,
// and its record is written once; skiff-11-1, which ran nothing, leaves the
// awaiting list without a record once AwaitWindow from its end has passed.
func TestRecordWriterAwaitsALateStart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, led := recordWorld(t)
	out := &metrics.MemoryRecords{}
	counts := &telemetry.Memory{}
	w := &writer.RecordWriter{Pools: []string{"*"}, Jobs: st, Ledger: led, Out: out, CloudProvider: "aws",
		Region: "us-east-1", Prices: ec2prices.Prices, AwaitWindow: time.Hour, Counter: counts}
	for _, id := range []int64{10, 11} {
		name := fmt.Sprintf("skiff-%d-1", id)
		if _, err := st.RecordJob(ctx, store.JobRecord{ID: id, RunID: 70, Attempt: 1, Repository: "acme/app", Owner: "acme",
			Status: store.StatusQueued, Pool: "cpu", QueuedAt: m0, UpdatedAt: m0, ExpiresAt: m0.AddDate(10, 0, 0)}); err != nil {
			t.Fatal(err)
		}
		launched(t, led, ledger.Runner{Name: name, Pool: "cpu", JobID: id, ReservedAt: m0},
			ledger.LaunchReport{InstanceID: "i-" + name, InstanceType: "c7i.xlarge", At: m0})
	}
	live, _ := led.Live(ctx, "cpu")
	jobs := []writer.MetricsJob{{Runner: "skiff-10-1", Pool: "cpu", JobID: 10}, {Runner: "skiff-11-1", Pool: "cpu", JobID: 11}}
	if done := writePass(t, w, led, m0.Add(30*time.Second), jobs); done["skiff-10-1"] != writer.Await || done["skiff-11-1"] != writer.Await {
		t.Fatalf("done %v at 30 s: runners whose jobs' records say queued must be awaited", done)
	}
	if n, _ := led.Live(ctx, "cpu"); n != live-2 {
		t.Errorf("live %d, want %d: awaited runners do not hold their slots", n, live-2)
	}
	// Job 10's events arrive late: it ran on its runner.
	ranOn(t, st, "skiff-10-1", 10, m0.Add(5*time.Second), m0.Add(20*time.Second))
	if err := led.Advance(ctx, "skiff-10-1", ledger.StateJobCompleted, m0.Add(20*time.Second), 10); err != nil {
		t.Fatal(err)
	}
	for _, at := range []time.Duration{3 * time.Minute, 4 * time.Minute} {
		if done := writePass(t, w, led, m0.Add(at), nil); done["skiff-11-1"] != writer.Wait {
			t.Fatalf("done %v at %s: skiff-11-1 must wait within AwaitWindow", done, at)
		}
	}
	recs := collect(t, out)
	if len(recs) != 1 || recs[0].JobID != 10 || recs[0].RunnerName != "skiff-10-1" {
		t.Fatalf("records %+v, want job 10's only", recs)
	}
	// Billed from launch to the runner's end (30 s: the 60 s minimum), not
	// to the pass that wrote the record.
	if c := recs[0].Cost; c == nil || math.Abs(c.EstimatedUSD-c.HourlyUSD*60/3600) > 1e-9 {
		t.Errorf("cost %+v, want 60 s at the hourly price", c)
	}
	if done := writePass(t, w, led, m0.Add(61*time.Minute), nil); done["skiff-11-1"] != writer.Done {
		t.Fatalf("done %v past AwaitWindow, want skiff-11-1 done", done)
	}
	if got, _ := led.Awaiting(ctx, "cpu"); len(got) != 0 {
		t.Errorf("awaiting %+v, want none", got)
	}
	if n := len(collect(t, out)); n != 1 || counts.Get(writer.MetricRecords, "not_run") != 1 || counts.Get(writer.MetricRecords, "written") != 1 {
		t.Errorf("%d records, counts %v; want 1 written and skiff-11-1 not run", n, counts.Snapshot())
	}
}

// TestRecordWriterLateStartOfAnotherJob steps the race of a runner that
// took another job than its own: skiff-20-1, launched for job 20, ran job
// 22, while job 20 ran on skiff-21-1. The pass judges skiff-20-1 before
// job 22's start event arrives, when nothing yet says which job it ran; the
// event arrives after its ledger record ended. Job 22 gets exactly one
// record, and the runner's slot is not held meanwhile. skiff-23-1, whose
// job was cancelled and which ran nothing, gets none and leaves the
// awaiting list once AwaitWindow from its end has passed.
func TestRecordWriterLateStartOfAnotherJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, led := recordWorld(t)
	out := &metrics.MemoryRecords{}
	counts := &telemetry.Memory{}
	w := &writer.RecordWriter{Pools: []string{"*"}, Jobs: st, Ledger: led, Out: out, CloudProvider: "aws",
		Region: "us-east-1", AwaitWindow: 2 * time.Minute, Counter: counts}
	jobs := []store.JobRecord{
		{ID: 20, Status: store.StatusInProgress, StartedAt: m0.Add(2 * time.Second), RunnerName: "skiff-21-1"},
		{ID: 22, Status: store.StatusQueued},
		{ID: 23, Status: store.StatusCompleted, CompletedAt: m0.Add(time.Second), Conclusion: "cancelled"},
	}
	for _, j := range jobs {
		j.RunID, j.Attempt, j.Repository, j.Owner, j.Pool, j.QueuedAt, j.UpdatedAt, j.ExpiresAt = 70, 1, "acme/app", "acme", "cpu", m0, m0, m0.AddDate(10, 0, 0)
		if _, err := st.RecordJob(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"skiff-20-1", "skiff-23-1"} {
		id := map[string]int64{"skiff-20-1": 20, "skiff-23-1": 23}[name]
		launched(t, led, ledger.Runner{Name: name, Pool: "cpu", JobID: id, ReservedAt: m0},
			ledger.LaunchReport{InstanceID: "i-" + name, InstanceType: "c7i.xlarge", At: m0})
	}

	// 1. Both runners' processes ended; the pass judges them. Nothing says
	// yet which job skiff-20-1 ran: its own ran elsewhere.
	judged := []writer.MetricsJob{{Runner: "skiff-20-1", Pool: "cpu", JobID: 20}, {Runner: "skiff-23-1", Pool: "cpu", JobID: 23}}
	if done := writePass(t, w, led, m0.Add(10*time.Second), judged); done["skiff-20-1"] != writer.Await || done["skiff-23-1"] != writer.Await {
		t.Fatalf("done %v: runners that ran nothing the ledger knows of must be awaited, not hold their slots", done)
	}
	// 2. Job 22's start and end reach the webhook: the job's record and
	// the (ended) runner's ledger record.
	ranOn(t, st, "skiff-20-1", 22, m0.Add(3*time.Second), m0.Add(8*time.Second))
	if err := led.Advance(ctx, "skiff-20-1", ledger.StateJobStarted, m0.Add(3*time.Second), 22); err != nil {
		t.Fatal(err)
	}
	// 3. The next passes have no new runner to judge.
	writePass(t, w, led, m0.Add(20*time.Second), nil)
	writePass(t, w, led, m0.Add(3*time.Minute), nil)
	recs := collect(t, out)
	if len(recs) != 1 || recs[0].JobID != 22 || recs[0].RunnerName != "skiff-20-1" {
		t.Fatalf("records %+v, want exactly one, job 22's, run by skiff-20-1", recs)
	}
	if err := metrics.Validate(recs[0]); err != nil {
		t.Errorf("the record fails its schema: %v", err)
	}
	// skiff-23-1 ran nothing: past AwaitWindow it leaves the awaiting list, without a record.
	if got := counts.Get(writer.MetricRecords, "not_run"); got != 1 {
		t.Errorf("not_run counted %d times, want once (skiff-23-1, after AwaitWindow)", got)
	}
	writePass(t, w, led, m0.Add(4*time.Minute), nil)
	if n := len(collect(t, out)); n != 1 {
		t.Errorf("%d records after a later pass, want 1", n)
	}
	if got, _ := led.Awaiting(ctx, "cpu"); len(got) != 0 {
		t.Errorf("awaiting %+v, want none", got)
	}
}
