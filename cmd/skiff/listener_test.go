package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/github/ghsim"
)

// TestLocalListenerKill9 is the listener's durability end to end: the
// real skiff binary takes its jobs from a runner scale set (no port, no
// webhook secret), is killed with SIGKILL while a message is being
// handled (its acquire held up at GitHub) and runners run, more jobs are
// queued while it is down, and it is restarted on the same data
// directory. Every job must complete, none launched twice, no offer
// acknowledged before its job was acquired, the session the crash left
// deleted at the restart (no 409), and the session deleted at exit.
func TestLocalListenerKill9(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/self/exe"); err != nil {
		t.Skip("needs /proc to find the runner processes")
	}
	skiff, standin := buildSkiff(t)
	listenerKill9(t, skiff, standin, kill9Backend{
		pools: testenv.CPUPools + "    jobs: listener\n",
		args: []string{"--limits", "cpu=" + strconv.Itoa(kill9Limit),
			"--runner", "env SKIFF_STANDIN_DURATION=3s SKIFF_STANDIN_IDLE=20s " + standin},
		launched: "launched a runner process",
	})
}

// TestLocalListenerKill9Slurm is TestLocalListenerKill9 with the runners as
// batch jobs of the real single-node cluster: they run on through the
// kill, and the restarted daemon adopts them from its record of the jobs it
// submitted.
func TestLocalListenerKill9Slurm(t *testing.T) {
	t.Parallel()
	s := testenv.StartSlurm(t, testenv.SlurmOptions{CPUs: 8})
	if s == nil {
		return
	}
	skiff, standin := buildSkiff(t)
	runner := s.RunnerInstall(t, "env SKIFF_STANDIN_DURATION=3s SKIFF_STANDIN_IDLE=20s "+standin)
	shared := filepath.Join(s.Dir, "shared")
	listenerKill9(t, skiff, standin, kill9Backend{
		pools: fmt.Sprintf(`version: 1
pools:
  - name: cpu
    labels: [self-hosted, linux, x64]
    jobs: listener
    maxRunners: %d
    slurm: {partition: debug, cpusPerTask: 1, memory: 256M, runAs: shared, runnerDir: %s, workDir: %s}
`, kill9Limit, runner, filepath.Join(shared, "work")),
		args:     []string{"--provider", "slurm", "--slurm-shared", shared, "--runner", filepath.Join(runner, "run.sh")},
		env:      []string{"SLURM_CONF=" + s.Conf},
		launched: "submitted a runner's batch job",
	})
}

// kill9Limit is the most runners the kill -9 tests' pool runs at once.
const kill9Limit = 3

// kill9Backend is the backend a kill -9 test's one pool "cpu" runs on:
// the pools file, skiff local's flags and environment for it, and the
// message its provider logs for each runner launched (with job_id).
type kill9Backend struct {
	pools    string
	args     []string
	env      []string
	launched string
}

// listenerKill9 is the kill -9 test of the listener on backend b: its
// runners are the stand-in (standin), found by their executable.
func listenerKill9(t *testing.T, skiff, standin string, b kill9Backend) {
	t.Helper()
	w := newKill9World(t, "CANARYLKILL", b.pools)
	sim, data, poolsFile := w.sim, w.data, w.poolsFile
	// No job is rescued by an offer made again: what the crash loses stays lost.
	sim.SetScaleSetOptions(ghsim.ScaleSetOptions{Reoffer: time.Hour})
	const limit = kill9Limit
	args := append([]string{"local", "-f", poolsFile, "--data-dir", data, "--app-id", strconv.Itoa(testenv.AppID), "--app-key-file", w.keyFile,
		"--github-api-url", sim.URL(), "--allow", "acme", "--reconcile-every", "2s"}, b.args...)
	start := func(n int) (*exec.Cmd, string) {
		t.Helper()
		return startSkiff(t, skiff, w.dir, n, b.env, args, "scale set session open")
	}
	first, log1 := start(1)
	if strings.Contains(readFile(log1), `"webhook":"http`) {
		t.Error("skiff local opened a port with every pool on the listener")
	}
	w.burst(limit - 1)
	waitFor(t, "runners launched before the kill", func() (bool, string) {
		return count(log1, `"msg":"`+b.launched+`"`) >= limit-1, readFile(log1)
	})
	waitFor(t, "runners running before the kill", func() (bool, string) { // a batch job starts after its submission
		return len(standins(standin)) > 0, readFile(log1)
	})
	// The next message's acquire is held up: the kill lands while it is handled.
	acquires := sim.Requests(ghsim.OpAcquireJobs)
	sim.SetFault(ghsim.OpAcquireJobs, ghsim.Fault{Latency: time.Minute})
	w.burst(3)
	waitFor(t, "an acquire in flight", func() (bool, string) {
		return sim.Requests(ghsim.OpAcquireJobs) > acquires, readFile(log1)
	})
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	sim.ClearFaults()
	if len(standins(standin)) == 0 {
		t.Fatal("no runner was running at the kill: the test did not exercise a restart with live runners")
	}
	if ss := sim.ScaleSets("acme"); len(ss) != 1 || ss[0].Session == "" || ss[0].Unacked == 0 {
		t.Fatalf("after the kill: %+v, want the session left and its message not acknowledged", ss)
	}
	w.burst(3) // queued while skiff is down
	second, log2 := start(2)
	w.burst(3)
	w.drained(skiff, standin, log2)
	out, err := exec.Command(skiff, "status", "--data-dir", data, "-f", poolsFile).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "scale set ") || !strings.Contains(string(out), "session ") {
		t.Errorf("skiff status: %v\n%s", err, out)
	}
	stopSkiff(t, second)

	launches, replaced := w.checkJobs(b.launched, log1, log2)
	// A scale set's runner takes any job its scale set acquired, not only
	// the one it was launched for: once per job is counted over the pool.
	total, totalReplaced := 0, 0
	for _, id := range w.jobs {
		total, totalReplaced = total+launches[id], totalReplaced+replaced[id]
	}
	if total > len(w.jobs)+totalReplaced {
		t.Errorf("%d runners launched for %d jobs and %d logged replacements", total, len(w.jobs), totalReplaced)
	}
	checkListenerSessions(t, sim, log2)
	logRuns(t, log1, log2)
}

// checkListenerSessions fails t unless no offer was acknowledged before its
// job was acquired, the restarted skiff (its log log2) deleted the session
// the crash left before opening its own, and at exit no session is left and
// every message is acknowledged.
func checkListenerSessions(t *testing.T, sim *ghsim.Server, log2 string) {
	t.Helper()
	if n := sim.AckedUnacquired(); n != 0 {
		t.Errorf("%d offers were acknowledged before their job was acquired", n)
	}
	l2 := readFile(log2)
	if !strings.Contains(l2, "deleted the session the previous process left") || strings.Contains(l2, "another client holds the session") {
		t.Error("the restart did not delete the session the crash left before opening its own")
	}
	if ss := sim.ScaleSets("acme"); len(ss) != 1 || ss[0].Session != "" || ss[0].Unacked != 0 {
		t.Errorf("after exit: %+v, want no session and every message acknowledged", ss)
	}
}
