// Package recordstest is the conformance suite of metrics.Records: the
// in-memory store and the DynamoDB store both run it, so that exactly-once
// writes, validation before every write and filtering cannot drift apart.
package recordstest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/metrics"
)

// Now is the instant the suite treats as the present.
var Now = time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC)

// Record returns a valid record for job id and attempt, ended at end.
func Record(id int64, attempt int, end time.Time) metrics.Record {
	start := end.Add(-10 * time.Minute)
	peak, mean := 80.0, 30.0
	interrupted := false
	return metrics.Record{
		Version: metrics.SchemaVersion, Repository: "acme/api", Owner: "acme", WorkflowName: "CI", Trigger: "push",
		CloudProvider: "aws", InstanceType: "c7i.large", Runtime: metrics.Duration(10 * time.Minute),
		JobID: id, RunID: 9000 + id, RunAttempt: attempt, Pool: "standard", CapacityType: metrics.CapacitySpot,
		StartedAt: &start, CompletedAt: &end, Interrupted: &interrupted,
		CPU: &metrics.CPU{PeakPercent: &peak, MeanPercent: &mean}, MissingSources: []string{metrics.SourceGPU},
	}
}

// Run runs the suite. newRecords returns an empty store for one test.
func Run(t *testing.T, newRecords func(t *testing.T) metrics.Records) {
	t.Run("PutOnce", func(t *testing.T) { t.Parallel(); testPutOnce(t, newRecords(t)) })
	t.Run("Attempts", func(t *testing.T) { t.Parallel(); testAttempts(t, newRecords(t)) })
	t.Run("Invalid", func(t *testing.T) { t.Parallel(); testInvalid(t, newRecords(t)) })
	t.Run("Filter", func(t *testing.T) { t.Parallel(); testFilter(t, newRecords(t)) })
	t.Run("Concurrent", func(t *testing.T) { t.Parallel(); testConcurrent(t, newRecords(t)) })
	t.Run("RoundTrip", func(t *testing.T) { t.Parallel(); testRoundTrip(t, newRecords(t)) })
	t.Run("RoundTripLocal", func(t *testing.T) { t.Parallel(); testRoundTripLocal(t, newRecords(t)) })
	t.Run("RoundTripSlurm", func(t *testing.T) { t.Parallel(); testRoundTripSlurm(t, newRecords(t)) })
	t.Run("Canceled", func(t *testing.T) { t.Parallel(); testCanceled(t, newRecords(t)) })
}

// List lists the records f matches, sorted by job id and attempt; a
// failed listing fails the test.
func List(t *testing.T, s metrics.Records, f metrics.Filter) []metrics.Record {
	t.Helper()
	var out []metrics.Record
	for r, err := range s.List(t.Context(), f) {
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b metrics.Record) int {
		if a.JobID != b.JobID {
			return int(a.JobID - b.JobID)
		}
		return a.RunAttempt - b.RunAttempt
	})
	return out
}

func testPutOnce(t *testing.T, s metrics.Records) {
	ctx := t.Context()
	first := Record(1, 1, Now)
	if err := s.Put(ctx, first); err != nil {
		t.Fatalf("first Put: %v", err)
	}
	second := Record(1, 1, Now)
	second.Conclusion = "failure"
	second.InstanceType = "m7i.large"
	if err := s.Put(ctx, second); !errors.Is(err, metrics.ErrExists) {
		t.Fatalf("second Put = %v, want ErrExists", err)
	}
	got := List(t, s, metrics.Filter{})
	if len(got) != 1 || got[0].InstanceType != "c7i.large" || got[0].Conclusion != "" {
		t.Fatalf("after a duplicate Put: %+v", got)
	}
}

func testAttempts(t *testing.T, s metrics.Records) {
	for attempt := 1; attempt <= 3; attempt++ {
		if err := s.Put(t.Context(), Record(5, attempt, Now)); err != nil {
			t.Fatalf("attempt %d: %v", attempt, err)
		}
	}
	if got := List(t, s, metrics.Filter{}); len(got) != 3 || got[2].RunAttempt != 3 {
		t.Fatalf("three attempts of one job: %d records", len(got))
	}
}

func testInvalid(t *testing.T, s metrics.Records) {
	bad := Record(2, 1, Now)
	bad.Repository = "no-owner"
	if err := s.Put(t.Context(), bad); !errors.Is(err, metrics.ErrInvalid) {
		t.Fatalf("Put(invalid) = %v, want ErrInvalid", err)
	}
	if got := List(t, s, metrics.Filter{}); len(got) != 0 {
		t.Fatalf("an invalid record was written: %+v", got)
	}
	// The key stays free for the valid record.
	if err := s.Put(t.Context(), Record(2, 1, Now)); err != nil {
		t.Fatalf("Put after a refused record: %v", err)
	}
}

