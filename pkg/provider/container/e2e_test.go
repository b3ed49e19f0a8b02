package container_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skiffci/skiff/internal/local"
	"github.com/skiffci/skiff/internal/localtest"
	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/metrics"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/pool/poolfile"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/provider/container"
)

// runnerImage is the runner image of the end-to-end tests: the runner
// image's entrypoint (skiff-podhelper) around the stand-in runner.
const runnerImage = "localhost/skiff-container-runner:1"

var (
	runnerOnce sync.Once
	runnerErr  error
)

func needRunnerImage(t *testing.T) *engine {
	t.Helper()
	e := needEngine(t)
	runnerOnce.Do(func() {
		runnerErr = e.Import(runnerImage, map[string]string{
			"skiff-podhelper": "github.com/skiffci/skiff/cmd/skiff-podhelper",
			"skiff-standin":   "github.com/skiffci/skiff/cmd/skiff-standin",
			"runner":          "./testdata/runner",
		}, `ENTRYPOINT ["/runner"]`)
	})
	if runnerErr != nil {
		t.Fatal(runnerErr)
	}
	return e
}

// e2ePools is one container pool on the host's network (the stand-in
// reaches the simulator on 127.0.0.1), with an operator's hourly rate.
const e2ePools = `version: 1
pools:
  - name: boxes
    labels: [self-hosted, linux, x64]
    maxRunners: 4
    costPerHour: 0.05
    container:
      image: ` + runnerImage + `
      memory: 256Mi
      network: host
      pull: never
`

// localRun is skiff local with the container provider on the tests'
// Podman, and the GitHub simulator.
type localRun struct {
	e     *engine
	sim   *ghsim.Server
	l     *local.Local
	p     *container.Provider
	logs  *testenv.SyncBuffer
	dir   string
	pools *pool.Config
	key   string
	dep   string
	stop  func()

	mu        sync.Mutex
	killFirst bool
	killed    string
}

func startLocal(t *testing.T, env ...string) *localRun {
	t.Helper()
	e := needRunnerImage(t)
	sim, pemKey := testenv.GitHubApp(t, "CANARYCONTAINER")
	dir := t.TempDir()
	poolsFile := filepath.Join(dir, "pools.yaml")
	if err := os.WriteFile(poolsFile, []byte(e2ePools), 0o600); err != nil {
		t.Fatal(err)
	}
	pools, err := poolfile.Load(poolsFile)
	if err != nil {
		t.Fatal(err)
	}
	lo := &localRun{e: e, sim: sim, logs: &testenv.SyncBuffer{}, dir: dir, pools: pools, key: pemKey,
		dep: "e2e" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", ""))[:min(20, len(t.Name()))]}
	lo.dep = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return -1
	}, lo.dep)
	lo.start(t, env...)
	gateDone := make(chan struct{})
	gateStopped := make(chan struct{})
	go lo.gate(gateDone, gateStopped)
	t.Cleanup(func() {
		close(gateDone)
		<-gateStopped
		lo.stop()
		ins, _ := lo.p.List(context.Background(), provider.Filter{})
		var ids []string
		for _, in := range ins {
			ids = append(ids, in.ID)
		}
		_ = lo.p.Terminate(context.Background(), ids)
	})
	return lo
}

// gate lets each runner start (writes its go file) as it appears, but
// the first when killFirst is set: that one it kills before its runner
// starts, once the engine has it.
func (lo *localRun) gate(done, stopped chan struct{}) {
	defer close(stopped)
	opened := map[string]bool{}
	dir := filepath.Join(lo.dir, "data", "containers")
	for {
		select {
		case <-done:
			return
		case <-time.After(20 * time.Millisecond):
		}
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			name := e.Name()
			if opened[name] {
				continue
			}
			lo.mu.Lock()
			kill := lo.killFirst && lo.killed == ""
			lo.mu.Unlock()
			if kill {
				cmd := exec.Command("podman", "kill", name)
				cmd.Env = lo.e.env
				if cmd.Run() != nil {
					continue // not created yet
				}
				lo.mu.Lock()
				lo.killed = name
				lo.mu.Unlock()
				opened[name] = true
				continue
			}
			if os.WriteFile(filepath.Join(dir, name, "usage", "go"), nil, 0o644) == nil {
				opened[name] = true
			}
		}
	}
}

