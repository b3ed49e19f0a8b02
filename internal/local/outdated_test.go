package local_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/skiffci/skiff/internal/local"
	"github.com/skiffci/skiff/internal/localtest"
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
	var holds []store.RunnerHold
	localtest.Poll(t, "the pool to be held", logs, func() bool {
		holds, _ = l.Runners.Holds(context.Background()) // the reconciler's goroutine holds it
		return len(holds) > 0
	})
	if holds[0].Pool != "cpu" || holds[0].Reason != freshness.ReasonOutdated || !strings.Contains(holds[0].Detail, "Fix:") {
		t.Errorf("hold %+v", holds[0])
	}
	second, err := sim.StartRun(ghsim.RunSpec{Repo: "acme/app", Jobs: []ghsim.JobSpec{{Labels: labels}}})
	if err != nil {
		t.Fatal(err)
	}
	var dead []queue.DeadLetterRecord
	localtest.Poll(t, "the held pool's job to be dead-lettered", logs, func() bool {
		dead, _ = l.Queue.DeadLetters(context.Background())
		return deadLettered(dead, second.JobIDs[0])
	})
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
