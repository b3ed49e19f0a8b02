// Package writer writes the opt-in metrics records of finished jobs, once
// each, from scale-down's pass: the record writer (RecordWriter), the
// awaiting list of runners whose job is not known yet (AwaitingLedger), and
// the peak readers of providers that measure their runners themselves
// (ProviderPeaks, AccountedPeaks).
//
// Scale-down gives Write the runners whose ledger records end this pass and
// the awaited ones; Write answers, per runner, Done, Await or nothing
// (Wait), and scale-down ends records and awaiting lists accordingly:
//
//	runner ends ──► Write ─┬─ Done:  record written (or never to be), ledger record ends
//	                       ├─ Await: no event named its job yet; record ends, runner on its pool's awaiting list
//	                       └─ Wait:  peaks or the job's end not there yet; asked again next pass
//	awaited runner ──► Write ─┬─ Done: taken off the list (record written, or AwaitWindow passed)
//	                          └─ Wait: stays on the list
package writer

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/metrics"
	"github.com/skiffci/skiff/pkg/metrics/fromstore"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/provider/ec2/ec2prices"
	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/telemetry"
)

// MetricRecords counts metrics records (telemetry.Counter), Reason =
// written, exists, not_run, pending, awaiting (a runner ended before any
// event named the job it ran), error. The name is scale-down's, whose pass
// writes them.
const MetricRecords = "ScaleDownMetricsRecords"

// Defaults of RecordWriter, each with the reason for its value.
const (
	// DefaultMetricsWait bounds how long a finished job's record waits for
	// CloudWatch's metric lag before it is written without peaks.
	DefaultMetricsWait = 10 * time.Minute
	// DefaultAwaitWindow bounds, from its end, how long an awaited runner
	// (one that ended before any event said which job it ran) waits for an
	// event that names its job: twice the window within which a failed
	// delivery is redelivered (scaledown.DefaultRedeliverWindow), so such an
	// event comes within it or never. It costs one listing per pool a pass.
	DefaultAwaitWindow = 2 * time.Hour
)

// JobRecords reads the job and run records the webhook keeps
// (store.Store implements it).
type JobRecords interface {
	Job(ctx context.Context, id int64) (store.JobRecord, error)
	Run(ctx context.Context, id int64) (store.RunRecord, error)
}

var _ JobRecords = store.Store(nil)

// MetricsJob is a finished runner whose job may get a metrics record: a
// runner whose ledger record ends this pass, or an awaited one.
type MetricsJob struct {
	Runner     string
	Pool       string
	JobID      int64
	InstanceID string
	Instance   *provider.Instance // as listed this pass, if it still was
	// Awaited is the ledger record of a runner on its pool's awaiting list
	// (Await), as the list showed it; nil for a runner ending this pass.
	Awaited *ledger.Runner
}

// AwaitedJob is the MetricsJob of a runner on its pool's awaiting list
// (AwaitingLedger.Awaiting), as every pass gives it to Write again.
func AwaitedJob(r *ledger.Runner) MetricsJob {
	return MetricsJob{Runner: r.Name, Pool: r.Pool, JobID: r.JobID, InstanceID: r.InstanceID, Awaited: r}
}

// RunnerRecord is the runner's ledger record: the awaiting list's, else
// read.
func (j MetricsJob) RunnerRecord(ctx context.Context, l RunnerRecords) (ledger.Runner, error) {
	if j.Awaited != nil {
		return *j.Awaited, nil
	}
	return l.Runner(ctx, j.Runner)
}

// Outcome is what Write decided about a runner.
type Outcome int

const (
	// Wait, the zero Outcome (a runner absent from Write's answer): the
	// runner waits for the next pass (its peaks, or its job's end, are not
	// there yet), its ledger record live, or an awaited one on its list.
	Wait Outcome = iota
	// Done: the runner is done with — its job's record written (now or
	// before), or never to be written. Its ledger record ends; an awaited
	// runner leaves its pool's awaiting list.
	Done
	// Await: nothing has said yet which job the runner ran, and an event
	// that does may still come (late, reordered, redelivered). Its ledger
	// record ends, so its slot frees, on its pool's awaiting list
	// (AwaitingLedger.EndAwaiting), and every later pass gives it to Write
	// again, until an event names its job or AwaitWindow from its end has
	// passed.
	Await
)

