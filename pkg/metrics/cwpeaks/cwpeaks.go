// Package cwpeaks reads the peaks of finished jobs from the CloudWatch
// series the runners' agent publishes (userdata/cloudwatch-agent.json.tmpl),
// for many jobs per GetMetricData call.
//
// Each instance publishes under a namespace of its own,
// names.RunnerMetricsNamespaceOf(its ARN), the only one its role may write:
// a job's peaks are read from its own instance's namespace, so no job can
// forge another's (publishing another instance's InstanceId in its own
// namespace changes nothing that is read). WithAccount gives the parts of
// the ARNs.
//
// The series, per instance (the agent omits the host dimension; every series
// carries InstanceId and Pool):
//
//	metric                      extra dimensions        statistics read
//	cpu_usage_active            cpu=cpu-total           Maximum, Average
//	mem_used_percent            —                       Maximum
//	disk_used_percent           path=/, fstype          Maximum
//	nvidia_smi_utilization_gpu  index, name             Maximum (per GPU)
//	nvidia_smi_memory_used      index, name             Maximum (per GPU, MiB)
//	nvidia_smi_memory_total     index=0, name           Maximum (GPU 0; a type's GPUs are alike)
//
// Batching: a call takes up to 500 queries and returns up to 100,800 data
// points. Windows are sorted by start and packed into calls while both
// limits hold; each call spans its windows' union, and each job keeps only
// the data points inside its own window (widened by one period at the start,
// since a period's point is stamped at its beginning). The instance is
// single-use, so what the widening takes in is the same instance's boot.
// Continuation pages (NextToken) are merged.
//
// Period: 60 s by default. The agent samples every 10 s, and the Maximum of
// one-minute periods is exactly the maximum of the samples; CloudWatch keeps
// sub-minute data for only 3 hours, one-minute data for 15 days, so a
// reconciler that falls behind still reads the same peaks.
package cwpeaks

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch/types"

	"github.com/skiffci/skiff/pkg/metrics"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/provider/ec2/ec2prices"
	"github.com/skiffci/skiff/pkg/userdata"
)

// API is the part of the CloudWatch client the reader calls, with the SDK's
// signature; *cloudwatch.Client implements it.
type API interface {
	GetMetricData(ctx context.Context, params *cloudwatch.GetMetricDataInput, optFns ...func(*cloudwatch.Options)) (*cloudwatch.GetMetricDataOutput, error)
}

var _ API = (*cloudwatch.Client)(nil)

// Limits of one GetMetricData call (CloudWatch quotas).
const (
	MaxQueries    = 500
	MaxDataPoints = 100_800
)

// Defaults of the reader's settings.
const (
	// DefaultMetricLag is how long after a job's end its window is left alone:
	// the agent flushes every 30 s and CloudWatch makes a point readable
	// within about a minute of receiving it. Two minutes covers both.
	DefaultMetricLag = 2 * time.Minute
	// DefaultPeriod: see the package doc.
	DefaultPeriod = 60 * time.Second
	// DefaultRootFSType is the root file system of skiff's images (AL2023,
	// and the Deep Learning Base AMI on AL2023): the disk series' fstype.
	DefaultRootFSType = "xfs"
)

// GPUNames maps the price table's GPU models to the name nvidia-smi reports,
// the agent's name dimension. A model missing here, or a driver that names
// it differently, leaves the GPU series unread: the record then says gpu is
// missing rather than inventing a zero.
var GPUNames = map[string]string{
	"t4":   "Tesla T4",
	"a10g": "NVIDIA A10G",
	"l4":   "NVIDIA L4",
	"l40s": "NVIDIA L40S",
	"a100": "NVIDIA A100-SXM4-40GB",
	"h100": "NVIDIA H100 80GB HBM3",
}

// ErrPartial marks windows whose data CloudWatch returned only in part.
var ErrPartial = errors.New("cloudwatch returned partial data")

var _ metrics.PeakReader = (*Reader)(nil)

// Reader reads peaks. Build it with New.
type Reader struct {
	api API
	// namespaceOf is the namespace an instance's series are read from.
	namespaceOf func(instanceID string) string
	lag         time.Duration
	period      time.Duration
	now         func() time.Time
	prices      *ec2prices.PriceTable
	rootFSType  string
	maxQueries  int
}

// Option configures a Reader.
type Option func(*Reader)

