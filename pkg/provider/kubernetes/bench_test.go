package kubernetes_test

import (
	"context"
	"log/slog"
	"strconv"
	"testing"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provider"
	kube "github.com/skiffci/skiff/pkg/provider/kubernetes"
	"github.com/skiffci/skiff/pkg/provider/providertest"
)

func benchEnv(b *testing.B) *env {
	k := newCluster(b)
	ns := k.namespace(b, true)
	client, n := clientFor(b, k.c, testenv.KubeUser)
	p, err := kube.New(kube.Options{Client: client, Namespaces: []string{ns}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	return &env{k: k, ns: ns, p: p, calls: n, sections: map[string]*pool.Kubernetes{"cpu": {Namespace: ns, Image: image,
		Requests: pool.Resources{CPU: "1", Memory: "2Gi"}, SecurityContext: pool.SecurityContext{RunAsNonRoot: true}}}}
}

// BenchmarkList1000 lists 1,000 runner Pods from the real API server, page
// by page (500 a page): API calls per pass and this process's CPU time per
// pass (decoding and converting; the API server's own work is another
// process's). Target: 1 List (plus pages) per pass, ≤ 2 s CPU.
func BenchmarkList1000(b *testing.B) {
	e := benchEnv(b)
	const pods, batch = 1000, 50
	s := e.spec("cpu")
	for i := 0; i < pods; i += batch {
		l := provider.Launch{Token: "tok-bench-" + strconv.Itoa(i), Spec: s}
		var regs []provider.Registration
		for j := range batch {
			name := "bench-" + strconv.Itoa(i+j)
			l.Runners = append(l.Runners, provider.RunnerRequest{Name: name, JobID: int64(i + j)})
			regs = append(regs, provider.Registration{Mode: provider.ModeJIT, JITConfig: "CANARYJIT-" + name, RunnerName: name})
		}
		_, res := providertest.PlanAndLaunch(b, e.p, l, regs)
		for _, r := range res.Runners {
			if r.Err != nil {
				b.Fatal(r.Err)
			}
		}
	}
	launchCalls := e.calls.Total()
	e.calls.Take()
	b.ResetTimer()
	start := testenv.CPUTime()
	for range b.N {
		all, err := e.p.List(context.Background(), provider.Filter{Pool: "cpu"})
		if err != nil || len(all) != pods {
			b.Fatalf("List: %d pods, %v", len(all), err)
		}
	}
	cpu := testenv.CPUTime() - start
	b.StopTimer()
	b.ReportMetric(float64(launchCalls)/pods, "calls/runner")
	b.ReportMetric(float64(e.calls.Total())/float64(b.N), "calls/pass")
	b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/pass")
}
