package scaledown

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/skiffci/skiff/pkg/metrics"
	"github.com/skiffci/skiff/pkg/metrics/fromstore"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/provisioning"
	"github.com/skiffci/skiff/pkg/scaledown/decide"
	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/telemetry"
)

// MetricsJob is a finished runner whose job may get a metrics record.
type MetricsJob struct {
	Runner     string
	Pool       string
	JobID      int64
	InstanceID string
	Instance   *provider.Instance // as listed this pass, if it still was
}

// MetricsWriter writes the opt-in metrics records of finished jobs. Write
// returns the runners that are done with (written, written before, or
// never to be written); the others wait for the next pass (CloudWatch has
// not settled), and their ledger records are ended only then.
type MetricsWriter interface {
	Enabled(pool string) bool
	Write(ctx context.Context, now time.Time, jobs []MetricsJob) map[string]bool
}

// NoMetrics is the MetricsWriter of an operator who did not opt in.
type NoMetrics struct{}

// Enabled implements MetricsWriter: never.
func (NoMetrics) Enabled(string) bool { return false }

// Write implements MetricsWriter: nothing to do.
func (NoMetrics) Write(context.Context, time.Time, []MetricsJob) map[string]bool { return nil }

// RecordWriter is the MetricsWriter that builds each record from the job
// and run records, the ledger and the peaks (metrics.Build), and puts it
// exactly once (metrics.Records.Put; ErrExists means done).
type RecordWriter struct {
	// Pools are the pools that opted in; "*" means all.
	Pools   []string
	Records Records
	Ledger  store.Ledger
	Peaks   metrics.PeakReader
	Out     metrics.Records
	// CloudProvider and Region go into every record.
	CloudProvider, Region string
	Prices                *pool.PriceTable
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
	// StartWait bounds, from the runner's launch, the wait for the start
	// event of a job whose record says only "queued" when the runner ended
	// (DefaultStartWait).
	StartWait time.Duration
	Counter   telemetry.Counter
	Logger    *slog.Logger

	mu sync.Mutex
	// awaiting are the runners done with before any event said which job
	// they ran, their own having run elsewhere (Write).
	awaiting map[string]MetricsJob
}

// Enabled implements MetricsWriter.
func (w *RecordWriter) Enabled(name string) bool { return pool.Listed(w.Pools, name) }

func (w *RecordWriter) count(reason string) {
	if w.Counter != nil {
		w.Counter.Count(MetricRecords, reason)
	}
}

// Write implements MetricsWriter: one batch of peak reads for all jobs.
// A runner ended before anything said which job it ran, while its own job
// ran elsewhere (GitHub gave it another), is done at once, so its slot
// frees, and awaited: each later Write reads its ledger record again until
// a start event names its job (then writes that job's record) or StartWait
// from its launch passes.
func (w *RecordWriter) Write(ctx context.Context, now time.Time, jobs []MetricsJob) map[string]bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	done := map[string]bool{}
	awaited := w.awaitedJobs(jobs)
	jobs = append(jobs, awaited...)
	if len(jobs) == 0 {
		return done
	}
	b := &recordBatch{w: w, now: now, log: w.Logger, done: done, await: map[string]MetricsJob{}}
	if b.log == nil {
		b.log = slog.Default()
	}
	for _, j := range jobs {
		b.add(ctx, j)
	}
	b.put(ctx, b.readPeaks(ctx))
	for _, j := range awaited {
		if done[j.Runner] {
			delete(w.awaiting, j.Runner)
		}
	}
	for name, j := range b.await {
		if w.awaiting == nil {
			w.awaiting = map[string]MetricsJob{}
		}
		w.awaiting[name] = j
	}
	return done
}

// awaitedJobs are the runners awaited from earlier Writes, those in jobs
// aside (the same runner judged again).
func (w *RecordWriter) awaitedJobs(jobs []MetricsJob) []MetricsJob {
	var out []MetricsJob
	for name, j := range w.awaiting {
		if !slices.ContainsFunc(jobs, func(x MetricsJob) bool { return x.Runner == name }) {
			out = append(out, j)
		}
	}
	sort.Slice(out, func(i, k int) bool { return out[i].Runner < out[k].Runner })
	return out
}

