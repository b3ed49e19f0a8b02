package cwpeaks_test

import (
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch/types"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/metrics"
	"github.com/skiffci/skiff/pkg/metrics/cwpeaks"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/userdata"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const ns = "Skiff/Runner"

type putFunc func(metric string, at time.Time, v float64, kv ...string)

// scenario seeds the agent's series for five jobs and returns their windows:
// A (CPU, every series, spikes before and after its window that must not
// count), B (one A10G GPU), C (agent off), D (GPU instance, GPU series
// missing), E (ended 30 s before now: within the metric lag), F (four A10Gs of which
// two reported; only the first reports the memory total).
func scenario(put putFunc, base, now time.Time, prefix string) []metrics.PeakWindow {
	each := func(from, to time.Time, fn func(at time.Time)) {
		for at := from; at.Before(to); at = at.Add(10 * time.Second) {
			fn(at)
		}
	}
	host := func(id, pool string, from, to time.Time, cpu, mem, disk func(at time.Time) float64) {
		each(from, to, func(at time.Time) {
			put("cpu_usage_active", at, cpu(at), "InstanceId", id, "Pool", pool, "cpu", "cpu-total")
			put("mem_used_percent", at, mem(at), "InstanceId", id, "Pool", pool)
			put("disk_used_percent", at, disk(at), "InstanceId", id, "Pool", pool, "path", "/", "fstype", "xfs")
		})
	}
	flat := func(v float64) func(time.Time) float64 { return func(time.Time) float64 { return v } }
	spike := func(v, peak float64, when time.Time) func(time.Time) float64 {
		return func(at time.Time) float64 {
			if at.Equal(when) {
				return peak
			}
			return v
		}
	}
	a, b, c, d, e := prefix+"a", prefix+"b", prefix+"c", prefix+"d", prefix+"e"
	// A runs 15–25 min after base: a boot spike at base+5m (inside the call's
	// range, which other jobs widen, and outside A's window) must not count;
	// CPU peak 95 at base+20m, memory peak 70 at base+18m.
	as := base.Add(15 * time.Minute)
	put("cpu_usage_active", base.Add(5*time.Minute), 100, "InstanceId", a, "Pool", "standard", "cpu", "cpu-total")
	put("cpu_usage_active", as.Add(12*time.Minute), 100, "InstanceId", a, "Pool", "standard", "cpu", "cpu-total")
	host(a, "standard", as, as.Add(10*time.Minute), spike(20, 95, as.Add(5*time.Minute)), spike(40, 70, as.Add(3*time.Minute)), flat(30))
	// B: GPU utilisation peak 97, memory peak 6246 MiB of 23028.
	bs, be := base.Add(2*time.Minute), base.Add(20*time.Minute)
	host(b, "gpu", bs, be, flat(50), flat(60), flat(45))
	each(bs, be, func(at time.Time) {
		g := []string{"InstanceId", b, "Pool", "gpu", "index", "0", "name", "NVIDIA A10G"}
		put("nvidia_smi_utilization_gpu", at, spike(80, 97, bs.Add(7*time.Minute))(at), g...)
		put("nvidia_smi_memory_used", at, spike(6000, 6246, bs.Add(9*time.Minute))(at), g...)
		put("nvidia_smi_memory_total", at, 23028, g...)
	})
	// D: a GPU instance whose GPU series never arrived.
	host(d, "gpu", base, base.Add(5*time.Minute), flat(10), flat(20), flat(30))
	// F: GPUs 0 and 2 of four report; GPU 0 alone carries the total.
	f := prefix + "f"
	fs, fe := base.Add(30*time.Minute), base.Add(40*time.Minute)
	host(f, "gpu", fs, fe, flat(70), flat(50), flat(40))
	each(fs, fe, func(at time.Time) {
		for _, idx := range []string{"0", "2"} {
			g := []string{"InstanceId", f, "Pool", "gpu", "index", idx, "name", "NVIDIA A10G"}
			put("nvidia_smi_utilization_gpu", at, 60, g...)
			put("nvidia_smi_memory_used", at, 1000, g...)
			if idx == "0" {
				put("nvidia_smi_memory_total", at, 23028, g...)
			}
		}
	})
	return []metrics.PeakWindow{
		{Key: metrics.Key{JobID: 1, RunAttempt: 1}, InstanceID: a, Pool: "standard", InstanceType: "c7i.large", Start: as, End: as.Add(10 * time.Minute)},
		{Key: metrics.Key{JobID: 2, RunAttempt: 1}, InstanceID: b, Pool: "gpu", InstanceType: "g5.xlarge", Start: bs, End: be},
		{Key: metrics.Key{JobID: 3, RunAttempt: 1}, InstanceID: c, Pool: "standard", InstanceType: "c7i.large", Start: base, End: base.Add(10 * time.Minute)},
		{Key: metrics.Key{JobID: 4, RunAttempt: 1}, InstanceID: d, Pool: "gpu", InstanceType: "g5.xlarge", Start: base, End: base.Add(5 * time.Minute)},
		{Key: metrics.Key{JobID: 5, RunAttempt: 1}, InstanceID: e, Pool: "standard", InstanceType: "c7i.large", Start: now.Add(-5 * time.Minute), End: now.Add(-30 * time.Second)},
		{Key: metrics.Key{JobID: 6, RunAttempt: 1}, InstanceID: f, Pool: "gpu", InstanceType: "g5.12xlarge", Start: fs, End: fe},
	}
}

// checkScenario checks what Read found in the scenario.
func checkScenario(t *testing.T, res metrics.PeakResult) {
	t.Helper()
	if len(res.Pending) != 1 || res.Pending[0].Key.JobID != 5 {
		t.Errorf("pending = %+v, want job 5 only (within the metric lag)", res.Pending)
	}
	pa := res.Peaks[metrics.Key{JobID: 1, RunAttempt: 1}]
	if pa == nil || pa.CPUPeak == nil || *pa.CPUPeak != 95 || *pa.MemoryPeak != 70 || *pa.DiskPeak != 30 || len(pa.GPUs) != 0 {
		t.Errorf("job A peaks = %+v", pa)
	} else if *pa.CPUMean < 20 || *pa.CPUMean > 33 {
		t.Errorf("job A mean CPU = %v", *pa.CPUMean)
	}
	pb := res.Peaks[metrics.Key{JobID: 2, RunAttempt: 1}]
	if pb == nil || len(pb.GPUs) != 1 || *pb.GPUs[0].Utilization != 97 || *pb.GPUs[0].MemoryUsedMiB != 6246 ||
		pb.GPUs[0].MemoryTotalMiB == nil || *pb.GPUs[0].MemoryTotalMiB != 23028 || pb.GPUs[0].Model != "NVIDIA A10G" {
		t.Errorf("job B peaks = %+v", pb)
	}
	if pc, ok := res.Peaks[metrics.Key{JobID: 3, RunAttempt: 1}]; !ok || pc != nil {
		t.Errorf("job C (agent off) = %+v, %v; want read and nil", pc, ok)
	}
	pd := res.Peaks[metrics.Key{JobID: 4, RunAttempt: 1}]
	if pd == nil || pd.CPUPeak == nil || len(pd.GPUs) != 0 {
		t.Errorf("job D peaks = %+v", pd)
	}
	pf := res.Peaks[metrics.Key{JobID: 6, RunAttempt: 1}]
	if pf == nil || len(pf.GPUs) != 2 || pf.GPUs[0].Index != 0 || pf.GPUs[1].Index != 2 {
		t.Fatalf("job F peaks = %+v, want GPUs 0 and 2", pf)
	}
	for _, g := range pf.GPUs {
		if g.MemoryTotalMiB == nil || *g.MemoryTotalMiB != 23028 || *g.MemoryUsedMiB != 1000 {
			t.Errorf("job F GPU %d = %+v, want 1000 of 23028 MiB (the total from GPU 0)", g.Index, g)
		}
	}
}

// TestMoto reads the scenario from moto (CloudWatch's wire protocol,
// answers written by someone else) through the real SDK, each instance's
// series in its own namespace (an instance ARN, colons and all) as the
// runners publish them. moto 5.2.1's GetMetricData drops the namespace
// filter when a query has dimensions, so isolation between namespaces is
// TestForgedSeries' (on the fake).
func TestMoto(t *testing.T) {
	t.Parallel()
	endpoint := testenv.Moto(t)
	client := testenv.CloudWatchClient(t, endpoint)
	now := time.Now().UTC().Truncate(time.Minute)
	base := now.Add(-time.Hour)
	const partition, region, account = "aws", "us-east-1", "123456789012"
	nsOf := func(id string) string {
		return names.RunnerMetricsNamespaceOf(userdata.InstanceARN(partition, region, account, id))
	}
	batches := map[string][]types.MetricDatum{}
	flush := func(ns string) {
		if len(batches[ns]) == 0 {
			return
		}
		if _, err := client.PutMetricData(t.Context(), &cloudwatch.PutMetricDataInput{Namespace: aws.String(ns), MetricData: batches[ns]}); err != nil {
			t.Fatalf("PutMetricData: %v", err)
		}
		delete(batches, ns)
	}
	putIn := func(ns, metric string, at time.Time, v float64, kv ...string) {
		var d []types.Dimension
		for i := 0; i < len(kv); i += 2 {
			d = append(d, types.Dimension{Name: aws.String(kv[i]), Value: aws.String(kv[i+1])})
		}
		batches[ns] = append(batches[ns], types.MetricDatum{MetricName: aws.String(metric), Timestamp: aws.Time(at), Value: aws.Float64(v), Dimensions: d})
		if len(batches[ns]) == 150 { // well under the 1 MB request limit
			flush(ns)
		}
	}
	put := func(metric string, at time.Time, v float64, kv ...string) {
		putIn(nsOf(kv[1]), metric, at, v, kv...) // kv[1]: the InstanceId dimension
	}
	prefix := "i-0" + now.Format("150405") + "0"
	windows := scenario(put, base, now, prefix)
	for ns := range batches {
		flush(ns)
	}
	r := cwpeaks.New(client, cwpeaks.WithAccount(partition, region, account), cwpeaks.WithClock(func() time.Time { return now }))
	res, err := r.Read(t.Context(), windows)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	checkScenario(t, res)
	if res.Calls != 1 {
		t.Errorf("%d calls, want 1 for five jobs past the metric lag", res.Calls)
	}
	if _, err := cwpeaks.New(client).Read(t.Context(), windows); !errors.Is(err, cwpeaks.ErrNoNamespace) {
		t.Errorf("a reader with no namespace: %v, want ErrNoNamespace", err)
	}
}

// TestForgedSeries: each instance publishes in its own namespace; a
// forger publishes a CPU peak of 100 under job A's InstanceId in its own
// namespace (what its role allows) and in the shared Skiff/Runner (what a
// role without the per-instance condition would allow). Job A's peak read
// with WithAccount stays 95.
func TestForgedSeries(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC)
	const partition, region, account = "aws", "eu-west-1", "123456789012"
	nsOf := func(id string) string {
		return names.RunnerMetricsNamespaceOf(userdata.InstanceARN(partition, region, account, id))
	}
	f := newFake()
	f.nsOf = nsOf
	windows := scenario(f.put, now.Add(-time.Hour), now, "i-0")
	victim := windows[0]
	at := victim.Start.Add(2 * time.Minute)
	dims := []string{"InstanceId", victim.InstanceID, "Pool", victim.Pool, "cpu", "cpu-total"}
	f.putIn(nsOf("i-0f0f0"), "cpu_usage_active", at, 100, dims...)
	f.putIn(names.RunnerMetricsNamespace, "cpu_usage_active", at, 100, dims...)
	r := cwpeaks.New(f, cwpeaks.WithAccount(partition, region, account), cwpeaks.WithClock(func() time.Time { return now }))
	res, err := r.Read(t.Context(), windows)
	if err != nil {
		t.Fatal(err)
	}
	checkScenario(t, res)
}

