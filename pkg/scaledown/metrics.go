package scaledown

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/skiffci/skiff/pkg/launch"
	"github.com/skiffci/skiff/pkg/metrics"
	"github.com/skiffci/skiff/pkg/metrics/fromstore"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provider"
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
}

// Enabled implements MetricsWriter.
func (w *RecordWriter) Enabled(name string) bool { return pool.Listed(w.Pools, name) }

func (w *RecordWriter) count(reason string) {
	if w.Counter != nil {
		w.Counter.Count(MetricRecords, reason)
	}
}

// Write implements MetricsWriter: one batch of peak reads for all jobs.
func (w *RecordWriter) Write(ctx context.Context, now time.Time, jobs []MetricsJob) map[string]bool {
	done := map[string]bool{}
	if len(jobs) == 0 {
		return done
	}
	log := w.Logger
	if log == nil {
		log = slog.Default()
	}
	wait := w.Wait
	if wait <= 0 {
		wait = DefaultMetricsWait
	}
	startWait := w.StartWait
	if startWait <= 0 {
		startWait = DefaultStartWait
	}
	type item struct {
		j   MetricsJob
		in  metrics.Inputs
		key metrics.Key
	}
	var items []item
	var windows []metrics.PeakWindow
	for _, j := range jobs {
		// The record is of the job the runner ran: under GitHub's rule a
		// runner may take another queued job its labels fit than its own.
		r, rerr := w.Ledger.Runner(ctx, j.Runner)
		jobID := j.JobID
		if rerr == nil && r.BusyJob != 0 {
			jobID = r.BusyJob
		}
		job, err := w.Records.Job(ctx, jobID)
		if errors.Is(err, store.ErrNotFound) {
			done[j.Runner] = true
			continue
		}
		if err != nil {
			w.count("error")
			log.Error("reading job record for its metrics", "job_id", jobID, "err", err)
			continue
		}
		if job.StartedAt.IsZero() || job.RunnerName != j.Runner {
			// Not run here — certain when the job ended or started on another
			// runner; when its record says only "queued" and the runner is
			// young, the webhook's start event may still be on its way (a
			// late delivery, a redelivery): wait for it, within StartWait of
			// the launch, rather than lose the record of the job it ran.
			certain := job.Status == store.StatusCompleted || (job.RunnerName != "" && job.RunnerName != j.Runner)
			if !certain && rerr == nil && !r.LaunchedAt.IsZero() && now.Sub(r.LaunchedAt) < startWait {
				w.count("pending")
				continue
			}
			done[j.Runner] = true // not run here: no record from this runner
			w.count("not_run")
			continue
		}
		run, err := w.Records.Run(ctx, job.RunID)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			w.count("error")
			log.Error("reading run record for its metrics", "run_id", job.RunID, "err", err)
			continue
		}
		if rerr != nil {
			r = launch.Runner{Name: j.Runner, InstanceID: j.InstanceID}
		}
		inst := metrics.Instance{ID: r.InstanceID, Type: r.InstanceType, Region: w.Region, Zone: r.Zone, RunnerName: r.Name,
			LaunchedAt: r.LaunchedAt, EndedAt: now, Interrupted: !r.InterruptedAt.IsZero()}
		if j.Instance != nil {
			inst = fromstore.Instance(*j.Instance, w.Region)
			inst.RunnerName, inst.EndedAt, inst.Interrupted = r.Name, now, !r.InterruptedAt.IsZero()
		} else if r.Spot {
			inst.Capacity = string(provider.Spot)
		} else {
			inst.Capacity = string(provider.OnDemand)
		}
		in := metrics.Inputs{Job: fromstore.Job(job), Run: fromstore.Run(run), Instance: inst, CloudProvider: w.CloudProvider, Prices: w.Prices,
			Host: w.Host, HourlyUSD: w.CostPerHour[job.Pool]}
		key := metrics.Key{JobID: job.ID, RunAttempt: job.Attempt}
		end := job.CompletedAt
		if end.IsZero() {
			end = now
		}
		items = append(items, item{j: j, in: in, key: key})
		windows = append(windows, metrics.PeakWindow{Key: key, InstanceID: inst.ID, Pool: j.Pool, InstanceType: inst.Type,
			Start: job.StartedAt, End: end})
	}
	res := metrics.PeakResult{Peaks: map[metrics.Key]*metrics.Peaks{}}
	if len(windows) > 0 && w.Peaks != nil {
		var err error
		if res, err = w.Peaks.Read(ctx, windows); err != nil {
			log.Warn("reading peaks; records wait for the next pass", "err", err)
		}
	}
	pending := map[metrics.Key]bool{}
	for _, pw := range res.Pending {
		pending[pw.Key] = true
	}
	for _, it := range items {
		ended := it.in.Job.CompletedAt
		if pending[it.key] || (res.Peaks == nil && w.Peaks != nil) {
			if ended.IsZero() || now.Sub(ended) < wait {
				w.count("pending")
				continue
			}
		}
		it.in.Peaks = res.Peaks[it.key]
		rec, err := metrics.Build(it.in)
		switch {
		case errors.Is(err, metrics.ErrNotRun):
			w.count("not_run")
			done[it.j.Runner] = true
			continue
		case errors.Is(err, metrics.ErrNotFinished):
			if now.Sub(it.in.Instance.LaunchedAt) > 24*time.Hour {
				done[it.j.Runner] = true // its completion never reached us
			}
			w.count("pending")
			continue
		case err != nil:
			w.count("error")
			log.Error("building metrics record", "job_id", it.key.JobID, "err", err)
			done[it.j.Runner] = true // a record that cannot be built must not hold the ledger
			continue
		}
		switch err := w.Out.Put(ctx, rec); {
		case err == nil:
			w.count("written")
		case errors.Is(err, metrics.ErrExists):
			w.count("exists")
		default:
			w.count("error")
			log.Error("writing metrics record", "job_id", it.key.JobID, "err", err)
			continue
		}
		done[it.j.Runner] = true
	}
	return done
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