// MetricsWriter writes the opt-in metrics records of finished jobs. Write
// says, per runner, what it is done with; the others wait for the next
// pass (within CloudWatch's metric lag), and their ledger records are ended
// only then.
type MetricsWriter interface {
	Enabled(pool string) bool
	Write(ctx context.Context, now time.Time, jobs []MetricsJob) map[string]Outcome
}

// NoMetrics is the MetricsWriter of an operator who did not opt in.
type NoMetrics struct{}

// Enabled implements MetricsWriter: never.
func (NoMetrics) Enabled(string) bool { return false }

// Write implements MetricsWriter: nothing to do.
func (NoMetrics) Write(context.Context, time.Time, []MetricsJob) map[string]Outcome { return nil }

// PoolWriters is the MetricsWriter of a daemon whose pools run on several
// backends: each pool's runners go to its backend's writer (by pool name);
// a pool it does not name writes no record. The writers are compared as
// map keys: pointers (*RecordWriter).
type PoolWriters map[string]MetricsWriter

// Enabled implements MetricsWriter: the pool's writer's answer.
func (w PoolWriters) Enabled(pool string) bool {
	pw, ok := w[pool]
	return ok && pw.Enabled(pool)
}

// Write implements MetricsWriter: one Write per writer, with its pools'
// runners.
func (w PoolWriters) Write(ctx context.Context, now time.Time, jobs []MetricsJob) map[string]Outcome {
	per := map[MetricsWriter][]MetricsJob{}
	var order []MetricsWriter
	for _, j := range jobs {
		pw, ok := w[j.Pool]
		if !ok {
			continue
		}
		if _, seen := per[pw]; !seen {
			order = append(order, pw)
		}
		per[pw] = append(per[pw], j)
	}
	out := map[string]Outcome{}
	for _, pw := range order {
		for name, o := range pw.Write(ctx, now, per[pw]) {
			out[name] = o
		}
	}
	return out
}

// AwaitingLedger is the awaiting list, as scale-down's pass keeps it for
// the writer: a runner Write awaits is ended onto its pool's list
// (EndAwaiting: ended as End ends it, and listed, in one write), each pass
// gives the pool's listed runners to Write again (Awaiting), and a runner
// Write is done with is taken off (StopAwaiting). ledger.Ledger implements
// it; scaledown.Ledger includes it.
type AwaitingLedger interface {
	EndAwaiting(ctx context.Context, name string, at time.Time, reason string) (bool, error)
	Awaiting(ctx context.Context, pool string) ([]ledger.Runner, error)
	StopAwaiting(ctx context.Context, name string) error
}

// RunnerRecords reads a runner's ledger record, or store.ErrNotFound: the
// part of the ledger the record writer reads. ledger.Ledger implements it.
type RunnerRecords interface {
	Runner(ctx context.Context, name string) (ledger.Runner, error)
}

var (
	_ AwaitingLedger = ledger.Ledger(nil)
	_ RunnerRecords  = ledger.Ledger(nil)
)

// RecordWriter is the MetricsWriter that builds each record from the job
// and run records, the ledger and the peaks (metrics.Build), and puts it
// exactly once (metrics.Records.Put; ErrExists means done).
type RecordWriter struct {
	// Pools are the pools that opted in; "*" means all.
	Pools  []string
	Jobs   JobRecords
	Ledger RunnerRecords
	Peaks  metrics.PeakReader
	Out    metrics.Records
	// CloudProvider and Region go into every record.
	CloudProvider, Region string
	Prices                *ec2prices.PriceTable
	// Host describes the machine every runner runs on, for providers
	// whose instance type does not (local processes); nil for EC2.
	Host *metrics.Host
	// CostPerHour is, per pool, the operator's hourly cost of a machine
	// the price table does not list (records get cost basis
	// operator-rate); pools not in it get no cost.
	CostPerHour map[string]float64
	// Wait bounds the wait for peaks (DefaultMetricsWait): after it the
	// record is written without them (their sources marked missing).
	Wait time.Duration
	// AwaitWindow bounds, from its end, how long an awaited runner waits
	// for an event that names its job (DefaultAwaitWindow).
	AwaitWindow time.Duration
	Counter     telemetry.Counter
	Logger      *slog.Logger
}

// Enabled implements MetricsWriter.
func (w *RecordWriter) Enabled(name string) bool { return pool.Listed(w.Pools, name) }

