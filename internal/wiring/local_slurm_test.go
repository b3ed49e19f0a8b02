package wiring_test

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
	"strings"
	"testing"
	"time"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/internal/wiring"
	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/metrics"
)

// TestLocalModeSlurm: skiff local with the slurm provider against a real
// single-node cluster, the GitHub simulator and stand-in runners: every
// job completes on a runner that was a Slurm batch job, with one metrics
// record each.
func TestLocalModeSlurm(t *testing.T) {
	t.Parallel()
	s := testenv.StartSlurm(t, testenv.SlurmOptions{CPUs: 16})
	standin := filepath.Join(s.Dir, "skiff-standin")
	if out, err := exec.Command("go", "build", "-o", standin, "github.com/skiffci/skiff/cmd/skiff-standin").CombinedOutput(); err != nil {
		t.Fatalf("building the stand-in runner: %v\n%s", err, out)
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pemKey := string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))
	sim := ghsim.New(ghsim.Options{SecretPrefix: "CANARYSLURM"})
	t.Cleanup(sim.Close)
	sim.AddApp(ghsim.AppConfig{ID: 77, Slug: "skiff", PublicKey: &key.PublicKey})
	sim.AddOrg("acme")
	sim.AddRepo("acme", "app")
	sim.Install(77, "acme")

	dir := t.TempDir()
	poolsFile := filepath.Join(dir, "pools.yaml")
	if err := os.WriteFile(poolsFile, []byte(localPools), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := &testenv.SyncBuffer{}
	l, err := wiring.NewLocal(wiring.LocalConfig{
		DataDir: filepath.Join(dir, "data"), PoolsFile: poolsFile, Listen: "127.0.0.1:0", Provider: "slurm",
		SlurmShared: filepath.Join(s.Dir, "shared"), SlurmEnv: []string{"SLURM_CONF=" + s.Conf},
		RunnerCommand: []string{standin}, RunnerEnv: []string{"SKIFF_STANDIN_DURATION=200ms"},
		GitHubAPIURL: sim.URL(), AppIDs: []int64{77}, AppKeys: pemKey, MetricsRecords: true,
		WebhookSecret: "local-secret", Allow: []string{"acme"}, Installations: []string{"*"},
	}, slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	sim.SetWebhook(77, l.URL(), "local-secret")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()

	labels := []string{"self-hosted", "linux", "x64"}
	const n = 4
	var jobs []ghsim.JobSpec
	for range n {
		jobs = append(jobs, ghsim.JobSpec{Labels: labels})
	}
	run, err := sim.StartRun(ghsim.RunSpec{Repo: "acme/app", Jobs: jobs})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Minute) // a safety net, not a measurement
	for {
		completed := 0
		for _, id := range run.JobIDs {
			if j, ok := sim.Job(id); ok && j.Status == "completed" {
				completed++
			}
		}
		if completed == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d jobs completed\n%s", completed, n, logs.String())
		}
		time.Sleep(50 * time.Millisecond) // polling the simulator's progress
	}
	for live := -1; live != 0; {
		live, _ = l.Ledger.Live(context.Background(), "cpu")
		if time.Now().After(deadline) {
			t.Fatalf("the pool still counts %d runners after every job ended\n%s", live, logs.String())
		}
		time.Sleep(50 * time.Millisecond) // the state poll is another goroutine's
	}
	recs := map[int64]int{}
	for deadline := time.Now().Add(time.Minute); len(recs) < n; {
		recs = map[int64]int{}
		for r, err := range l.Records.List(context.Background(), metrics.Filter{}) {
			if err != nil {
				t.Fatal(err)
			}
			recs[r.JobID]++
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // records are written by the reconciler's goroutine
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	for _, id := range run.JobIDs {
		if j, _ := sim.Job(id); j.Conclusion != "success" {
			t.Errorf("job %d: %+v", id, j)
		}
		if recs[id] != 1 {
			t.Errorf("job %d has %d metrics records, want 1 (all: %v)", id, recs[id], recs)
		}
	}
	for _, secret := range sim.Secrets() {
		if secret != "" && strings.Contains(logs.String(), secret) {
			t.Fatal("a credential reached the logs")
		}
	}
}
