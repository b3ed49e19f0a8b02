package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
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

// buildSkiff builds the skiff binary and the stand-in runner for a test
// that runs them as processes; whatever happens, no stand-in of the test
// outlives it. Under the race detector skiff is built with it too, and
// startSkiff fails the test on a race its log reports.
func buildSkiff(t *testing.T) (skiff, standin string) {
	t.Helper()
	bin := t.TempDir()
	skiff, standin = filepath.Join(bin, "skiff"), filepath.Join(bin, "skiff-standin")
	for out, pkg := range map[string]string{skiff: "github.com/skiffci/skiff/cmd/skiff", standin: "github.com/skiffci/skiff/cmd/skiff-standin"} {
		race := "-race=" + strconv.FormatBool(testenv.RaceDetector && out == skiff)
		if b, err := exec.Command("go", "build", race, "-o", out, pkg).CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", pkg, err, b)
		}
	}
	t.Cleanup(func() {
		for _, pid := range standins(standin) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return skiff, standin
}

// startSkiff starts run n of a skiff command (args) in dir with env added
// to the test's environment, its output in dir/skiff-<n>.log, and waits
// until the log says ready; a run the test did not end is killed at its
// end. It returns the command and its log's path.
func startSkiff(t *testing.T, skiff, dir string, n int, env, args []string, ready string) (*exec.Cmd, string) {
	t.Helper()
	log := filepath.Join(dir, fmt.Sprintf("skiff-%d.log", n))
	f, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(skiff, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		if out := readFile(log); strings.Contains(out, "WARNING: DATA RACE") {
			t.Errorf("skiff run %d reported a data race:\n%s", n, out)
		}
	})
	waitFor(t, "skiff says "+ready, func() (bool, string) {
		return count(log, ready) > 0, readFile(log)
	})
	return cmd, log
}

// kill9World is what the kill -9 tests share: the GitHub simulator, the
// pools file, key file and data directory skiff local runs on, the
// context of its commands (testenv.AwaitContext), and the jobs started so
// far.
type kill9World struct {
	t                             *testing.T
	ctx                           context.Context
	sim                           *ghsim.Server
	dir, poolsFile, keyFile, data string
	jobs                          []int64
}