func (w *RecordWriter) count(reason string) {
	if w.Counter != nil {
		w.Counter.Count(MetricRecords, reason)
	}
}

// Write implements MetricsWriter: one batch of peak reads for all jobs.
// A runner that ended before anything said which job it ran is awaited
// (Await); an awaited runner is looked at again once an event has named
// its job (its ledger record's BusyJob), and that job's record written from
// the job record and the runner's ledger record.
func (w *RecordWriter) Write(ctx context.Context, now time.Time, jobs []MetricsJob) map[string]Outcome {
	out := map[string]Outcome{}
	if len(jobs) == 0 {
		return out
	}
	b := &recordBatch{w: w, now: now, log: w.Logger, out: out}
	if b.log == nil {
		b.log = slog.Default()
	}
	for _, j := range jobs {
		b.add(ctx, j)
	}
	b.put(ctx, b.readPeaks(ctx))
	return out
}

// recordBatch is one Write's work: the records to build and their peak
// windows, and what it decided about each runner.
type recordBatch struct {
	w       *RecordWriter
	now     time.Time
	log     *slog.Logger
	out     map[string]Outcome
	items   []recordItem
	windows []metrics.PeakWindow
}

// recordItem is a record to build once the peaks are read.
type recordItem struct {
	j   MetricsJob
	in  metrics.Inputs
	key metrics.Key
}

// add reads the job the runner ran and its run, and queues its record;
// or decides that the runner ran nothing (Done), or that nothing has said
// yet what it ran (Await, or an awaited runner waits on).
func (b *recordBatch) add(ctx context.Context, j MetricsJob) {
	w := b.w
	// The record is of the job the runner ran: under GitHub's rule a
	// runner may take another queued job its labels fit than its own.
	r, rerr := j.RunnerRecord(ctx, w.Ledger)
	if rerr != nil && !errors.Is(rerr, store.ErrNotFound) {
		w.count("error")
		b.log.Error("reading runner record for its metrics", "runner_name", j.Runner, "err", rerr)
		return
	}
	if j.Awaited != nil && r.BusyJob == 0 {
		b.awaitOn(j, r)
		return
	}
	jobID := j.JobID
	if rerr == nil && r.BusyJob != 0 {
		jobID = r.BusyJob
	}
	job, err := w.Jobs.Job(ctx, jobID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		w.count("error")
		b.log.Error("reading job record for its metrics", "job_id", jobID, "err", err)
		return
	}
	if err != nil || job.StartedAt.IsZero() || job.RunnerName != j.Runner {
		b.notRunHere(j, r, rerr)
		return
	}
	run, err := w.Jobs.Run(ctx, job.RunID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		w.count("error")
		b.log.Error("reading run record for its metrics", "run_id", job.RunID, "err", err)
		return
	}
	if rerr != nil {
		r = ledger.Runner{Name: j.Runner, InstanceID: j.InstanceID}
	}
	in := metrics.Inputs{Job: fromstore.Job(job), Run: fromstore.Run(run), Instance: b.instance(j, r), CloudProvider: w.CloudProvider,
		Prices: w.Prices, Host: w.Host, HourlyUSD: w.CostPerHour[job.Pool]}
	key := metrics.Key{JobID: job.ID, RunAttempt: job.Attempt}
	end := job.CompletedAt
	if end.IsZero() {
		end = b.now
	}
	b.items = append(b.items, recordItem{j: j, in: in, key: key})
	b.windows = append(b.windows, metrics.PeakWindow{Key: key, InstanceID: in.Instance.ID, Pool: j.Pool, InstanceType: in.Instance.Type,
		Start: job.StartedAt, End: end})
}

// awaitOn decides about an awaited runner no event has named a job of
// yet: it waits on, within AwaitWindow of its end; past it, it ran
// nothing that will be named (Done).
func (b *recordBatch) awaitOn(j MetricsJob, r ledger.Runner) {
	window := b.w.AwaitWindow
	if window <= 0 {
		window = DefaultAwaitWindow
	}
	if b.now.Sub(r.EndedAt) >= window {
		b.w.count("not_run")
		b.out[j.Runner] = Done
	}
}