// WithMetricLag sets how long after a job's end its window is left alone (DefaultMetricLag).
func WithMetricLag(d time.Duration) Option { return func(r *Reader) { r.lag = d } }

// WithPeriod sets the period of the statistics, a multiple of 60 s, or 10 s
// for windows under 3 hours old (DefaultPeriod).
func WithPeriod(d time.Duration) Option { return func(r *Reader) { r.period = d } }

// WithClock sets the reader's clock.
func WithClock(now func() time.Time) Option { return func(r *Reader) { r.now = now } }

// WithAccount reads each instance's series from its own namespace,
// names.RunnerMetricsNamespaceOf(arn:partition:ec2:region:account:instance/ID):
// what skiff's runners publish under. A reader needs it (or WithNamespace).
func WithAccount(partition, region, account string) Option {
	return func(r *Reader) {
		r.namespaceOf = func(id string) string {
			return names.RunnerMetricsNamespaceOf(userdata.InstanceARN(partition, region, account, id))
		}
	}
}

// WithNamespace reads every instance's series from one namespace ns (tests
// of the batching, whose fakes have one).
func WithNamespace(ns string) Option {
	return func(r *Reader) { r.namespaceOf = func(string) string { return ns } }
}

// ErrNoNamespace: the reader was built with neither WithAccount nor
// WithNamespace.
var ErrNoNamespace = errors.New("cwpeaks: no namespace to read (WithAccount)")

// WithPrices sets the table that says how many GPUs of which model an
// instance type has (ec2prices.Prices).
func WithPrices(t *ec2prices.PriceTable) Option { return func(r *Reader) { r.prices = t } }

// WithRootFSType sets the root file system type (DefaultRootFSType).
func WithRootFSType(fs string) Option { return func(r *Reader) { r.rootFSType = fs } }

// WithMaxQueries lowers the queries per call (tests).
func WithMaxQueries(n int) Option { return func(r *Reader) { r.maxQueries = n } }

// New returns a reader over api.
func New(api API, opts ...Option) *Reader {
	r := &Reader{api: api, lag: DefaultMetricLag, period: DefaultPeriod,
		now: time.Now, prices: ec2prices.Prices, rootFSType: DefaultRootFSType, maxQueries: MaxQueries}
	for _, o := range opts {
		o(r)
	}
	return r
}

type kind int

const (
	cpuMax kind = iota
	cpuAvg
	memMax
	diskMax
	gpuUtil
	gpuMem
	gpuTotal
)

var metricOf = [...]string{"cpu_usage_active", "cpu_usage_active", "mem_used_percent", "disk_used_percent",
	"nvidia_smi_utilization_gpu", "nvidia_smi_memory_used", "nvidia_smi_memory_total"}

type query struct {
	win  int // index into the batch's windows
	kind kind
	gpu  int
}

// Read returns the peaks of the windows past the metric lag, in as few calls as the
// limits allow. On an error it still returns what earlier calls read, with
// the failed calls' windows in Pending.
func (r *Reader) Read(ctx context.Context, windows []metrics.PeakWindow) (metrics.PeakResult, error) {
	if r.namespaceOf == nil {
		return metrics.PeakResult{}, ErrNoNamespace
	}
	res := metrics.PeakResult{Peaks: map[metrics.Key]*metrics.Peaks{}}
	cutoff := r.now().Add(-r.lag)
	var ready []metrics.PeakWindow
	for _, w := range windows {
		if w.End.After(cutoff) {
			res.Pending = append(res.Pending, w)
		} else {
			ready = append(ready, w)
		}
	}
	slices.SortFunc(ready, func(a, b metrics.PeakWindow) int { return a.Start.Compare(b.Start) })
	var errs []error
	for len(ready) > 0 {
		n := r.pack(ready)
		batch := ready[:n]
		ready = ready[n:]
		calls, err := r.readBatch(ctx, batch, res.Peaks)
		res.Calls += calls
		if err != nil {
			res.Pending = append(res.Pending, batch...)
			errs = append(errs, err)
			if ctx.Err() != nil {
				res.Pending = append(res.Pending, ready...)
				break
			}
		}
	}
	return res, errors.Join(errs...)
}

// gpus returns the number and nvidia-smi name of the type's GPUs.
func (r *Reader) gpus(instanceType string) (int, string) {
	if r.prices == nil {
		return 0, ""
	}
	it := r.prices.Lookup(instanceType)
	if it == nil || it.GPUs == 0 {
		return 0, ""
	}
	return it.GPUs, GPUNames[it.GPUModel]
}

