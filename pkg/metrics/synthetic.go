package metrics

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/skiffci/skiff/pkg/provider/ec2/ec2prices"
)

// Synthetic returns n built (and so valid) records from a seeded generator,
// for golden tests, benchmarks and demos of `skiff metrics`: a few
// repositories, workflows and pools, CPU and GPU jobs, spot and on-demand,
// some with the agent off, some interrupted, spread over 30 days from start.
func Synthetic(seed uint64, n int, start time.Time) []Record {
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	type shape struct {
		repo, workflow, job, pool, itype string
		cpu, mem, gpuMiB                 float64
		minutes                          float64
	}
	shapes := []shape{
		{"acme/api", "CI", "test", "standard", "c7i.large", 85, 55, 0, 12},
		{"acme/api", "CI", "lint", "standard", "c7i.large", 40, 20, 0, 3},
		{"acme/web", "Build", "bundle", "large", "c7i.4xlarge", 30, 18, 0, 20},
		{"acme/ml", "Train", "fit", "gpu", "g5.2xlarge", 60, 35, 6246, 45},
		{"acme/ml", "Eval", "eval", "gpu", "g6e.xlarge", 50, 40, 30000, 25},
		{"acme/infra", "Nightly", "arm-build", "arm", "c7g.xlarge", 90, 70, 0, 30},
	}
	out := make([]Record, 0, n)
	for i := range n {
		s := shapes[rng.IntN(len(shapes))]
		queued := start.Add(time.Duration(rng.Float64() * 30 * 24 * float64(time.Hour))).Truncate(time.Second)
		startedAt := queued.Add(time.Duration(20+rng.IntN(100)) * time.Second)
		runtime := time.Duration(s.minutes*(0.5+rng.Float64())*60) * time.Second
		capacity := CapacitySpot
		if rng.IntN(4) == 0 {
			capacity = CapacityOnDemand
		}
		inst := InstanceInput{ID: fmt.Sprintf("i-%08x", i), Type: s.itype, Region: "us-east-1", Zone: "us-east-1b", Capacity: capacity,
			LaunchedAt: queued.Add(5 * time.Second), StartKind: StartCold,
			// Derived from i, not drawn, so that the other fields stay as
			// they were before records had a start.
			ReservedAt:   queued.Add(time.Duration(300+i*37%900) * time.Millisecond),
			RegisteredAt: startedAt.Add(-time.Duration(2+i%5) * time.Second)}
		j := JobInput{ID: int64(1_000_000 + i), RunID: int64(500_000 + i/3), Attempt: 1 + rng.IntN(10)/9, Repository: s.repo,
			Pool: s.pool, WorkflowName: s.workflow, JobName: s.job, Conclusion: "success", QueuedAt: queued, StartedAt: startedAt,
			CompletedAt: startedAt.Add(runtime), RunnerName: fmt.Sprintf("skiff-%d", i)}
		if rng.IntN(50) == 0 && capacity == CapacitySpot {
			inst.Interrupted, inst.EndedAt, j.CompletedAt, j.Conclusion = true, startedAt.Add(runtime/2), time.Time{}, ""
		} else {
			inst.EndedAt = j.CompletedAt.Add(10 * time.Second)
		}
		jitter := func(v float64) *float64 { x := v * (0.6 + 0.5*rng.Float64()); return &x }
		pctJitter := func(v float64) *float64 { return ptr(min(*jitter(v), 100)) }
		var peaks *Peaks
		if rng.IntN(20) != 0 {
			peaks = &Peaks{CPUPeak: pctJitter(s.cpu), CPUMean: pctJitter(s.cpu / 2), MemoryPeak: pctJitter(s.mem), DiskPeak: pctJitter(30)}
			if s.gpuMiB > 0 {
				total := 23028.0
				if s.itype == "g6e.xlarge" {
					total = 46068
				}
				peaks.GPUs = []GPUPeak{{Index: 0, Utilization: pctJitter(80), MemoryUsedMiB: jitter(s.gpuMiB), MemoryTotalMiB: &total}}
			}
		}
		r, err := Build(Inputs{Job: j, Run: RunInput{ID: j.RunID, Event: []string{"push", "pull_request", "schedule"}[rng.IntN(3)]},
			Instance: inst, CloudProvider: "aws", Peaks: peaks, Prices: ec2prices.Prices})
		if err != nil {
			panic(fmt.Sprintf("synthetic record %d: %v", i, err))
		}
		out = append(out, r)
	}
	return out
}
