package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skiffci/skiff/internal/podman"
	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/metrics"
	"github.com/skiffci/skiff/pkg/provider/container"
)

// kill9Image is the runner image of TestLocalContainerKill9: the runner
// image's entrypoint (skiff-podhelper) around the stand-in runner, whose
// jobs run long enough to outlive skiff's kill and restart.
const kill9Image = "localhost/skiff-kill9-runner:1"

// kill9Pools is one container pool on the host's network (the stand-in
// reaches the simulator on 127.0.0.1; no network per runner).
const kill9Pools = `version: 1
pools:
  - name: boxes
    labels: [self-hosted, linux, x64]
    maxRunners: 4
    costPerHour: 0.05
    container:
      image: ` + kill9Image + `
      memory: 256Mi
      network: host
      pull: never
`

// startPodman starts a Podman service of the test's own, or skips (fails
// under SKIFF_REQUIRE_EMULATORS) saying how to get one.
func startPodman(t *testing.T) *podman.Service {
	t.Helper()
	ctx, cancel := testenv.AwaitContext(t)
	defer cancel()
	s, err := podman.Start(ctx)
	if errors.Is(err, podman.ErrMissing) && os.Getenv("SKIFF_REQUIRE_EMULATORS") == "" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// TestLocalContainerKill9 is the container backend's durability end to
// end: the real skiff binary runs `skiff local --provider container` on a
// Podman service against the GitHub simulator; it is killed with SIGKILL
// while its runner containers run their jobs, and restarted on the same
// data directory. The running containers must be adopted: none is created
// again for its job (no second launch log, no second container), every job
// completes, each with one metrics record, and nothing is left behind.
func TestLocalContainerKill9(t *testing.T) {
	t.Parallel()
	pm := startPodman(t)
	if err := pm.ImportStandinRunner(kill9Image, "ENV SKIFF_STANDIN_DURATION=6s", "ENV SKIFF_STANDIN_IDLE=20s"); err != nil {
		t.Fatal(err)
	}
	skiff, _ := buildSkiff(t)
	w := newKill9World(t, "CANARYCONTAINERKILL", kill9Pools)
	sim, data, poolsFile, ctx := w.sim, w.data, w.poolsFile, w.ctx
	addr := freeAddr(t) // the same address after the restart: the App's webhook URL
	const secret = "container-kill-secret"
	args := []string{"local", "-f", poolsFile, "--provider", "container", "--data-dir", data, "--listen", addr,
		"--app-id", strconv.Itoa(testenv.AppID), "--app-key-file", w.keyFile, "--github-api-url", sim.URL(), "--allow", "acme",
		"--reconcile-every", "2s", "--metrics-records"}
	start := func(n int) (*exec.Cmd, string) {
		t.Helper()
		return startSkiff(t, skiff, w.dir, n, []string{"SKIFF_WEBHOOK_SECRET=" + secret, "DOCKER_HOST=unix://" + pm.Socket}, args, "skiff local ready")
	}
	list := func(all bool) []string { return runnerContainers(t, pm, all) }

	first, log1 := start(1)
	sim.SetWebhook(testenv.AppID, "http://"+addr+"/", secret)
	run := w.burst(3)
	w.inProgress("every job running in a container", run.JobIDs, log1)
	// The kill also lands in the middle of a fourth job's launch: its
	// slot reserved, its registration held up at GitHub.
	sim.SetFault(ghsim.OpGenerateOrgJITConfig, ghsim.Fault{Latency: time.Minute})
	late := w.burst(1)
	waitFor(t, "a launch in flight", func() (bool, string) {
		st, err := localStatus(skiff, data, poolsFile)
		return err == nil && st.reserved > 0, fmt.Sprintf("status %+v (%v)\n%s", st, err, readFile(log1))
	})
	before := list(false)
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	sim.ClearFaults()
	if got := list(false); len(before) != len(run.JobIDs) || !slices.Equal(got, before) {
		t.Fatalf("runner containers before the kill %v, after %v: want one per running job, running on", before, got)
	}
	running := run.JobIDs
	run.JobIDs = append(slices.Clone(run.JobIDs), late.JobIDs...)
	second, log2 := start(2)

	waitFor(t, "every job completed, the ledger and the queue empty, no container left", func() (bool, string) {
		statuses := sim.JobStatuses(run.JobIDs)
		done := true
		for _, id := range run.JobIDs {
			done = done && statuses[id] == "completed"
		}
		st, err := localStatus(skiff, data, poolsFile)
		left := list(true)
		return done && err == nil && st.live == 0 && st.queued == 0 && len(left) == 0,
			fmt.Sprintf("jobs %v; status %+v (%v); containers %v\n%s", statuses, st, err, left, readFile(log2))
	})
	recs := map[int64]int{}
	waitFor(t, "a metrics record per job", func() (bool, string) {
		clear(recs)
		err := readRecordsLocal(ctx, data, metrics.Filter{}, func(r *metrics.Record) { recs[r.JobID]++ })
		return err == nil && len(recs) == len(run.JobIDs), fmt.Sprintf("records %v (%v)", recs, err)
	})
	stopSkiff(t, second)

	for _, id := range run.JobIDs {
		if j, _ := sim.Job(id); j.Status != "completed" || j.Conclusion != "success" {
			t.Errorf("job %d ended %s/%s", id, j.Status, j.Conclusion)
		}
		if recs[id] != 1 {
			t.Errorf("job %d has %d metrics records, want 1", id, recs[id])
		}
	}
	checkContainerLaunches(t, running, late.JobIDs[0], log1, log2)
	logRuns(t, log1, log2)
}

// runnerContainers lists the runner containers pm runs (all: every one it
// holds, ended or not).
func runnerContainers(t *testing.T, pm *podman.Service, all bool) []string {
	t.Helper()
	args := []string{"ps", "--format", "{{.Names}}", "--filter", "label=" + container.LabelManaged}
	if all {
		args = append(args, "-a")
	}
	out, err := pm.Podman(args...)
	if err != nil {
		t.Fatal(err)
	}
	names := strings.Fields(out)
	slices.Sort(names)
	return names
}

// checkContainerLaunches fails t unless, by the logs of the first and the
// second skiff, each job of running had its one container launched by the
// first (the second adopted it), and late, whose launch the kill cut, one.
func checkContainerLaunches(t *testing.T, running []int64, late int64, log1, log2 string) {
	t.Helper()
	launches := map[int64][]int{} // per job, the containers each run of skiff launched for it
	for i, log := range []string{log1, log2} {
		for _, l := range logLines(t, log) {
			if l.Msg == "launched a runner container" {
				launches[l.JobID] = append(launches[l.JobID], i+1)
			}
		}
	}
	for _, id := range running {
		if !slices.Equal(launches[id], []int{1}) {
			t.Errorf("job %d: runner containers launched by skiff runs %v; want one, by the first (the second adopts it)", id, launches[id])
		}
	}
	if id := late; len(launches[id]) != 1 {
		t.Errorf("job %d, whose launch the kill cut: runner containers launched by skiff runs %v, want one", id, launches[id])
	}
}
