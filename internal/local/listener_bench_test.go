package local_test

import (
	"bufio"
	"encoding/json"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skiffci/skiff/internal/local"
	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/github/ghsim"
)

// gitHubCalls sums the simulator's requests that reach GitHub's API or
// the Actions service (not the runners' own broker calls).
func gitHubCalls(counts map[string]int) int {
	n := 0
	for op, c := range counts {
		if !strings.Contains(op, "/_sim/") {
			n += c
		}
	}
	return n
}

// BenchmarkListenerLaunch measures the listener's path on the simulator
// with the process provider and stand-in runners: from a job queued (one
// job at a time, each run to its end) to its runner process launched,
// p50 and p95, and the GitHub calls per job (every call: the long polls,
// acknowledgements, acquires, JIT configurations, run reads and the
// reconciler's passes over the run). SKIFF_BENCH_JOBS sets the number of
// jobs (default 20), SKIFF_BENCH_BURST how many are queued at once, in
// one run (default 1); SKIFF_BENCH_NUMERIC=1 has the messages carry the
// workflow job ids (older services) instead of the service's opaque ids
// (github.com's, matched through the run's jobs).
func BenchmarkListenerLaunch(b *testing.B) {
	jobs := 20
	if v, err := strconv.Atoi(os.Getenv("SKIFF_BENCH_JOBS")); err == nil && v > 0 {
		jobs = v
	}
	burst := 1
	if v, err := strconv.Atoi(os.Getenv("SKIFF_BENCH_BURST")); err == nil && v > 0 {
		burst = v
	}
	standin := buildStandin(b, b.TempDir())
	for range b.N {
		sim, pemKey := testenv.GitHubApp(b, "CANARYBENCH")
		if os.Getenv("SKIFF_BENCH_NUMERIC") == "1" {
			sim.SetScaleSetOptions(ghsim.ScaleSetOptions{NumericJobIDs: true})
		}
		l, logs, stop := startLocal(b, sim, pemKey, listenerPools, local.Config{
			RunnerCommand: []string{standin}, RunnerEnv: []string{"SKIFF_STANDIN_DURATION=50ms"}, Limits: map[string]int{"cpu": 4},
		})
		waitOpen(b, sim)
		start := sim.RequestCounts()
		before := gitHubCalls(start)
		queuedAt := map[int64]time.Time{}
		for done := 0; done < jobs; done += burst {
			spec := ghsim.RunSpec{Repo: "acme/app"}
			for range min(burst, jobs-done) {
				spec.Jobs = append(spec.Jobs, ghsim.JobSpec{Labels: cpuLabels})
			}
			t0 := time.Now()
			run, err := sim.StartRun(spec)
			if err != nil {
				b.Fatal(err)
			}
			for _, id := range run.JobIDs {
				queuedAt[id] = t0
			}
			for completedJobs(sim, run.JobIDs) != len(run.JobIDs) {
				time.Sleep(5 * time.Millisecond) // polling another process's progress
			}
		}
		end := sim.RequestCounts()
		calls := gitHubCalls(end) - before
		for op, n := range end {
			if d := n - start[op]; d > 0 && !strings.Contains(op, "/_sim/") {
				b.Logf("%s: %.2f per job", op, float64(d)/float64(jobs))
			}
		}
		if err := stop(); err != nil {
			b.Fatal(err)
		}
		var lat []time.Duration
		sc := bufio.NewScanner(strings.NewReader(logs.String()))
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			var line struct {
				Msg   string    `json:"msg"`
				Time  time.Time `json:"time"`
				JobID int64     `json:"job_id"`
			}
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "launched a runner process" {
				if t0, ok := queuedAt[line.JobID]; ok {
					lat = append(lat, line.Time.Sub(t0))
				}
			}
		}
		if len(lat) != jobs {
			b.Fatalf("%d launches for %d jobs", len(lat), jobs)
		}
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(lat[(len(lat)*95+99)/100-1].Microseconds())/1000, "p95-ms")
		b.ReportMetric(float64(calls)/float64(jobs), "calls/job")
		_ = l
	}
}

// waitOpen waits until acme's scale set has its session.
func waitOpen(tb testing.TB, sim *ghsim.Server) {
	tb.Helper()
	for {
		if ss := sim.ScaleSets("acme"); len(ss) == 1 && ss[0].Session != "" {
			return
		}
		time.Sleep(5 * time.Millisecond) // polling another goroutine's progress
	}
}

// BenchmarkListenerIdle counts an idle daemon's GitHub calls: skiff local
// with one listener pool, no job, GitHub's 50-second long poll and the
// reconciler every minute, for SKIFF_BENCH_IDLE of wall time, reported
// per hour. The default, 10 s, keeps `make test`'s single run short and
// says little: performance.md's figure is measured over 3 minutes.
func BenchmarkListenerIdle(b *testing.B) {
	idle := 10 * time.Second
	if v, err := time.ParseDuration(os.Getenv("SKIFF_BENCH_IDLE")); err == nil && v > 0 {
		idle = v
	}
	for range b.N {
		sim, pemKey := testenv.GitHubApp(b, "CANARYIDLE")
		_, _, stop := startLocal(b, sim, pemKey, listenerPools, local.Config{Provider: "dry-run"})
		waitOpen(b, sim)
		before := sim.RequestCounts()
		time.Sleep(idle) // the measurement's window
		after := sim.RequestCounts()
		if err := stop(); err != nil {
			b.Fatal(err)
		}
		for op, n := range after {
			if d := n - before[op]; d > 0 {
				b.Logf("%s: %d in %s", op, d, idle)
			}
		}
		b.ReportMetric(float64(gitHubCalls(after)-gitHubCalls(before))*float64(time.Hour)/float64(idle), "calls/hour")
	}
}