func (r *Reader) queriesOf(w metrics.PeakWindow) int {
	n, name := r.gpus(w.InstanceType)
	if n == 0 || name == "" {
		return 4
	}
	return 4 + 2*n + 1
}

// pack returns how many of the sorted windows fit one call.
func (r *Reader) pack(ws []metrics.PeakWindow) int {
	q := 0
	start, end := ws[0].Start, ws[0].End
	for i, w := range ws {
		nq := r.queriesOf(w)
		s, e := start, end
		if w.End.After(e) {
			e = w.End
		}
		points := (q + nq) * (int(e.Sub(s.Add(-r.period))/r.period) + 2)
		if i > 0 && (q+nq > r.maxQueries || points > MaxDataPoints) {
			return i
		}
		q += nq
		end = e
	}
	return len(ws)
}

func dims(kv ...string) []types.Dimension {
	out := make([]types.Dimension, 0, len(kv)/2)
	for i := 0; i < len(kv); i += 2 {
		out = append(out, types.Dimension{Name: aws.String(kv[i]), Value: aws.String(kv[i+1])})
	}
	return out
}

// readBatch reads one batch of windows in one GetMetricData request (with
// its pages) and writes each window's peaks to out; it returns the calls
// made.
func (r *Reader) readBatch(ctx context.Context, batch []metrics.PeakWindow, out map[metrics.Key]*metrics.Peaks) (int, error) {
	in, meta := r.request(batch)
	values, calls, err := r.fetch(ctx, in, batch, meta)
	if err != nil {
		return calls, err
	}
	r.collect(batch, meta, values, out)
	return calls, nil
}

// request builds the batch's queries: CPU peak and mean, memory and root
// disk peaks per window, and per GPU its utilisation and memory (the first
// GPU's total too), over the span of every window.
func (r *Reader) request(batch []metrics.PeakWindow) (*cloudwatch.GetMetricDataInput, []query) {
	var queries []types.MetricDataQuery
	var meta []query
	add := func(win int, k kind, gpu int, d []types.Dimension) {
		stat := "Maximum"
		if k == cpuAvg {
			stat = "Average"
		}
		queries = append(queries, types.MetricDataQuery{
			Id: aws.String("q" + strconv.Itoa(len(queries))),
			MetricStat: &types.MetricStat{
				Metric: &types.Metric{Namespace: aws.String(r.namespaceOf(batch[win].InstanceID)), MetricName: aws.String(metricOf[k]), Dimensions: d},
				Period: aws.Int32(int32(r.period / time.Second)), Stat: aws.String(stat),
			},
			ReturnData: aws.Bool(true),
		})
		meta = append(meta, query{win: win, kind: k, gpu: gpu})
	}
	start, end := batch[0].Start, batch[0].End
	for i, w := range batch {
		if w.End.After(end) {
			end = w.End
		}
		base := []string{"InstanceId", w.InstanceID, "Pool", w.Pool}
		add(i, cpuMax, 0, dims(append(base, "cpu", "cpu-total")...))
		add(i, cpuAvg, 0, dims(append(base, "cpu", "cpu-total")...))
		add(i, memMax, 0, dims(base...))
		add(i, diskMax, 0, dims(append(base, "path", "/", "fstype", r.rootFSType)...))
		if n, name := r.gpus(w.InstanceType); n > 0 && name != "" {
			for g := range n {
				gd := append(slices.Clone(base), "index", strconv.Itoa(g), "name", name)
				add(i, gpuUtil, g, dims(gd...))
				add(i, gpuMem, g, dims(gd...))
				if g == 0 {
					add(i, gpuTotal, g, dims(gd...))
				}
			}
		}
	}
	return &cloudwatch.GetMetricDataInput{
		StartTime:         aws.Time(start.Add(-r.period).Truncate(r.period)),
		EndTime:           aws.Time(end.Add(r.period).Truncate(r.period)),
		MetricDataQueries: queries,
		ScanBy:            types.ScanByTimestampAscending,
	}, meta
}

