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
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/github/ghsim"
)

// buildSkiff builds the skiff binary and the stand-in runner for a test
// that runs them as processes; whatever happens, no stand-in of the test
// outlives it.
func buildSkiff(t *testing.T) (skiff, standin string) {
	t.Helper()
	bin := t.TempDir()
	skiff, standin = filepath.Join(bin, "skiff"), filepath.Join(bin, "skiff-standin")
	for out, pkg := range map[string]string{skiff: "github.com/skiffci/skiff/cmd/skiff", standin: "github.com/skiffci/skiff/cmd/skiff-standin"} {
		if b, err := exec.Command("go", "build", "-o", out, pkg).CombinedOutput(); err != nil {
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
func startSkiff(ctx context.Context, t *testing.T, skiff, dir string, n int, env, args []string, ready string) (*exec.Cmd, string) {
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
	})
	waitFor(ctx, t, "skiff says "+ready, func() (bool, string) {
		return count(log, ready) > 0, readFile(log)
	})
	return cmd, log
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

	sim, pemKey := testenv.GitHubApp(t, "CANARYKILL")

	dir := t.TempDir()
	poolsFile, keyFile, data := filepath.Join(dir, "pools.yaml"), filepath.Join(dir, "app.pem"), filepath.Join(dir, "data")
	if err := os.WriteFile(poolsFile, []byte(testenv.CPUPools), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, []byte(pemKey), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String() // the same address after the restart: the App's webhook URL
	ln.Close()
	const limit, secret = 3, "kill-secret"
	args := []string{"local", "-f", poolsFile, "--data-dir", data, "--listen", addr, "--app-id", strconv.Itoa(testenv.AppID), "--app-key-file", keyFile,
		"--github-api-url", sim.URL(), "--allow", "acme", "--limits", "cpu=" + strconv.Itoa(limit), "--reconcile-every", "2s",
		// Jobs long enough to be running at the kill and after the restart.
		"--runner", "env SKIFF_STANDIN_DURATION=5s SKIFF_STANDIN_IDLE=20s " + standin}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute) // a safety net, never an assertion
	defer cancel()
	start := func(n int) (*exec.Cmd, string) {
		t.Helper()
		return startSkiff(ctx, t, skiff, dir, n, []string{"SKIFF_WEBHOOK_SECRET=" + secret}, args, "skiff local ready")
	}

	// Watch the runner processes all along: how many are alive at once,
	// and whether any runs in a work directory that was removed.
	var (
		mu       sync.Mutex
		maxAlive int
		deleted  = map[int]string{}
	)
	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for watchCtx.Err() == nil {
			pids := standins(standin)
			mu.Lock()
			maxAlive = max(maxAlive, len(pids))
			for _, pid := range pids {
				if cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid)); err == nil && strings.HasSuffix(cwd, " (deleted)") {
					deleted[pid] = cwd
				}
			}
			mu.Unlock()
			time.Sleep(20 * time.Millisecond) // sampling other processes' state
		}
	}()

	first, log1 := start(1)
	sim.SetWebhook(testenv.AppID, "http://"+addr+"/", secret)
	labels := []string{"self-hosted", "linux", "x64"}
	var jobs []int64
	burst := func(n int) {
		t.Helper()
		spec := ghsim.RunSpec{Repo: "acme/app"}
		for range n {
			spec.Jobs = append(spec.Jobs, ghsim.JobSpec{Labels: labels})
		}
		run, err := sim.StartRun(spec)
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, run.JobIDs...)
	}
	// The kill lands while runners run, in the middle of the next jobs'
	// launch: claims taken, the pool's last slot reserved (local mode caps
	// maxRunners at the limit), its registration held up at GitHub.
	burst(limit - 1)
	waitFor(ctx, t, "runners launched before the kill", func() (bool, string) {
		return count(log1, `"msg":"launched a runner process"`) >= limit-1, readFile(log1)
	})
	sim.SetFault(ghsim.OpGenerateOrgJITConfig, ghsim.Fault{Latency: time.Minute})
	burst(3)
	waitFor(ctx, t, "a launch in flight", func() (bool, string) {
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
	burst(3) // GitHub sends these while skiff is down: the deliveries fail, the reconciler redelivers them
	second, log2 := start(2)
	burst(3)

	waitFor(ctx, t, "every job completed, the ledger and the queue empty, no runner process left", func() (bool, string) {
		var state []string
		done := true
		for _, id := range jobs {
			j, _ := sim.Job(id)
			if j.Status != "completed" {
				done = false
			}
			state = append(state, fmt.Sprintf("job %d %s/%s on %s", id, j.Status, j.Conclusion, j.RunnerName))
		}
		st, err := localStatus(skiff, data, poolsFile)
		if err != nil || st.live != 0 || st.queued != 0 {
			done = false
		}
		alive := standins(standin)
		state = append(state, fmt.Sprintf("status %+v (%v); runner processes %v", st, err, alive))
		return done && len(alive) == 0, strings.Join(state, "\n") + "\n" + readFile(log2)
	})
	stopWatch()
	<-watched
	if err := second.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := second.Wait(); err != nil {
		t.Errorf("skiff local after SIGTERM: %v", err)
	}

	for _, id := range jobs {
		if j, _ := sim.Job(id); j.Status != "completed" || j.Conclusion != "success" {
			t.Errorf("job %d ended %s/%s", id, j.Status, j.Conclusion)
		}
	}
	launches, replaced := map[int64]int{}, map[int64]int{}
	for _, log := range []string{log1, log2} {
		for _, l := range logLines(t, log) {
			switch l.Msg {
			case "launched a runner process":
				launches[l.JobID]++
			case "stranded job: replacement launched":
				replaced[l.JobID]++
			}
		}
	}
	for _, id := range jobs {
		if launches[id] > 1+replaced[id] {
			t.Errorf("job %d had %d runners launched for it and %d logged replacements", id, launches[id], replaced[id])
		}
	}
	if st, err := localStatus(skiff, data, poolsFile); err != nil || st.dead != 0 {
		t.Errorf("dead letters after the run: %+v (%v)", st, err)
	}
	mu.Lock()
	if maxAlive > limit {
		t.Errorf("%d runner processes were alive at once, over the pool's limit of %d", maxAlive, limit)
	}
	for pid, cwd := range deleted {
		t.Errorf("runner process %d ran in a removed work directory %s", pid, cwd)
	}
	mu.Unlock()
	if left := standins(standin); len(left) > 0 {
		t.Errorf("runner processes left after skiff local stopped: %v", left)
	}
	if t.Failed() || os.Getenv("SKIFF_LOCAL_LOGS") != "" {
		t.Logf("first run's log:\n%s\nsecond run's log:\n%s", readFile(log1), readFile(log2))
	}
}

// waitFor polls cond until it holds, and fails the test with cond's last
// state when ctx ends first.
func waitFor(ctx context.Context, t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	for {
		ok, state := cond()
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v\n%s", what, ctx.Err(), state)
		case <-time.After(100 * time.Millisecond): // polling other processes' progress
		}
	}
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