// TestFakeReads reads the scenario's windows from the fake: in one call,
// over pages, and not at all while they are within the metric lag.
func TestFakeReads(t *testing.T) {
	t.Parallel()
	runFakeCases(t, []fakeCase{
		{name: "every source", check: func(t *testing.T, f *fakeCW, res metrics.PeakResult, err error) {
			if err != nil {
				t.Fatal(err)
			}
			checkScenario(t, res)
			if f.calls != 1 {
				t.Errorf("calls = %d", f.calls)
			}
		}},
		{name: "pages are merged", setup: func(f *fakeCW) { f.pageQueries = 3 }, check: func(t *testing.T, f *fakeCW, res metrics.PeakResult, err error) {
			if err != nil {
				t.Fatal(err)
			}
			checkScenario(t, res)
			if f.calls < 5 || res.Calls != f.calls {
				t.Errorf("calls = %d (reported %d), want one per page", f.calls, res.Calls)
			}
		}},
		{name: "within a longer metric lag", opts: []cwpeaks.Option{cwpeaks.WithMetricLag(2 * time.Hour)}, check: func(t *testing.T, f *fakeCW, res metrics.PeakResult, err error) {
			if err != nil || f.calls != 0 || len(res.Pending) != 6 {
				t.Errorf("err %v calls %d pending %d", err, f.calls, len(res.Pending))
			}
		}},
	})
}

