package local_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/skiffci/skiff/internal/local"
	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/freshness"
	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/pool/poolfile"
	"github.com/skiffci/skiff/pkg/queue"
	"github.com/skiffci/skiff/pkg/store"
)

// TestStalePoolStops runs the whole pipeline with stand-in runners of a
// version GitHub no longer serves: the first runner is refused and exits 7,
// the reconciler holds the pool, and its jobs are dead-lettered with the
// fix instead of a replacement loop; the pool's status line says held.
func TestStalePoolStops(t *testing.T) {
	t.Parallel()
	standin := buildStandin(t, t.TempDir())
	sim, pemKey := testenv.GitHubApp(t, "CANARYSTALE")
	now := time.Now()
	sim.SetRunnerReleases([]ghsim.RunnerRelease{
		{Version: "2.334.0", Published: now.AddDate(0, 0, -2), SHA256: map[string]string{"linux-x64": strings.Repeat("4", 64)}},
		{Version: "2.333.0", Published: now.AddDate(0, 0, -45), SHA256: map[string]string{"linux-x64": strings.Repeat("3", 64)}},
		{Version: "2.330.0", Published: now.AddDate(0, 0, -90), SHA256: map[string]string{"linux-x64": strings.Repeat("0", 64)}},
	})
	l, logs, stop := startLocal(t, sim, pemKey, testenv.CPUPools, local.Config{
		RunnerCommand: []string{standin}, RunnerEnv: []string{"SKIFF_STANDIN_VERSION=2.330.0", "SKIFF_STANDIN_IDLE=1m"},
		Limits: map[string]int{"cpu": 2},
	})
	labels := []string{"self-hosted", "linux", "x64"}
	first, err := sim.StartRun(ghsim.RunSpec{Repo: "acme/app", Jobs: []ghsim.JobSpec{{Labels: labels}}})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute) // a safety net for another process's progress, not a measurement
	var holds []store.RunnerHold
	for len(holds) == 0 {
		holds, _ = l.Runners.Holds(context.Background())
		if time.Now().After(deadline) {
			t.Fatalf("the pool was not held\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond) // polling the reconciler's goroutine
	}
	if holds[0].Pool != "cpu" || holds[0].Reason != freshness.ReasonOutdated || !strings.Contains(holds[0].Detail, "Fix:") {
		t.Errorf("hold %+v", holds[0])
	}
	second, err := sim.StartRun(ghsim.RunSpec{Repo: "acme/app", Jobs: []ghsim.JobSpec{{Labels: labels}}})
	if err != nil {
		t.Fatal(err)
	}
	var dead []queue.DeadLetterRecord
	for !deadLettered(dead, second.JobIDs[0]) {
		dead, _ = l.Queue.DeadLetters(context.Background())
		if time.Now().After(deadline) {
			t.Fatalf("the held pool's job was not dead-lettered: %+v\n%s", dead, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, d := range dead {
		if d.Reason != freshness.ReasonOutdated || !strings.Contains(d.Detail, "GitHub refuses runner unknown") ||
			!strings.Contains(d.Detail, "update the pool's runner") && !strings.Contains(d.Detail, "rebuild it with runner 2.334.0") {
			t.Errorf("dead letter %+v", d)
		}
	}
	// One runner was launched: the refused one. Its job's replacement and
	// the second job never started another.
	if n := sim.Requests(ghsim.OpGenerateOrgJITConfig); n != 1 {
		t.Errorf("%d runners registered, want 1 (no replacement loop)\n%s", n, logs.String())
	}
	if j, _ := sim.Job(first.JobIDs[0]); j.Status != "queued" {
		t.Errorf("first job %+v", j)
	}
	pools, err := poolfile.Parse([]byte(testenv.CPUPools), "pools.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f, ok := freshness.Assess(pools.Pool("cpu"), nil, map[string]store.RunnerHold{"cpu": holds[0]}, time.Now())
	if !ok || f.State != "held" {
		t.Errorf("status line %+v", f)
	}
	if err := stop(); err != nil {
		t.Errorf("Run: %v", err)
	}
}

func deadLettered(dead []queue.DeadLetterRecord, job int64) bool {
	for _, d := range dead {
		if d.JobID == job {
			return true
		}
	}
	return false
}
