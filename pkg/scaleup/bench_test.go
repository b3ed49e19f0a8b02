package scaleup_test

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/queue"
)

// Realistic per-call latencies of the fakes, from field measurements:
// CreateFleet (instant) answers in about a second; CreateTags in a couple
// of hundred milliseconds; generate-jitconfig in a few hundred
// milliseconds; other GitHub REST calls in about 100 ms.
const (
	benchFleetLatency  = time.Second
	benchTagLatency    = 200 * time.Millisecond
	benchJITLatency    = 300 * time.Millisecond
	benchGitHubLatency = 100 * time.Millisecond
	// benchConcurrency is how many batches run at once, as concurrent Lambda
	// invocations of the SQS event source would.
	benchConcurrency = 25
	benchJobs        = 1000
	benchBatch       = 10
)

var allOps = []string{
	ghsim.OpCreateInstallationToken, ghsim.OpGetOrgInstallation, ghsim.OpGetRepoInstallation,
	ghsim.OpGenerateOrgJITConfig, ghsim.OpGenerateRepoJITConfig, ghsim.OpListRunnerGroups,
	ghsim.OpCreateOrgRegToken, ghsim.OpCreateRepoRegToken, ghsim.OpGetJob,
}

// BenchmarkScaleUp1000 launches 1,000 queued jobs in batches of 10, with
// realistic latencies in the EC2 fake and the GitHub simulator, and reports
// per runner: GitHub calls, CreateFleet calls, CreateTags calls (per-job
// tags of shared fleets), store item writes (claims, fleet records,
// counters, registration items); and per batch:
// process CPU time (user+system, which includes the in-process simulators,
// so it is an upper bound of the function's own) and wall time.
func BenchmarkScaleUp1000(b *testing.B) {
	for _, mode := range []string{"jit", "token"} {
		b.Run(string(mode), func(b *testing.B) {
			for range b.N {
				benchOnce(b, mode)
			}
		})
	}
}

func benchOnce(b *testing.B, mode string) {
	b.StopTimer()
	e := newEnv(b, nil)
	var labels []string
	if mode == "token" {
		labels = tokenLabels
	}
	e.ec2.SetLatency(benchFleetLatency)
	e.ec2.SetOpLatency("CreateTags", benchTagLatency)
	for _, op := range allOps {
		e.sim.SetFault(op, ghsim.Fault{Latency: benchGitHubLatency})
	}
	e.sim.SetFault(ghsim.OpGenerateOrgJITConfig, ghsim.Fault{Latency: benchJITLatency})
	batches := make(chan []queue.Delivery, benchJobs/benchBatch)
	for i := int64(0); i < benchJobs; i += benchBatch {
		batches <- jobs(10_000+i, benchBatch, labels...)
	}
	close(batches)
	var mu sync.Mutex
	var walls []time.Duration
	failures := 0
	cpu0 := testenv.CPUTime()
	b.StartTimer()
	var wg sync.WaitGroup
	for range benchConcurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for msgs := range batches {
				t0 := time.Now()
				r := e.handle(context.Background(), e.svc, msgs...)
				mu.Lock()
				walls = append(walls, time.Since(t0))
				failures += len(r.BatchItemFailures)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	cpu := testenv.CPUTime() - cpu0
	runners := len(e.ec2.Live())
	if runners != benchJobs || failures != 0 {
		b.Fatalf("launched %d runners with %d failures, want %d and 0", runners, failures, benchJobs)
	}
	gh := 0
	for _, op := range allOps {
		gh += e.sim.Requests(op)
	}
	writes := e.store.Writes() + e.ledger.Writes() + e.regs.puts
	var wall time.Duration
	for _, w := range walls {
		wall += w
	}
	nb := float64(len(walls))
	b.ReportMetric(float64(gh)/float64(runners), "github-calls/runner")
	b.ReportMetric(float64(e.ec2.Calls("CreateFleet"))/float64(runners), "createfleet/runner")
	b.ReportMetric(float64(e.ec2.Calls("CreateTags"))/float64(runners), "createtags/runner")
	b.ReportMetric(float64(writes)/float64(runners), "store-writes/runner")
	b.ReportMetric(float64(cpu.Microseconds())/1000/nb, "cpu-ms/batch")
	b.ReportMetric(float64(wall.Milliseconds())/nb, "wall-ms/batch")
	b.StartTimer()
}

// benchStartLatency is StartInstances' answer time: 0.7 s, the latency
// model's p50 (docs/performance.md, Start time).
const benchStartLatency = 700 * time.Millisecond

// BenchmarkWarmStart is scale-up's part of a job's start by kind: one
// queued job of the warm pool handled with the bench latencies, from the
// delivery to the runner launched (cold: the fleet call; stopped: its end
// record, tags and StartInstances; hot: its end record and tags; each with
// the claim, the reservation, the JIT registration and the registration
// item). It reports the p50 and p95 wall time per job and the calls.
func BenchmarkWarmStart(b *testing.B) {
	for _, kind := range []string{"cold", "stopped", "hot"} {
		b.Run(kind, func(b *testing.B) {
			e := newEnv(b, nil)
			var walls []time.Duration
			for i := range b.N {
				b.StopTimer()
				if kind != "cold" {
					e.readyWarm(pool.WarmKind(kind), strconv.Itoa(i))
				}
				e.ec2.SetLatency(benchFleetLatency)
				e.ec2.SetOpLatency("CreateTags", benchTagLatency)
				e.ec2.SetOpLatency("StartInstances", benchStartLatency)
				e.sim.SetFault(ghsim.OpGenerateOrgJITConfig, ghsim.Fault{Latency: benchJITLatency})
				msg := message(job(int64(50_000+i), warmLabels...), 1)
				b.StartTimer()
				t0 := time.Now()
				r := e.handle(context.Background(), e.svc, msg)
				walls = append(walls, time.Since(t0))
				b.StopTimer()
				if len(r.BatchItemFailures) != 0 {
					b.Fatalf("failures: %+v", r)
				}
				if got := e.jobRunner(int64(50_000 + i)).StartKind; got != kind {
					b.Fatalf("job started %s, want %s", got, kind)
				}
				// The next iteration's warm launch is the reconciler's, not timed: no latency.
				e.ec2.SetLatency(0)
				e.ec2.SetOpLatency("CreateTags", 0)
				e.ec2.SetOpLatency("StartInstances", 0)
				// Free the pool's slot for the next job.
				if _, err := e.ledger.End(context.Background(), names.RunnerName("", int64(50_000+i), 1), e.clock.now(), "done"); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			slices.Sort(walls)
			b.ReportMetric(float64(walls[len(walls)/2].Milliseconds()), "p50-ms/job")
			b.ReportMetric(float64(walls[(len(walls)*95)/100].Milliseconds()), "p95-ms/job")
		})
	}
}