// newKill9World writes pools and the simulator's App key (its canary
// canary) to a directory of the test's.
func newKill9World(t *testing.T, canary, pools string) *kill9World {
	t.Helper()
	sim, pemKey := testenv.GitHubApp(t, canary)
	dir := t.TempDir()
	w := &kill9World{t: t, sim: sim, dir: dir,
		poolsFile: filepath.Join(dir, "pools.yaml"), keyFile: filepath.Join(dir, "app.pem"), data: filepath.Join(dir, "data")}
	if err := os.WriteFile(w.poolsFile, []byte(pools), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(w.keyFile, []byte(pemKey), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := testenv.AwaitContext(t) // the commands' context, ended with the test
	t.Cleanup(cancel)
	w.ctx = ctx
	return w
}

// freeAddr is a loopback address no one listens on, kept across skiff's
// restart as the App's webhook URL.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// burst starts a run of n jobs for the pool's labels.
func (w *kill9World) burst(n int) ghsim.RunInfo {
	w.t.Helper()
	spec := ghsim.RunSpec{Repo: "acme/app"}
	for range n {
		spec.Jobs = append(spec.Jobs, ghsim.JobSpec{Labels: []string{"self-hosted", "linux", "x64"}})
	}
	run, err := w.sim.StartRun(spec)
	if err != nil {
		w.t.Fatal(err)
	}
	w.jobs = append(w.jobs, run.JobIDs...)
	return run
}

// inProgress waits (what) until every job of ids is in progress; log is
// the running skiff's.
func (w *kill9World) inProgress(what string, ids []int64, log string) {
	w.t.Helper()
	waitFor(w.t, what, func() (bool, string) {
		statuses := w.sim.JobStatuses(ids)
		for _, id := range ids {
			if statuses[id] != "in_progress" {
				return false, fmt.Sprintf("jobs %v\n%s", statuses, readFile(log))
			}
		}
		return true, ""
	})
}

// drained waits until every job completed, the ledger and the queue are
// empty and no runner process of standin is left; log is the running
// skiff's.
func (w *kill9World) drained(skiff, standin, log string) {
	w.t.Helper()
	waitFor(w.t, "every job completed, the ledger and the queue empty, no runner process left", func() (bool, string) {
		var state []string
		done := true
		for _, id := range w.jobs {
			j, _ := w.sim.Job(id)
			if j.Status != "completed" {
				done = false
			}
			state = append(state, fmt.Sprintf("job %d %s/%s on %s", id, j.Status, j.Conclusion, j.RunnerName))
		}
		st, err := localStatus(skiff, w.data, w.poolsFile)
		if err != nil || st.live != 0 || st.queued != 0 {
			done = false
		}
		alive := standins(standin)
		state = append(state, fmt.Sprintf("status %+v (%v); runner processes %v", st, err, alive))
		return done && len(alive) == 0, strings.Join(state, "\n") + "\n" + readFile(log)
	})
}

// checkJobs fails the test unless every job succeeded and none had more
// runners launched for it (logs' launched lines) than one and its logged
// replacements; it returns both counts by job.
func (w *kill9World) checkJobs(launched string, logs ...string) (launches, replaced map[int64]int) {
	w.t.Helper()
	for _, id := range w.jobs {
		if j, _ := w.sim.Job(id); j.Status != "completed" || j.Conclusion != "success" {
			w.t.Errorf("job %d ended %s/%s", id, j.Status, j.Conclusion)
		}
	}
	launches, replaced = map[int64]int{}, map[int64]int{}
	for _, log := range logs {
		for _, l := range logLines(w.t, log) {
			switch l.Msg {
			case launched:
				launches[l.JobID]++
			case "stranded job: replacement launched":
				replaced[l.JobID]++
			}
		}
	}
	for _, id := range w.jobs {
		if launches[id] > 1+replaced[id] {
			w.t.Errorf("job %d had %d runners launched for it and %d logged replacements", id, launches[id], replaced[id])
		}
	}
	return launches, replaced
}

// TestLocalKill9 is local mode's durability end to end: the real skiff
// binary runs `skiff local` against the GitHub simulator over HTTP with
// stand-in runners; it is killed with SIGKILL in the middle of a burst of
// jobs — runners running, a launch half done — more jobs are queued while
// it is down, and it is restarted on the same data directory. Every job
// must end completed, none launched twice (but as a logged replacement),
// the pool's limit held at every moment, no runner's work directory
// removed under it, and no count in the ledger, message in the queue or
// runner process left at the end.
func TestLocalKill9(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/self/exe"); err != nil {
		t.Skip("needs /proc to find the runner processes")
	}
	skiff, standin := buildSkiff(t)

	w := newKill9World(t, "CANARYKILL", testenv.CPUPools)
	sim, data, poolsFile := w.sim, w.data, w.poolsFile
	addr := freeAddr(t) // the same address after the restart: the App's webhook URL
	const limit, secret = 3, "kill-secret"
	args := []string{"local", "-f", poolsFile, "--data-dir", data, "--listen", addr, "--app-id", strconv.Itoa(testenv.AppID), "--app-key-file", w.keyFile,
		"--github-api-url", sim.URL(), "--allow", "acme", "--limits", "cpu=" + strconv.Itoa(limit), "--reconcile-every", "2s",
		// Jobs long enough to be running at the kill and after the restart.
		"--runner", "env SKIFF_STANDIN_DURATION=5s SKIFF_STANDIN_IDLE=20s " + standin}
	ctx := w.ctx
	start := func(n int) (*exec.Cmd, string) {
		t.Helper()
		return startSkiff(t, skiff, w.dir, n, []string{"SKIFF_WEBHOOK_SECRET=" + secret}, args, "skiff local ready")
	}

	// Watch the runner processes all along: how many are alive at once,
	// and whether any runs in a work directory that was removed.
	stopWatch := watchRunners(ctx, standin)

	first, log1 := start(1)
	sim.SetWebhook(testenv.AppID, "http://"+addr+"/", secret)
	// The kill lands while runners run, in the middle of the next jobs'
	// launch: claims taken, the pool's last slot reserved (local mode caps
	// maxRunners at the limit), its registration held up at GitHub.
	w.burst(limit - 1)
	waitFor(t, "runners launched before the kill", func() (bool, string) {
		return count(log1, `"msg":"launched a runner process"`) >= limit-1, readFile(log1)
	})
	sim.SetFault(ghsim.OpGenerateOrgJITConfig, ghsim.Fault{Latency: time.Minute})
	w.burst(3)
	waitFor(t, "a launch in flight", func() (bool, string) {
		st, err := localStatus(skiff, data, poolsFile)
		return err == nil && st.reserved > 0, fmt.Sprintf("status %+v (%v)\n%s", st, err, readFile(log1))
	})
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	sim.ClearFaults()
	if n := len(standins(standin)); n == 0 {
		t.Fatal("no runner was running at the kill: the test did not exercise a restart with live runners")
	}
	w.burst(3) // GitHub sends these while skiff is down: the deliveries fail, the reconciler redelivers them
	second, log2 := start(2)
	w.burst(3)

	w.drained(skiff, standin, log2)
	maxAlive, deleted := stopWatch()
	stopSkiff(t, second)

	w.checkJobs("launched a runner process", log1, log2)
	if st, err := localStatus(skiff, data, poolsFile); err != nil || st.dead != 0 {
		t.Errorf("dead letters after the run: %+v (%v)", st, err)
	}
	if maxAlive > limit {
		t.Errorf("%d runner processes were alive at once, over the pool's limit of %d", maxAlive, limit)
	}
	for pid, cwd := range deleted {
		t.Errorf("runner process %d ran in a removed work directory %s", pid, cwd)
	}
	if left := standins(standin); len(left) > 0 {
		t.Errorf("runner processes left after skiff local stopped: %v", left)
	}
	logRuns(t, log1, log2)
}

// watchRunners samples the processes of the stand-in binary at path
// until the returned stop is called, which gives the most seen alive at
// once and those that ran in a removed work directory (by pid).
func watchRunners(ctx context.Context, path string) (stop func() (maxAlive int, deleted map[int]string)) {
	ctx, cancel := context.WithCancel(ctx)
	maxAlive, deleted := 0, map[int]string{}
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for ctx.Err() == nil {
			pids := standins(path)
			maxAlive = max(maxAlive, len(pids))
			for _, pid := range pids {
				if cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid)); err == nil && strings.HasSuffix(cwd, " (deleted)") {
					deleted[pid] = cwd
				}
			}
			time.Sleep(20 * time.Millisecond) // sampling other processes' state
		}
	}()
	return func() (int, map[int]string) {
		cancel()
		<-watched
		return maxAlive, deleted
	}
}

