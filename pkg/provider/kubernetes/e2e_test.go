package kubernetes_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/internal/wiring"
	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/metrics"
	"github.com/skiffci/skiff/pkg/provider"
	kube "github.com/skiffci/skiff/pkg/provider/kubernetes"
	"github.com/skiffci/skiff/pkg/provider/kubernetes/kubelettest"
)

const e2ePools = `version: 1
pools:
  - name: cpu
    labels: [self-hosted, linux, x64]
    instanceTypes: [c7i.large]
    image: {ssm: /aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64}
    subnets: [subnet-0aaaaaaaa]
    maxRunners: 20
`

func build(t *testing.T, pkg string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), filepath.Base(pkg))
	if b, err := exec.Command("go", "build", "-o", out, pkg).CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", pkg, err, b)
	}
	return out
}

// TestLocalKubernetes is `skiff local --provider kubernetes` end to end:
// the GitHub simulator's signed webhooks reach local mode, which launches
// a Pod per job on the real API server; the test kubelet binds and runs
// each with skiff-podhelper around the stand-in runner, which takes its
// job and completes it. The first Pod is evicted before its runner starts:
// its job must get a replacement. Every job completes, with one metrics
// record each.
func TestLocalKubernetes(t *testing.T) {
	t.Parallel()
	k := newCluster(t)
	ns := k.namespace(t, true)
	helper, standin := build(t, "github.com/skiffci/skiff/cmd/skiff-podhelper"), build(t, "github.com/skiffci/skiff/cmd/skiff-standin")
	kl := kubelettest.Start(t, kubelettest.Options{Client: k.admin, Namespace: ns, Node: "node-" + ns, Helper: helper, Runner: standin,
		Env: []string{"SKIFF_STANDIN_DURATION=200ms"}})
	kl.EvictNext(1)

	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pemKey := string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))
	sim := ghsim.New(ghsim.Options{SecretPrefix: "CANARYKUBE"})
	t.Cleanup(sim.Close)
	sim.AddApp(ghsim.AppConfig{ID: 77, Slug: "skiff", PublicKey: &key.PublicKey})
	sim.AddOrg("acme")
	sim.AddRepo("acme", "app")
	sim.Install(77, "acme")

	client, _ := clientFor(t, k.c, testenv.KubeUser)
	logs := &testenv.SyncBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	p, err := kube.New(kube.Options{Client: client, Default: kube.Pool{Namespace: ns, Image: image}, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	poolsFile := filepath.Join(dir, "pools.yaml")
	if err := os.WriteFile(poolsFile, []byte(e2ePools), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := wiring.NewLocal(wiring.LocalConfig{
		DataDir: filepath.Join(dir, "data"), PoolsFile: poolsFile, Listen: "127.0.0.1:0", Provider: "kubernetes", ExternalProvider: p,
		GitHubAPIURL: sim.URL(), AppIDs: []int64{77}, AppKeys: pemKey, WebhookSecret: "kube-secret", Allow: []string{"acme"},
		Installations: []string{"*"}, MetricsRecords: true, ReconcileEvery: time.Second,
	}, log)
	if err != nil {
		t.Fatal(err)
	}
	sim.SetWebhook(77, l.URL(), "kube-secret")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()

	const jobs = 4
	labels := []string{"self-hosted", "linux", "x64"}
	spec := ghsim.RunSpec{Repo: "acme/app"}
	for range jobs {
		spec.Jobs = append(spec.Jobs, ghsim.JobSpec{Labels: labels})
	}
	run, err := sim.StartRun(spec)
	if err != nil {
		t.Fatal(err)
	}
	// A safety net, not a measurement: the test fails on what it finds.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		completed := 0
		for _, id := range run.JobIDs {
			if j, ok := sim.Job(id); ok && j.Status == "completed" {
				completed++
			}
		}
		if completed == jobs {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d jobs completed; kubelet errors %v\n%s", completed, jobs, kl.Errs(), logs.String())
		}
		time.Sleep(50 * time.Millisecond) // polling other processes' progress
	}
	var recs int
	for deadline := time.Now().Add(time.Minute); ; {
		recs = 0
		for r, err := range l.Records.List(context.Background(), metrics.Filter{}) {
			if err != nil {
				t.Fatal(err)
			}
			if r.CloudProvider == "kubernetes" {
				recs++
			}
		}
		if recs >= jobs || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond) // the reconciler writes records on its passes
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	for _, id := range run.JobIDs {
		if j, _ := sim.Job(id); j.Conclusion != "success" {
			t.Errorf("job %d: %+v", id, j)
		}
	}
	if recs != jobs {
		t.Errorf("%d metrics records, want one per job (%d)", recs, jobs)
	}
	if errs := kl.Errs(); len(errs) > 0 {
		t.Errorf("kubelet: %v", errs)
	}
	all, err := p.List(context.Background(), provider.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	evicted := 0
	for _, in := range all {
		if in.Reason != "" && in.State == provider.Terminated && in.Reason[:7] == "Evicted" {
			evicted++
		}
	}
	if evicted != 1 || kl.Started() != jobs || len(all) != jobs+1 {
		t.Errorf("%d pods (%d evicted), %d started: want %d, 1 evicted and replaced, %d started", len(all), evicted, kl.Started(), jobs+1, jobs)
	}
}