// recordBatch is one Write's work: the records to build and their peak
// windows, and the runners done with or to await.
type recordBatch struct {
	w       *RecordWriter
	now     time.Time
	log     *slog.Logger
	done    map[string]bool
	await   map[string]MetricsJob
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
// or decides that the runner ran nothing (done), or that the start event
// that would say what it ran may still come (held, or awaited).
func (b *recordBatch) add(ctx context.Context, j MetricsJob) {
	w := b.w
	// The record is of the job the runner ran: under GitHub's rule a
	// runner may take another queued job its labels fit than its own.
	r, rerr := w.Ledger.Runner(ctx, j.Runner)
	jobID := j.JobID
	if rerr == nil && r.BusyJob != 0 {
		jobID = r.BusyJob
	}
	job, err := w.Records.Job(ctx, jobID)
	if errors.Is(err, store.ErrNotFound) {
		b.done[j.Runner] = true
		return
	}
	if err != nil {
		w.count("error")
		b.log.Error("reading job record for its metrics", "job_id", jobID, "err", err)
		return
	}
	if job.StartedAt.IsZero() || job.RunnerName != j.Runner {
		b.notRunHere(j, job, r, rerr)
		return
	}
	run, err := w.Records.Run(ctx, job.RunID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		w.count("error")
		b.log.Error("reading run record for its metrics", "run_id", job.RunID, "err", err)
		return
	}
	if rerr != nil {
		r = provisioning.Runner{Name: j.Runner, InstanceID: j.InstanceID}
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

// notRunHere decides about a runner the job record does not show running
// the job (its own, or the one the ledger says it ran). Its own job ended
// or started on another runner: certain, when the ledger knows which job
// the runner ran. Otherwise, while the runner is young (within StartWait of
// its launch), the webhook's start event may still be on its way (a late
// delivery, a redelivery): a runner whose own job may still be its own
// keeps its ledger record; one whose own job ran elsewhere is done, so its
// slot frees, and awaited, so the job it ran still gets its record.
func (b *recordBatch) notRunHere(j MetricsJob, job store.Job, r provisioning.Runner, rerr error) {
	startWait := b.w.StartWait
	if startWait <= 0 {
		startWait = DefaultStartWait
	}
	elsewhere := job.Status == store.StatusCompleted || (job.RunnerName != "" && job.RunnerName != j.Runner)
	young := rerr == nil && !r.LaunchedAt.IsZero() && b.now.Sub(r.LaunchedAt) < startWait
	switch {
	case young && !elsewhere:
		b.w.count("pending")
		return
	case young && r.BusyJob == 0:
		b.await[j.Runner] = j
	default:
		b.w.count("not_run") // not run here: no record from this runner
	}
	b.done[j.Runner] = true
}

// instance is the record's instance: as listed this pass, else from the
// ledger.
func (b *recordBatch) instance(j MetricsJob, r provisioning.Runner) metrics.Instance {
	w := b.w
	inst := metrics.Instance{ID: r.InstanceID, Type: r.InstanceType, Region: w.Region, Zone: r.Zone, RunnerName: r.Name,
		LaunchedAt: r.LaunchedAt, EndedAt: b.now, Interrupted: !r.InterruptedAt.IsZero()}
	switch {
	case j.Instance != nil:
		inst = fromstore.Instance(*j.Instance, w.Region)
		inst.RunnerName, inst.EndedAt, inst.Interrupted = r.Name, b.now, !r.InterruptedAt.IsZero()
	case r.Spot:
		inst.Capacity = string(provider.Spot)
	default:
		inst.Capacity = string(provider.OnDemand)
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

// put builds and writes each record whose peaks settled (or waited long
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
			b.done[it.j.Runner] = true
			continue
		case errors.Is(err, metrics.ErrNotFinished):
			if b.now.Sub(it.in.Instance.LaunchedAt) > 24*time.Hour {
				b.done[it.j.Runner] = true // its completion never reached us
			}
			w.count("pending")
			continue
		case err != nil:
			w.count("error")
			b.log.Error("building metrics record", "job_id", it.key.JobID, "err", err)
			b.done[it.j.Runner] = true // a record that cannot be built must not hold the ledger
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
		b.done[it.j.Runner] = true
	}
}

// metricsJobs turns the actions whose records end into the writer's jobs.
func metricsJobs(as []*decide.Action, p *pass) []MetricsJob {
	out := make([]MetricsJob, 0, len(as))
	for _, a := range as {
		j := MetricsJob{Runner: a.Runner, Pool: a.Pool, JobID: a.JobID, InstanceID: a.InstanceID}
		if in, ok := p.instances[a.InstanceID]; ok {
			j.Instance = &in
		}
		out = append(out, j)
	}
	return out
}