// fetch runs the request through its pages and returns each query's
// values inside its own window. A query CloudWatch did not complete is
// ErrPartial; an internal error or a forbidden query fails the batch.
func (r *Reader) fetch(ctx context.Context, in *cloudwatch.GetMetricDataInput, batch []metrics.PeakWindow, meta []query) ([][]float64, int, error) {
	values := make([][]float64, len(meta))
	complete := make([]bool, len(meta))
	calls := 0
	for {
		outp, err := r.api.GetMetricData(ctx, in)
		calls++
		if err != nil {
			return nil, calls, fmt.Errorf("getting metric data for %d jobs: %w", len(batch), err)
		}
		for _, res := range outp.MetricDataResults {
			i, err := strconv.Atoi(aws.ToString(res.Id)[1:])
			if err != nil || i < 0 || i >= len(meta) {
				continue
			}
			w := batch[meta[i].win]
			from := w.Start.Add(-r.period)
			for j, ts := range res.Timestamps {
				if j < len(res.Values) && !ts.Before(from) && !ts.After(w.End) {
					values[i] = append(values[i], res.Values[j])
				}
			}
			switch res.StatusCode {
			case types.StatusCodeComplete:
				complete[i] = true
			case types.StatusCodeInternalError, types.StatusCodeForbidden:
				return nil, calls, fmt.Errorf("getting metric data for %d jobs: query %s: status %s", len(batch), aws.ToString(res.Id), res.StatusCode)
			}
		}
		if outp.NextToken == nil || *outp.NextToken == "" {
			break
		}
		in.NextToken = outp.NextToken
	}
	for i, ok := range complete {
		if !ok {
			return nil, calls, fmt.Errorf("getting metric data for %d jobs: query q%d: %w", len(batch), i, ErrPartial)
		}
	}
	return values, calls, nil
}

// collect turns the queries' values into each window's peaks (nil when
// the agent sent nothing for it).
func (r *Reader) collect(batch []metrics.PeakWindow, meta []query, values [][]float64, out map[metrics.Key]*metrics.Peaks) {
	peaks := make([]*metrics.Peaks, len(batch))
	gpus := make([]map[int]*metrics.GPUPeak, len(batch))
	for i := range batch {
		peaks[i] = &metrics.Peaks{}
		gpus[i] = map[int]*metrics.GPUPeak{}
	}
	for i, q := range meta {
		if len(values[i]) == 0 {
			continue
		}
		var v float64
		if q.kind == cpuAvg {
			v = mean(values[i])
		} else {
			v = slices.Max(values[i])
		}
		p := peaks[q.win]
		switch q.kind {
		case cpuMax:
			p.CPUPeak = &v
		case cpuAvg:
			p.CPUMean = &v
		case memMax:
			p.MemoryPeak = &v
		case diskMax:
			p.DiskPeak = &v
		default:
			g := gpus[q.win][q.gpu]
			if g == nil {
				_, name := r.gpus(batch[q.win].InstanceType)
				g = &metrics.GPUPeak{Index: q.gpu, Model: name}
				gpus[q.win][q.gpu] = g
			}
			switch q.kind {
			case gpuUtil:
				g.Utilization = &v
			case gpuMem:
				g.MemoryUsedMiB = &v
			case gpuTotal:
				g.MemoryTotalMiB = &v
			}
		}
	}
	for i, w := range batch {
		out[w.Key] = withGPUs(peaks[i], gpus[i])
	}
}

// withGPUs adds the GPUs that reported to p, in index order, each with the
// first GPU's memory total; nil when nothing at all reported.
func withGPUs(p *metrics.Peaks, gpus map[int]*metrics.GPUPeak) *metrics.Peaks {
	var total *float64
	if g0 := gpus[0]; g0 != nil {
		total = g0.MemoryTotalMiB
	}
	idxs := make([]int, 0, len(gpus))
	for idx := range gpus {
		idxs = append(idxs, idx)
	}
	slices.Sort(idxs)
	for _, idx := range idxs {
		g := gpus[idx]
		if g.Utilization == nil && g.MemoryUsedMiB == nil {
			continue
		}
		g.MemoryTotalMiB = total
		p.GPUs = append(p.GPUs, *g)
	}
	if p.CPUPeak == nil && p.CPUMean == nil && p.MemoryPeak == nil && p.DiskPeak == nil && len(p.GPUs) == 0 {
		return nil // the agent sent nothing
	}
	return p
}

func mean(vs []float64) float64 {
	s := 0.0
	for _, v := range vs {
		s += v
	}
	return s / float64(len(vs))
}