func testFilter(t *testing.T, s metrics.Records) {
	ctx := t.Context()
	a := Record(10, 1, Now.Add(-48*time.Hour))
	b := Record(11, 1, Now)
	b.Repository, b.WorkflowName, b.Pool, b.InstanceType = "acme/web", "Deploy", "gpu", "g6.xlarge"
	for _, r := range []metrics.Record{a, b} {
		if err := s.Put(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name string
		f    metrics.Filter
		want []int64
	}{
		{"all", metrics.Filter{}, []int64{10, 11}},
		{"since", metrics.Filter{Since: Now.Add(-time.Hour)}, []int64{11}},
		{"since, inclusive", metrics.Filter{Since: Now.Add(-48 * time.Hour)}, []int64{10, 11}},
		{"repository, any case", metrics.Filter{Repository: "ACME/web"}, []int64{11}},
		{"workflow", metrics.Filter{Workflow: "CI"}, []int64{10}},
		{"pool", metrics.Filter{Pool: "gpu"}, []int64{11}},
		{"instance type", metrics.Filter{InstanceType: "c7i.large"}, []int64{10}},
		{"nothing", metrics.Filter{Pool: "arm"}, nil},
	}
	for _, tc := range cases {
		var ids []int64
		for _, r := range List(t, s, tc.f) {
			ids = append(ids, r.JobID)
		}
		if !slices.Equal(ids, tc.want) {
			t.Errorf("%s: ids %v, want %v", tc.name, ids, tc.want)
		}
	}
}

// testConcurrent: duplicate events and reconciler re-runs racing to write
// the same job's record produce exactly one record.
func testConcurrent(t *testing.T, s metrics.Records) {
	const writers = 8
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for i := range writers {
		wg.Go(func() {
			r := Record(20, 1, Now)
			r.RunnerName = fmt.Sprintf("writer-%d", i)
			errs <- s.Put(context.Background(), r)
		})
	}
	wg.Wait()
	close(errs)
	ok := 0
	for err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, metrics.ErrExists):
			t.Errorf("Put: %v", err)
		}
	}
	if got := List(t, s, metrics.Filter{}); ok != 1 || len(got) != 1 {
		t.Fatalf("%d writers succeeded, %d records; want exactly one", ok, len(got))
	}
}

func testRoundTrip(t *testing.T, s metrics.Records) {
	r := Record(30, 2, Now)
	gib, used := 2.5, 6000.0
	r.Memory = &metrics.Memory{PeakGiB: &gib}
	r.GPU = &metrics.GPUTotals{Count: 1, Model: "l4", GPUPeaks: metrics.GPUPeaks{PeakMemoryMiB: &used}}
	r.Labels = []string{"self-hosted", "gpu"}
	if err := s.Put(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	got := List(t, s, metrics.Filter{})
	if len(got) != 1 {
		t.Fatalf("%d records", len(got))
	}
	g := got[0]
	if *g.Memory.PeakGiB != 2.5 || g.Memory.PeakPercent != nil || *g.GPU.PeakMemoryMiB != 6000 || !slices.Equal(g.Labels, r.Labels) ||
		!g.CompletedAt.Equal(*r.CompletedAt) || g.Runtime != r.Runtime || g.Version != metrics.SchemaVersion {
		t.Fatalf("round trip changed the record: %+v", g)
	}
}

// testRoundTripLocal keeps what a local record adds: the host, the CPU
// time, an operator's rate.
func testRoundTripLocal(t *testing.T, s metrics.Records) {
	r := Record(31, 1, Now)
	r.CloudProvider, r.InstanceType, r.CapacityType = "local", "local", metrics.CapacityOnDemand
	secs, mem, gpus := 290.5, 15.6, 1
	r.CPU.Seconds = &secs
	r.Host = &metrics.Host{CPUModel: "AMD EPYC 7R13 Processor", CPUs: 16, MemoryGiB: &mem, GPUModel: "NVIDIA L4", GPUs: &gpus}
	r.Cost = &metrics.Cost{EstimatedUSD: 0.125, HourlyUSD: 0.75, CapacityType: metrics.CapacityOnDemand, Basis: metrics.BasisOperatorRate,
		PriceTableDate: "2026-11-02", Estimate: true}
	if err := s.Put(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	got := List(t, s, metrics.Filter{InstanceType: "local"})
	if len(got) != 1 {
		t.Fatalf("%d records", len(got))
	}
	g := got[0]
	h := g.Host
	if h == nil || h.CPUModel != r.Host.CPUModel || h.CPUs != 16 || h.MemoryGiB == nil || *h.MemoryGiB != mem || h.GPUModel != "NVIDIA L4" ||
		h.GPUs == nil || *h.GPUs != 1 || g.CPU.Seconds == nil || *g.CPU.Seconds != secs || g.Cost == nil || g.Cost.Basis != metrics.BasisOperatorRate {
		t.Fatalf("round trip changed the local record: %+v (host %+v)", g, g.Host)
	}
}

// testRoundTripSlurm keeps what a Slurm record adds: where the job ran
// and its allocation.
func testRoundTripSlurm(t *testing.T, s metrics.Records) {
	r := Record(32, 1, Now)
	r.CloudProvider, r.InstanceType, r.Region, r.Zone = "slurm", "gpu", "", "hpc"
	mem, gpus := 16.0, 2
	r.Host = &metrics.Host{CPUs: 4, MemoryGiB: &mem, GPUs: &gpus}
	r.Slurm = &metrics.Slurm{Cluster: "hpc", Partition: "gpu", Nodes: "node[07-08]", JobID: "4242", State: "TIMEOUT"}
	if err := s.Put(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	got := List(t, s, metrics.Filter{InstanceType: "gpu"})
	if len(got) != 1 {
		t.Fatalf("%d records", len(got))
	}
	if g := got[0]; g.Slurm == nil || *g.Slurm != *r.Slurm || g.Host == nil || g.Host.CPUs != 4 || g.CloudProvider != "slurm" {
		t.Fatalf("round trip changed the Slurm record: %+v (slurm %+v)", g, g.Slurm)
	}
}

func testCanceled(t *testing.T, s metrics.Records) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := s.Put(ctx, Record(40, 1, Now)); !errors.Is(err, context.Canceled) {
		t.Errorf("Put with a canceled context = %v", err)
	}
}
