package process_test

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/provider/process"
	"github.com/skiffci/skiff/pkg/provider/providertest"
)

// BenchmarkRunnerStart measures what a runner's sandbox costs: each
// iteration launches one runner running true and waits for its end. It
// reports the p50 and p95 of the launch (Plan and Launch: the process
// started and, sandboxed, its namespaces made) and of the whole life (to
// Wait's return: the sandbox's mounts, true, the teardown and the
// directory's removal), sandboxed and opted out.
func BenchmarkRunnerStart(b *testing.B) {
	for _, sandboxed := range []bool{false, true} {
		b.Run(map[bool]string{true: "sandboxed", false: "unsandboxed"}[sandboxed], func(b *testing.B) {
			if sandboxed {
				if err := process.CheckSandbox(""); err != nil {
					b.Skipf("no sandbox here: %v", err)
				}
			}
			p, err := process.New(process.Options{Command: []string{"true"}, DataDir: b.TempDir(), DefaultLimit: 1,
				Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close(context.Background())
			spec := pool.Spec{Shared: pool.Shared{Pool: "bench", Backend: pool.BackendProcess}, Process: &pool.Process{}}
			if !sandboxed {
				spec.Process.Sandbox = pool.SandboxNone
			}
			ctx := context.Background()
			launch, life := make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				start := time.Now()
				token := "tok-" + strconv.Itoa(i)
				_, res := providertest.PlanAndLaunch(b, p, provider.Launch{Token: token, Spec: spec, Runners: []provider.RunnerRequest{{Name: token}}},
					[]provider.Registration{{Mode: provider.ModeJIT, JITConfig: "x", RunnerName: token}})
				launch = append(launch, time.Since(start))
				if code, err := p.Wait(ctx, res.Runners[0].Instance.ID); err != nil || code != 0 {
					b.Fatalf("runner: exit %d, %v", code, err)
				}
				life = append(life, time.Since(start))
			}
			b.StopTimer()
			for _, m := range []struct {
				name string
				d    []time.Duration
			}{{"launch", launch}, {"life", life}} {
				slices.Sort(m.d)
				b.ReportMetric(float64(m.d[len(m.d)/2].Microseconds())/1000, m.name+"-p50-ms")
				b.ReportMetric(float64(m.d[len(m.d)*95/100].Microseconds())/1000, m.name+"-p95-ms")
			}
		})
	}
}