// start starts skiff local (again) on the run's data directory.
func (lo *localRun) start(t *testing.T, env ...string) {
	t.Helper()
	log := slog.New(slog.NewJSONHandler(lo.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	p, err := container.New(container.Options{Engine: lo.e.client, Dir: filepath.Join(lo.dir, "data", "containers"), Deployment: lo.dep,
		Env: append([]string{"SKIFF_TEST_MODE=gate", "SKIFF_STANDIN_DURATION=300ms"}, env...), Logger: log,
		Ceiling: container.Ceiling{NanoCPUs: 64e9, MemoryBytes: 64 << 30}})
	if err != nil {
		t.Fatal(err)
	}
	l, err := local.New(local.Config{
		DataDir: filepath.Join(lo.dir, "data"), Deployment: lo.dep, Pools: lo.pools, Listen: "127.0.0.1:0", Provider: "container",
		ExternalProvider: p, GitHubAPIURL: lo.sim.URL(), AppIDs: []int64{77}, AppKeys: lo.key, WebhookSecret: "box-secret",
		Allow: []string{"acme"}, Installations: []string{"*"}, MetricsRecords: true, ReconcileEvery: time.Second,
	}, log)
	if err != nil {
		t.Fatal(err)
	}
	lo.sim.SetWebhook(77, l.URL(), "box-secret")
	stop := localtest.Run(t, l)
	lo.l, lo.p = l, p
	lo.stop = func() {
		if err := stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}

// finish waits until every job of run completed, the pool counts no
// runner and each job has its metrics record; it returns the records.
func (lo *localRun) finish(t *testing.T, run ghsim.RunInfo) map[int64][]metrics.Record {
	t.Helper()
	return localtest.Finish(t, lo.sim, lo.l, "boxes", lo.logs, run)
}

// check fails t unless every job succeeded with exactly one valid record
// of the container provider with peaks from the entrypoint's cgroup
// reading and the pool's cost, and no credential
// reached the logs.
func (lo *localRun) check(t *testing.T, run ghsim.RunInfo, recs map[int64][]metrics.Record) {
	t.Helper()
	localtest.Check(t, lo.sim, lo.logs, run, recs, func(id int64, r metrics.Record) {
		if r.CloudProvider != "container" || r.Pool != "boxes" || !strings.HasPrefix(r.InstanceType, "container ") {
			t.Errorf("job %d's record: provider %q, pool %q, type %q; want container, boxes, container ...", id, r.CloudProvider, r.Pool, r.InstanceType)
		}
		// The stand-in holds a few MiB: its peak rounds to 0.00 GiB in
		// the record, but is there; its CPU time is not zero.
		if r.Memory == nil || r.Memory.PeakGiB == nil || r.CPU == nil || r.CPU.Seconds == nil || *r.CPU.Seconds <= 0 {
			t.Errorf("job %d's record (runner %s) has no peaks from the entrypoint: memory %+v, cpu %+v", id, r.RunnerName, r.Memory, r.CPU)
		}
		if r.Host == nil || r.Host.CPUs != 64 || r.Host.MemoryGiB == nil || *r.Host.MemoryGiB != 64 {
			t.Errorf("job %d's record host %+v, want the ceiling's 64 CPUs and 64 GiB", id, r.Host)
		}
		if r.Cost == nil || r.Cost.HourlyUSD != 0.05 {
			t.Errorf("job %d's record cost %+v, want the pool's 0.05 per hour", id, r.Cost)
		}
	})
}

// containers counts this run's containers the engine holds.
func (lo *localRun) containers(t *testing.T) []string {
	t.Helper()
	return strings.Fields(lo.e.podman(t, "ps", "-a", "--format", "{{.Names}}", "--filter", "label="+container.LabelDeployment+"="+lo.dep))
}

// TestLocalContainer is `skiff local --provider container` end to end: the
// simulator's signed webhooks reach local mode, which starts a container
// per job on Podman's service, skiff-podhelper running the stand-in
// runner inside, which takes its job and completes it. The first
// container is killed before it finishes: its job must get a replacement.
// Every job completes, with one record each, and no container is left.
func TestLocalContainer(t *testing.T) {
	lo := startLocal(t, "SKIFF_STANDIN_DURATION=1s")
	lo.mu.Lock()
	lo.killFirst = true
	lo.mu.Unlock()
	run := localtest.StartRun(t, lo.sim, 3)
	recs := lo.finish(t, run)
	lo.stop()
	lo.check(t, run, recs)
	lo.mu.Lock()
	killed := lo.killed
	lo.mu.Unlock()
	if reason, ok := lo.p.Ended(killed); killed == "" || !ok || reason == "exit code 0" || strings.HasPrefix(reason, "OOMKilled") {
		t.Errorf("the killed container %q ended %q (%v), want killed", killed, reason, ok)
	}
	if n := strings.Count(lo.logs.String(), `"msg":"launched a runner container"`); n < 4 {
		t.Errorf("%d containers launched for 3 jobs and one killed, want at least 4", n)
	}
	localtest.Poll(t, "every container removed", lo.logs, func() bool {
		_, _ = lo.p.List(context.Background(), provider.Filter{})
		return len(lo.containers(t)) == 0
	})
}

// TestLocalContainerOOM: a job whose runner holds more than the pool's
// memory is OOM-killed; its container's end says so, from the engine or
// from the entrypoint's measured peak at the limit, and so does the job's
// metrics record (endReason oom-killed, exit code 137) once GitHub has
// failed the job whose runner vanished.
func TestLocalContainerOOM(t *testing.T) {
	lo := startLocal(t, "SKIFF_STANDIN_WORK=*=0.1:512", "SKIFF_STANDIN_DURATION=30s")
	run := localtest.StartRun(t, lo.sim, 1)
	job := run.JobIDs[0]
	localtest.Poll(t, "an OOM-killed runner", lo.logs, func() bool {
		return strings.Contains(lo.logs.String(), `"end_reason":"OOMKilled`)
	})
	// GitHub fails a job whose runner has gone (lost communication); the
	// simulator is told the runner has.
	localtest.Poll(t, "the simulator to fail the job of the killed runner", lo.logs, func() bool {
		for _, r := range lo.sim.Runners() {
			if r.JobID == job {
				return lo.sim.DisconnectRunner(r.ID) == nil
			}
		}
		return false
	})
	var rec metrics.Record
	localtest.Poll(t, "the OOM-killed job's metrics record", lo.logs, func() bool {
		for r, err := range lo.l.MetricsRecords.List(context.Background(), metrics.Filter{}) {
			if err != nil {
				t.Fatal(err)
			}
			if r.JobID == job {
				rec = r
				return true
			}
		}
		return false
	})
	lo.stop()
	if err := metrics.Validate(rec); err != nil {
		t.Errorf("the record fails the schema: %v", err)
	}
	if rec.EndReason != string(provider.EndOOMKilled) || rec.ExitCode == nil || *rec.ExitCode != 137 || rec.Conclusion != "failure" {
		t.Errorf("the OOM-killed job's record: endReason %q, exit code %v, conclusion %q; want oom-killed, 137, failure",
			rec.EndReason, rec.ExitCode, rec.Conclusion)
	}
	// The entrypoint measured the runner at the pool's 256Mi: the record
	// gives the peak as a share of that limit too.
	if rec.Memory == nil || rec.Memory.PeakPercent == nil || *rec.Memory.PeakPercent < 90 {
		t.Errorf("the OOM-killed job's memory %+v: want its peak at about 100%% of the pool's limit", rec.Memory)
	}
}

// TestLocalContainerRestart: skiff local stops while its runners run
// (its process gone, as after a kill -9: the provider keeps nothing on
// disk but the runners' directories); a new one on the same data
// directory adopts the running containers (launches no second one for
// their jobs) and every job completes with one record.
func TestLocalContainerRestart(t *testing.T) {
	lo := startLocal(t, "SKIFF_STANDIN_DURATION=4s")
	run := localtest.StartRun(t, lo.sim, 2)
	var before []string
	localtest.Poll(t, "both runner containers", lo.logs, func() bool {
		before = lo.containers(t)
		return len(before) == 2
	})
	lo.stop()
	lo.start(t, "SKIFF_STANDIN_DURATION=4s")
	recs := lo.finish(t, run)
	lo.stop()
	lo.check(t, run, recs)
	if n := strings.Count(lo.logs.String(), `"msg":"launched a runner container"`); n != 2 {
		t.Errorf("%d containers launched for 2 jobs across a restart, want 2", n)
	}
	_ = fmt.Sprint(before)
}
