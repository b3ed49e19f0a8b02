package cwpeaks_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/metrics"
	"github.com/skiffci/skiff/pkg/metrics/cwpeaks"
)

// BenchmarkRead1000Jobs reads the peaks of 1,000 finished jobs (70 % CPU,
// 25 % one-GPU, 5 % four-GPU, up to an hour each, ended over the last 30
// minutes) from a counting fake and reports GetMetricData calls per job.
func BenchmarkRead1000Jobs(b *testing.B) {
	now := time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC)
	f := newFake()
	var windows []metrics.PeakWindow
	for i := range 1000 {
		itype, pool := "c7i.large", "standard"
		switch {
		case i%20 == 0:
			itype, pool = "g4dn.12xlarge", "gpu4"
		case i%4 == 1:
			itype, pool = "g6.xlarge", "gpu"
		}
		end := now.Add(-3*time.Minute - time.Duration(i%30)*time.Minute)
		start := end.Add(-time.Duration(5+i%55) * time.Minute)
		id := fmt.Sprintf("i-%05d", i)
		f.put("cpu_usage_active", start.Add(time.Minute), float64(i%100), "InstanceId", id, "Pool", pool, "cpu", "cpu-total")
		windows = append(windows, metrics.PeakWindow{Key: metrics.Key{JobID: int64(i + 1), RunAttempt: 1}, InstanceID: id, Pool: pool, InstanceType: itype, Start: start, End: end})
	}
	r := cwpeaks.New(f, cwpeaks.WithNamespace(ns), cwpeaks.WithClock(func() time.Time { return now }))
	b.ReportAllocs()
	var calls int
	for b.Loop() {
		res, err := r.Read(b.Context(), windows)
		if err != nil || len(res.Peaks) != 1000 {
			b.Fatalf("err %v, %d peaks", err, len(res.Peaks))
		}
		calls = res.Calls
	}
	b.ReportMetric(float64(calls)/1000, "calls/job")
}