// TestFakeFailures reads the scenario's windows from a fake that answers
// partial data, throttles or fails: the windows concerned wait, and what
// was read before is kept.
func TestFakeFailures(t *testing.T) {
	t.Parallel()
	runFakeCases(t, []fakeCase{
		{name: "partial data that is continued is fine", setup: func(f *fakeCW) {
			f.pageQueries = 7
			f.status = statusOf("q2", types.StatusCodePartialData)
		}, check: func(t *testing.T, f *fakeCW, res metrics.PeakResult, err error) {
			// q2 is answered PartialData on its only page: its window must wait.
			if !errors.Is(err, cwpeaks.ErrPartial) {
				t.Fatalf("err = %v, want ErrPartial", err)
			}
			if len(res.Peaks) != 0 || len(res.Pending) != 6 {
				t.Errorf("peaks %d pending %d: a partial batch must be read again, not recorded", len(res.Peaks), len(res.Pending))
			}
		}},
		{name: "throttled call: its windows wait, earlier batches kept", opts: []cwpeaks.Option{cwpeaks.WithMaxQueries(8)}, setup: func(f *fakeCW) {
			f.fault = func(call int) error {
				if call == 2 {
					return throttling()
				}
				return nil
			}
		}, check: func(t *testing.T, f *fakeCW, res metrics.PeakResult, err error) {
			if err == nil {
				t.Fatal("a throttled call was not reported")
			}
			if len(res.Peaks) == 0 || len(res.Peaks)+len(res.Pending) != 6 {
				t.Errorf("peaks %d + pending %d, want every window in one of them", len(res.Peaks), len(res.Pending))
			}
			if _, ok := res.Peaks[metrics.Key{JobID: 1, RunAttempt: 1}]; !ok {
				t.Errorf("the first batch's peaks were dropped")
			}
		}},
		{name: "internal error status fails the batch", setup: func(f *fakeCW) { f.status = statusOf("q0", types.StatusCodeInternalError) }, check: func(t *testing.T, f *fakeCW, res metrics.PeakResult, err error) {
			if err == nil || len(res.Peaks) != 0 {
				t.Errorf("err %v, peaks %d", err, len(res.Peaks))
			}
		}},
	})
}

// fakeCase sets the fake up, reads the scenario's windows through it with
// opts, and checks the result.
type fakeCase struct {
	name  string
	setup func(f *fakeCW)
	opts  []cwpeaks.Option
	check func(t *testing.T, f *fakeCW, res metrics.PeakResult, err error)
}

// runFakeCases runs each case as a subtest, an hour after the scenario's
// windows began.
func runFakeCases(t *testing.T, cases []fakeCase) {
	t.Helper()
	now := time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFake()
			windows := scenario(f.put, now.Add(-time.Hour), now, "i-")
			if tc.setup != nil {
				tc.setup(f)
			}
			r := cwpeaks.New(f, append([]cwpeaks.Option{cwpeaks.WithNamespace(ns), cwpeaks.WithClock(func() time.Time { return now })}, tc.opts...)...)
			res, err := r.Read(t.Context(), windows)
			tc.check(t, f, res, err)
		})
	}
}

// statusOf is a fake status: code for the query id, the fake's own for the
// others.
func statusOf(id string, code types.StatusCode) func(string) types.StatusCode {
	return func(q string) types.StatusCode {
		if q == id {
			return code
		}
		return ""
	}
}