// notRunHere decides about a runner no job record shows running the job
// (its own, or the one the ledger says it ran). When the ledger
// knows which job the runner ran, that is certain: no record from this
// runner (Done). When it does not, an event may still name a job the
// runner ran: the runner is awaited (Await), so that its slot frees now
// and that job still gets its record.
func (b *recordBatch) notRunHere(j MetricsJob, r ledger.Runner, rerr error) {
	if rerr == nil && r.BusyJob == 0 && j.Awaited == nil {
		b.w.count("awaiting")
		b.out[j.Runner] = Await
		return
	}
	b.w.count("not_run") // not run here: no record from this runner
	b.out[j.Runner] = Done
}

// instance is the record's instance: as listed this pass, else from the
// ledger; it ended at the ledger record's end, else now.
func (b *recordBatch) instance(j MetricsJob, r ledger.Runner) metrics.InstanceInput {
	w := b.w
	ended := b.now
	if !r.EndedAt.IsZero() {
		ended = r.EndedAt // an awaited runner's
	}
	inst := metrics.InstanceInput{ID: r.InstanceID, Type: r.InstanceType, Region: w.Region, Zone: r.Zone, RunnerName: r.Name,
		LaunchedAt: r.LaunchedAt, EndedAt: ended, Interrupted: !r.InterruptedAt.IsZero()}
	switch {
	case j.Instance != nil:
		inst = fromstore.Instance(*j.Instance, w.Region)
		inst.RunnerName, inst.EndedAt, inst.Interrupted = r.Name, ended, !r.InterruptedAt.IsZero()
		if !r.LaunchedAt.IsZero() {
			inst.LaunchedAt = r.LaunchedAt // the ledger's, as scale-up recorded the launch
		}
	case r.Spot:
		inst.Capacity = string(provider.Spot)
	default:
		inst.Capacity = string(provider.OnDemand)
	}
	inst.ReservedAt, inst.RegisteredAt, inst.StartKind = r.ReservedAt, r.RegisteredAt, r.StartKind
	if r.BusyJob != 0 && r.JobID != 0 && r.BusyJob != r.JobID {
		// The runner was requested for another job than the one it ran:
		// its request says nothing of this job's start.
		inst.ReservedAt = time.Time{}
	}
	return inst
}

// readPeaks reads the peaks of all the batch's windows in one call.
func (b *recordBatch) readPeaks(ctx context.Context) metrics.PeakResult {
	res := metrics.PeakResult{Peaks: map[metrics.Key]*metrics.Peaks{}}
	if len(b.windows) > 0 && b.w.Peaks != nil {
		var err error
		if res, err = b.w.Peaks.Read(ctx, b.windows); err != nil {
			b.log.Warn("reading peaks; records wait for the next pass", "err", err)
		}
	}
	return res
}

// put builds and writes each record whose peaks are past the metric lag (or waited long
// enough), once.
func (b *recordBatch) put(ctx context.Context, res metrics.PeakResult) {
	w := b.w
	wait := w.Wait
	if wait <= 0 {
		wait = DefaultMetricsWait
	}
	pending := map[metrics.Key]bool{}
	for _, pw := range res.Pending {
		pending[pw.Key] = true
	}
	for _, it := range b.items {
		ended := it.in.Job.CompletedAt
		if pending[it.key] || (res.Peaks == nil && w.Peaks != nil) {
			if ended.IsZero() || b.now.Sub(ended) < wait {
				w.count("pending")
				continue
			}
		}
		it.in.Peaks = res.Peaks[it.key]
		rec, err := metrics.Build(it.in)
		switch {
		case errors.Is(err, metrics.ErrNotRun):
			w.count("not_run")
			b.out[it.j.Runner] = Done
			continue
		case errors.Is(err, metrics.ErrNotFinished):
			if b.now.Sub(it.in.Instance.LaunchedAt) > 24*time.Hour {
				b.out[it.j.Runner] = Done // its completion never reached us
			}
			w.count("pending")
			continue
		case err != nil:
			w.count("error")
			b.log.Error("building metrics record", "job_id", it.key.JobID, "err", err)
			b.out[it.j.Runner] = Done // a record that cannot be built must not hold the ledger
			continue
		}
		switch err := w.Out.Put(ctx, rec); {
		case err == nil:
			w.count("written")
		case errors.Is(err, metrics.ErrExists):
			w.count("exists")
		default:
			w.count("error")
			b.log.Error("writing metrics record", "job_id", it.key.JobID, "err", err)
			continue
		}
		b.out[it.j.Runner] = Done
	}
}
