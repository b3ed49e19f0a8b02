package process_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/provider/process"
)

// crashEnv makes the test binary a provider that launches runners and
// waits to be killed (crashingProvider).
const crashEnv = "SKIFF_PROCESS_TEST_CRASH"

// crashSpec is what the crashing provider launches.
type crashSpec struct {
	DataDir  string
	Command  []string
	Env      []string
	Lifetime time.Duration
	Runners  int
	// Unsandboxed runs the runners as plain processes (sandbox: none).
	Unsandboxed bool
	// NoCgroups starts them without cgroups (whose removal would kill
	// what is left in them).
	NoCgroups bool
}

// crashed is what it launched: the plan, and each runner's id and pid.
type crashed struct {
	Plan string
	IDs  []string
	PIDs []int
	// Groups are the runners' process groups (their sandboxes' inits).
	Groups []int
}

// crashingProvider runs in a child process: a provider on the spec's data
// directory launches the runners under one token, prints what it
// launched, and waits for its SIGKILL.
func crashingProvider(spec string) int {
	var s crashSpec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// The limit is the spec's, not the default (the machine's CPUs: one
	// under taskset -c 0, which refused the second runner).
	p, err := process.New(process.Options{Command: s.Command, DataDir: s.DataDir, Env: s.Env, Limits: map[string]int{"cpu": s.Runners},
		Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if s.NoCgroups {
		process.WithoutCgroups(p)
	}
	ctx := context.Background()
	l := provider.Launch{Token: "tok-crash", Spec: pool.Spec{Shared: pool.Shared{Pool: "cpu", MaxLifetime: s.Lifetime}}}
	if s.Unsandboxed {
		l.Spec.Backend, l.Spec.Process = pool.BackendProcess, &pool.Process{Sandbox: pool.SandboxNone}
	}
	var regs []provider.Registration
	for i := range s.Runners {
		name := "crash-" + strconv.Itoa(i)
		l.Runners = append(l.Runners, provider.RunnerRequest{Name: name, JobID: int64(100 + i), RunID: 99, Repository: "acme/app", Owner: "acme"})
		regs = append(regs, provider.Registration{Mode: provider.ModeJIT, JITConfig: "CANARYCRASH", RunnerName: name})
	}
	pl, err := p.Plan(ctx, l)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	res, err := p.Launch(ctx, pl, regs)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	out := crashed{Plan: string(pl)}
	for _, r := range res.Runners {
		if r.Err != nil { // Launch succeeds when any runner launched
			fmt.Fprintln(os.Stderr, r.Err)
			return 1
		}
		pid, _, _ := p.Process(r.Instance.ID)
		out.IDs, out.PIDs = append(out.IDs, r.Instance.ID), append(out.PIDs, pid)
		out.Groups = append(out.Groups, process.Group(p, r.Instance.ID))
	}
	_ = json.NewEncoder(os.Stdout).Encode(out)
	select {} // until the SIGKILL
}

// crash runs a crashing provider and kills it with SIGKILL once it has
// launched, as `kill -9` kills skiff local: its runners live on, orphaned.
func crash(t *testing.T, s crashSpec) crashed {
	t.Helper()
	b, _ := json.Marshal(s)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashEnv+"="+string(b))
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var c crashed
	line, err := bufio.NewReader(stdout).ReadBytes('\n')
	if err == nil {
		err = json.Unmarshal(line, &c)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	t.Cleanup(func() { // a net: the runners never outlive the test
		for i, pid := range c.PIDs {
			if pid <= 1 {
				continue // -0 is 0, which kill(2) reads as the test's own process group; -1 is every process
			}
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			if i < len(c.Groups) && c.Groups[i] > 1 && c.Groups[i] != pid && startTicks(c.Groups[i]) != "" {
				_ = syscall.Kill(c.Groups[i], syscall.SIGKILL) // its sandbox, with it all in it
			}
		}
	})
	ok := err == nil && len(c.IDs) == s.Runners && len(c.PIDs) == s.Runners && len(c.Groups) == s.Runners
	for i := 0; ok && i < s.Runners; i++ {
		ok = c.IDs[i] != "" && c.PIDs[i] > 1 && c.Groups[i] > 1
	}
	if !ok {
		t.Fatalf("the crashing provider launched %+v (%v)", c, err)
	}
	return c
}

// stat returns the fields of /proc/<pid>/stat after the command's name
// (the state first), or nil.
func stat(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	s := string(b)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
}

// alive reports whether pid runs (a zombie has exited).
func alive(pid int) bool {
	f := stat(pid)
	return len(f) > 0 && f[0] != "Z"
}

// startTicks is when pid started, in clock ticks after boot ("" when it is gone).
func startTicks(pid int) string {
	if f := stat(pid); len(f) >= 20 {
		return f[19]
	}
	return ""
}

// The adoption tests (TestAdopt*): a provider killed with SIGKILL leaves its runners
// running; the next provider on the same data directory adopts those
// still alive (listed as running with their instance, counted in the
// pool's limit, found by a replay of their token, stopped by Terminate and
// at the end of their lifetime, reaped with their directory), lists those
// that ended meanwhile as terminated and kills what they left in their
// process group, and leaves alone a process that merely has a recorded pid.

// TestAdoptLiveRunners: live runners are adopted.
func TestAdoptLiveRunners(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	data := t.TempDir()
	c := crash(t, crashSpec{DataDir: data, Command: []string{"sleep", "3600"}, Lifetime: time.Hour, Runners: 2})
	for _, pid := range c.PIDs {
		if !alive(pid) {
			t.Fatalf("runner %d did not outlive its provider", pid)
		}
	}
	e := newProvider(t, process.Options{Command: []string{"sleep", "3600"}, DataDir: data, Limits: map[string]int{"cpu": 2}, KillGrace: time.Second})
	got, err := e.p.List(ctx, provider.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("after the crash the provider lists %+v, want the 2 runners", got)
	}
	for i, in := range got {
		pid, dir, _ := e.p.Process(in.ID)
		if in.ID != c.IDs[i] || in.State != provider.Running || pid != c.PIDs[i] || in.Pool != "cpu" ||
			in.Tags[names.TagJobID] != strconv.Itoa(100+i) || in.Tags[names.TagLaunchToken] != "tok-crash" {
			t.Errorf("adopted runner %d: %+v pid %d, want %s running as pid %d", i, in, pid, c.IDs[i], c.PIDs[i])
		}
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			t.Errorf("the adopted runner's work directory %s: %v", dir, err)
		}
	}
	res, err := e.p.Launch(ctx, provider.Plan(c.Plan), nil)
	if err != nil || len(res.Runners) != 2 || res.Runners[0].Instance.ID != c.IDs[0] || res.Runners[1].Instance.ID != c.IDs[1] {
		t.Errorf("replay of the crashed provider's token: %+v, %v; want its 2 runners", res, err)
	}
	pl, _ := e.p.Plan(ctx, provider.Launch{Token: "tok-more", Spec: pool.Spec{Shared: pool.Shared{Pool: "cpu"}}, Runners: []provider.RunnerRequest{{Name: "more"}}})
	if _, err := e.p.Launch(ctx, pl, []provider.Registration{{Mode: provider.ModeJIT, JITConfig: "x", RunnerName: "more"}}); !errors.Is(err, provider.ErrCapacity) {
		t.Errorf("a launch into the pool its adopted runners fill: %v, want ErrCapacity", err)
	}
	if !strings.Contains(e.logs.String(), "adopted a runner process") {
		t.Errorf("no adoption logged:\n%s", e.logs)
	}
	if err := e.p.Terminate(ctx, []string{c.IDs[0]}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := testenv.AwaitContext(t)
	defer cancel()
	if code, err := e.p.Wait(wctx, c.IDs[0]); err != nil || code != -1 {
		t.Errorf("Wait for the terminated adopted runner: %d, %v; want -1 (its status is its new parent's)", code, err)
	}
	waitGone(t, c.PIDs[0])
	if _, err := os.Stat(filepath.Join(data, "procs", c.IDs[0]+".json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the ended runner's record is still there (%v)", err)
	}
}

// TestAdoptedLifetimeEnds: an adopted runner's lifetime still ends.
func TestAdoptedLifetimeEnds(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	c := crash(t, crashSpec{DataDir: data, Command: []string{"sleep", "3600"}, Lifetime: 2 * time.Second, Runners: 1})
	e := newProvider(t, process.Options{Command: []string{"sleep", "3600"}, DataDir: data, KillGrace: time.Second})
	wctx, cancel := testenv.AwaitContext(t)
	defer cancel()
	if _, err := e.p.Wait(wctx, c.IDs[0]); err != nil {
		t.Fatal(err)
	}
	waitGone(t, c.PIDs[0])
	if !strings.Contains(e.logs.String(), `"why":"lifetime"`) {
		t.Errorf("the adopted runner was not stopped at its lifetime:\n%s", e.logs)
	}
}

// TestAdoptEndedRunner: a runner that ended meanwhile is terminated and its
// leftovers killed.
func TestAdoptEndedRunner(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	data := t.TempDir()
	leftover := filepath.Join(t.TempDir(), "leftover.pid")
	// The job leaves a process behind in its group, and the runner
	// exits while no provider runs.
	c := crash(t, crashSpec{DataDir: data, Command: []string{"/bin/sh", "-c", `sleep 3600 & echo $! > "$LEFTOVER"; sleep 1`},
		Env: []string{"LEFTOVER=" + leftover}, Lifetime: time.Hour, Runners: 1, Unsandboxed: true})
	waitGone(t, c.PIDs[0])
	b, err := os.ReadFile(leftover)
	lp, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || !alive(lp) {
		t.Fatalf("the job's leftover %q did not outlive its runner (%v)", b, err)
	}
	t.Cleanup(func() { _ = syscall.Kill(lp, syscall.SIGKILL) })
	e := newProvider(t, process.Options{Command: []string{"sleep", "3600"}, DataDir: data})
	got, _ := e.p.List(ctx, provider.Filter{IDs: c.IDs})
	if len(got) != 1 || got[0].State != provider.Terminated {
		t.Errorf("the runner that ended while no provider ran: %+v, want it listed terminated", got)
	}
	waitGone(t, lp)
	res, err := e.p.Launch(ctx, provider.Plan(c.Plan), nil)
	if err != nil || res.Runners[0].Err != nil || res.Runners[0].Instance.State != provider.Terminated {
		t.Errorf("replay of its token: %+v, %v; want the terminated runner", res, err)
	}
	if _, err := os.Stat(filepath.Join(data, "runners", c.IDs[0])); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("its work directory is still there (%v)", err)
	}
}

// TestAdoptEndedSandboxedRunner: a sandboxed runner that ended meanwhile is
// terminated and its sandbox ended.
func TestAdoptEndedSandboxedRunner(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	if err := process.CheckSandbox(""); err != nil {
		testenv.Missing(t, "a working bubblewrap", "apt-get install bubblewrap ("+err.Error()+")")
	}
	data := t.TempDir()
	// The job leaves a process behind, in a session of its own, and
	// the runner exits while no provider runs: the sandbox's init
	// lives on with the leftover.
	c := crash(t, crashSpec{DataDir: data, Command: []string{"/bin/sh", "-c", `setsid sleep 3600 & sleep 1`}, Lifetime: time.Hour, Runners: 1,
		NoCgroups: true})
	waitGone(t, c.PIDs[0])
	ns := pidNamespace(c.Groups[0])
	if ns == "" || !alive(c.Groups[0]) {
		t.Fatalf("the sandbox did not outlive its runner with the leftover in it (%q)", ns)
	}
	e := newProvider(t, process.Options{Command: []string{"sleep", "3600"}, DataDir: data})
	got, _ := e.p.List(ctx, provider.Filter{IDs: c.IDs})
	if len(got) != 1 || got[0].State != provider.Terminated {
		t.Errorf("the runner that ended while no provider ran: %+v, want it listed terminated", got)
	}
	waitGone(t, c.Groups[0])
	if left := inNamespace(ns); len(left) > 0 {
		t.Errorf("processes %v of its sandbox outlived it", left)
	}
}

// TestAdoptNoRecycledPID: a recycled pid is not taken for a runner.
func TestAdoptNoRecycledPID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	data := t.TempDir()
	c := crash(t, crashSpec{DataDir: data, Command: []string{"sleep", "3600"}, Lifetime: time.Hour, Runners: 1})
	_ = syscall.Kill(-c.PIDs[0], syscall.SIGKILL)
	waitGone(t, c.PIDs[0])
	recFile := filepath.Join(data, "procs", c.IDs[0]+".json")
	var rec struct {
		Identity struct {
			Start uint64 `json:"start_ticks"`
		} `json:"identity"`
	}
	var raw map[string]any
	b, err := os.ReadFile(recFile)
	if err == nil {
		err = errors.Join(json.Unmarshal(b, &rec), json.Unmarshal(b, &raw))
	}
	if err != nil || rec.Identity.Start == 0 {
		t.Fatalf("the runner's record %s: %v", b, err)
	}
	// Another process (its own group's leader, as a runner is) now has
	// the pid the record names; it started later, as a process that
	// got a recycled pid did (start times count clock ticks: one that
	// started in the runner's tick is started again).
	var other *exec.Cmd
	for other == nil || startTicks(other.Process.Pid) == strconv.FormatUint(rec.Identity.Start, 10) {
		if other != nil {
			_ = other.Process.Kill()
			_ = other.Wait()
		}
		other = exec.Command("sleep", "3600")
		other.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := other.Start(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		if other.ProcessState == nil {
			_ = other.Process.Kill()
			_ = other.Wait()
		}
	})
	raw["pid"] = other.Process.Pid
	b, _ = json.Marshal(raw)
	if err := os.WriteFile(recFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	e := newProvider(t, process.Options{Command: []string{"sleep", "3600"}, DataDir: data})
	got, _ := e.p.List(ctx, provider.Filter{IDs: c.IDs})
	if len(got) != 1 || got[0].State != provider.Terminated {
		t.Errorf("a record whose pid is another process's: %+v, want the runner terminated", got)
	}
	// Ended by our SIGTERM, not by a SIGKILL of the provider's.
	_ = other.Process.Signal(syscall.SIGTERM)
	_ = other.Wait()
	if ws := other.ProcessState.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Errorf("the process with the recycled pid ended with %v, want our SIGTERM: the provider signalled it", other.ProcessState)
	}
}