// stopSkiff ends a skiff run with SIGTERM, as an operator would, and
// fails t unless it exits cleanly.
func stopSkiff(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("skiff local after SIGTERM: %v", err)
	}
}

// logRuns logs both runs' logs when the test failed, or always with
// SKIFF_LOCAL_LOGS set.
func logRuns(t *testing.T, log1, log2 string) {
	t.Helper()
	if t.Failed() || os.Getenv("SKIFF_LOCAL_LOGS") != "" {
		t.Logf("first run's log:\n%s\nsecond run's log:\n%s", readFile(log1), readFile(log2))
	}
}

// waitFor polls cond every 100 ms (other processes' progress) until it
// holds; a failure says cond's last state.
func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	testenv.AwaitState(t, what, 100*time.Millisecond, cond)
}

// standins lists the processes running the stand-in binary at path
// (zombies have no executable and are not listed).
func standins(path string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err == nil && exe == path {
			out = append(out, pid)
		}
	}
	return out
}

type localState struct{ live, reserved, queued, dead int }

// localStatus asks `skiff status --json` for the pools' live runners and
// the queue's depth, from the SQLite file a running skiff local writes.
func localStatus(skiff, data, pools string) (localState, error) {
	out, err := exec.Command(skiff, "status", "--data-dir", data, "-f", pools, "--json").Output()
	if err != nil {
		return localState{}, fmt.Errorf("skiff status: %w", err)
	}
	var st struct {
		Pools []struct {
			Live    int
			ByState map[string]int
		}
		Queue       struct{ Visible, InFlight, Delayed int }
		DeadLetters struct{ Visible int }
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return localState{}, fmt.Errorf("reading skiff status: %w", err)
	}
	s := localState{queued: st.Queue.Visible + st.Queue.InFlight + st.Queue.Delayed, dead: st.DeadLetters.Visible}
	for _, p := range st.Pools {
		s.live += p.Live
		s.reserved += p.ByState["reserved"]
	}
	return s, nil
}

type logLine struct {
	Msg   string `json:"msg"`
	JobID int64  `json:"job_id"`
}

func logLines(t *testing.T, path string) []logLine {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []logLine
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var l logLine
		if json.Unmarshal(sc.Bytes(), &l) == nil {
			out = append(out, l)
		}
	}
	return out
}

func count(path, s string) int {
	b, _ := os.ReadFile(path)
	return bytes.Count(b, []byte(s))
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

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
