package process_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/provider/process"
	"github.com/skiffci/skiff/pkg/provider/providertest"
)

// standin is the path of the stand-in runner, built once by TestMain.
var standin string

func TestMain(m *testing.M) {
	if spec := os.Getenv(crashEnv); spec != "" {
		os.Exit(crashingProvider(spec))
	}
	if spec := os.Getenv(usageChildEnv); spec != "" {
		os.Exit(usageChild(spec))
	}
	if os.Getenv(lingerEnv) != "" {
		// Left behind by a hostile job: deaf to the polite signals, it
		// runs until killed.
		signal.Ignore(syscall.SIGTERM, syscall.SIGHUP, syscall.SIGINT)
		for {
			_ = unix.Pause()
		}
	}
	if os.Getenv(hostileEnv) != "" {
		os.Exit(hostileRunner())
	}
	dir, err := os.MkdirTemp("", "skiff-standin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	standin = filepath.Join(dir, "skiff-standin")
	out, err := exec.Command("go", "build", "-o", standin, "github.com/skiffci/skiff/cmd/skiff-standin").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building the stand-in runner: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type env struct {
	p    *process.Provider
	data string
	logs *testenv.SyncBuffer
}

// newProvider starts a provider on a fresh data directory; the cleanup
// closes it and checks that no runner process is left, by pid.
func newProvider(t *testing.T, o process.Options) env {
	t.Helper()
	logs := &testenv.SyncBuffer{}
	if o.DataDir == "" {
		o.DataDir = t.TempDir()
	}
	o.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	p, err := process.New(o)
	if err != nil {
		t.Fatal(err)
	}
	e := env{p: p, data: o.DataDir, logs: logs}
	t.Cleanup(func() {
		ctx, cancel := testenv.AwaitContext(t)
		defer cancel()
		all, _ := p.List(ctx, provider.Filter{})
		if err := p.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
		for _, in := range all {
			if pid, dir, ok := p.Process(in.ID); ok {
				waitGone(t, pid)
				if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s: work directory %s left behind (%v)", in.ID, dir, err)
				}
			}
		}
	})
	return e
}

// waitGone waits (on a pidfd, not a timer loop) until pid has exited, and
// fails the test if it is still running at testenv.AwaitDeadline.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return
	}
	if err != nil {
		t.Fatalf("pidfd_open(%d): %v", pid, err)
	}
	defer unix.Close(fd)
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		timeout := -1 // no deadline: as long as it takes
		if deadline, ok := testenv.AwaitDeadline(t); ok {
			timeout = max(int(time.Until(deadline)/time.Millisecond), 0)
		}
		n, err := unix.Poll(fds, timeout)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n == 0 {
			t.Errorf("process %d is still running (%v)", pid, err)
		}
		return
	}
}

// environ reads a process's initial environment, as the runner sees it.
func environ(pid int) (map[string]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, kv := range bytes.Split(b, []byte{0}) {
		if k, v, ok := strings.Cut(string(kv), "="); ok {
			out[k] = v
		}
	}
	return out, nil
}

func TestConformance(t *testing.T) {
	t.Parallel()
	providertest.Run(t, func(t *testing.T) providertest.Harness {
		e := newProvider(t, process.Options{Command: []string{"sleep", "3600"}, DefaultLimit: 8})
		return providertest.Harness{
			Provider: e.p,
			Spec:     pool.Spec{Shared: pool.Shared{Pool: "conformance", Backend: pool.BackendProcess, MaxLifetime: time.Hour}, Process: &pool.Process{}},
			Delivered: func(id string) (provider.Registration, bool) {
				pid, _, ok := e.p.Process(id)
				if !ok {
					return provider.Registration{}, false
				}
				env, err := environ(pid)
				if err != nil || env[process.EnvJITConfig] == "" {
					return provider.Registration{}, false
				}
				ins, _ := e.p.List(context.Background(), provider.Filter{IDs: []string{id}})
				if len(ins) != 1 {
					return provider.Registration{}, false
				}
				return provider.Registration{Mode: provider.ModeJIT, JITConfig: env[process.EnvJITConfig],
					RunnerName: ins[0].Tags["skiff:runner-name"]}, true
			},
			FailCapacity: e.p.FailCapacity,
			Logs:         e.logs.String,
			Backend:      pool.BackendProcess,
		}
	})
}

// sim is a GitHub simulator with an App installed on acme, and a way to
// register just-in-time runners.
type sim struct {
	*ghsim.Server
	jitConfig func(t testing.TB, name string, labels ...string) string
}

func newSim(t *testing.T) sim {
	t.Helper()
	s, jit := testenv.GitHubJIT(t, "CANARY")
	return sim{Server: s, jitConfig: jit}
}

// jit registers a just-in-time runner for a job labelled label.
func (s sim) jit(t *testing.T, name, label string) provider.Registration {
	t.Helper()
	return provider.Registration{Mode: provider.ModeJIT, JITConfig: s.jitConfig(t, name, label), RunnerName: name}
}

// launchOne launches one runner of pool spec with reg and returns its instance.
func launchOne(t *testing.T, p *process.Provider, spec pool.Spec, token string, reg provider.Registration) provider.Instance {
	t.Helper()
	_, res := providertest.PlanAndLaunch(t, p, provider.Launch{Token: token, Spec: spec,
		Runners: []provider.RunnerRequest{{Name: reg.RunnerName, JobID: 1, RunID: 2, Repository: "acme/app", Owner: "acme"}}},
		[]provider.Registration{reg})
	if res.Runners[0].Err != nil {
		t.Fatalf("Launch: %v", res.Runners[0].Err)
	}
	return res.Runners[0].Instance
}

// TestStandinRunners: the stand-in runner succeeds, crashes, hangs until
// the pool's lifetime cap, or ignores SIGTERM until the kill; every time the
// provider ends it, removes its directory and leaves no process behind —
// including one the job started in the background. In its sandbox and,
// opted out (sandbox: none), as a plain process.
func TestStandinRunners(t *testing.T) {
	t.Parallel()
	for _, sandboxed := range []bool{true, false} {
		t.Run(map[bool]string{true: "sandboxed", false: "unsandboxed"}[sandboxed], func(t *testing.T) {
			t.Parallel()
			if sandboxed {
				if err := process.CheckSandbox(""); err != nil {
					testenv.Missing(t, "a working bubblewrap", fmt.Sprintf("apt-get install bubblewrap (%v)", err))
				}
			}
			standinRunners(t, sandboxed)
		})
	}
}

func standinRunners(t *testing.T, sandboxed bool) {
	cases := []struct {
		name     string
		env      []string
		wantExit int
		wantJob  string // the job's status/conclusion in the simulator
		// capped: the test fires the runner's lifetime cap once the runner
		// has taken its job, and the stop is logged.
		capped bool
	}{
		{"succeeds", []string{"SKIFF_STANDIN_DURATION=50ms"}, 0, "completed/success", false},
		{"crashes", []string{"SKIFF_STANDIN_DURATION=100ms", "SKIFF_STANDIN_CRASH=1"}, 3, "in_progress/", false},
		{"hangs and is stopped at the lifetime cap", []string{"SKIFF_STANDIN_HANG=1"}, 1, "completed/failure", true},
		{"ignores SIGTERM and is killed after the grace", []string{"SKIFF_STANDIN_HANG=hard"}, -1, "in_progress/", true},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if sandboxed && tc.wantExit == -1 {
				tc.wantExit = 128 + int(syscall.SIGKILL) // bwrap reports a signal n as 128+n
			}
			s := newSim(t)
			leftover := filepath.Join(t.TempDir(), "leftover.pid")
			lifetimeCap := &heldCap{}
			e := newProvider(t, process.Options{
				// The job leaves a process behind in the background, as jobs do.
				Command:   []string{"/bin/sh", "-c", `sleep 3600 & echo $! > "$LEFTOVER"; exec "$0"`, standin},
				Env:       append([]string{"LEFTOVER=" + leftover}, tc.env...),
				KillGrace: 300 * time.Millisecond,
				AfterFunc: lifetimeCap.arm,
			})
			run, err := s.StartRun(ghsim.RunSpec{Repo: "acme/app", Jobs: []ghsim.JobSpec{{Labels: []string{"local"}}}})
			if err != nil {
				t.Fatal(err)
			}
			reg := s.jit(t, "standin-"+strconv.Itoa(i), "local")
			spec := pool.Spec{Shared: pool.Shared{Pool: "cpu", MaxLifetime: time.Hour}}
			if !sandboxed {
				spec.Backend, spec.Process = pool.BackendProcess, &pool.Process{Sandbox: pool.SandboxNone}
			}
			in := launchOne(t, e.p, spec, "tok-"+strconv.Itoa(i), reg)
			pid, dir, _ := e.p.Process(in.ID)
			group := process.Group(e.p, in.ID)
			ns := pidNamespace(group)
			if sandboxed == (ns == pidNamespace(os.Getpid())) {
				t.Fatalf("the runner's pid namespace %s, the test's %s: want its own when sandboxed", ns, pidNamespace(os.Getpid()))
			}
			if fi, err := os.Stat(dir); err != nil || !fi.IsDir() || filepath.Dir(dir) != filepath.Join(e.data, "runners") {
				t.Fatalf("work directory %s: %v", dir, err)
			}
			ctx, cancel := testenv.AwaitContext(t)
			defer cancel()
			if tc.capped {
				waitJobTaken(ctx, t, s, run.JobIDs[0], reg.RunnerName)
				lifetimeCap.fire(t)
			}
			code, err := e.p.Wait(ctx, in.ID)
			if err != nil {
				t.Fatal(err)
			}
			if code != tc.wantExit {
				t.Errorf("exit code %d, want %d; logs:\n%s", code, tc.wantExit, e.logs)
			}
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("work directory %s still there after the runner ended (%v)", dir, err)
			}
			checkNothingLeft(t, pid, group, ns, leftover, sandboxed)
			got, _ := e.p.List(ctx, provider.Filter{IDs: []string{in.ID}})
			if len(got) != 1 || got[0].State != provider.Terminated {
				t.Errorf("instance after the runner ended: %+v, want terminated", got)
			}
			js, _ := s.Job(run.JobIDs[0])
			if js.Status+"/"+js.Conclusion != tc.wantJob || js.RunnerName != reg.RunnerName {
				t.Errorf("job %+v, want %s on %s", js, tc.wantJob, reg.RunnerName)
			}
			if logged := strings.Contains(e.logs.String(), `"why":"lifetime"`); logged != tc.capped {
				t.Errorf("lifetime stop logged = %v, want %v:\n%s", logged, tc.capped, e.logs)
			}
			for _, secret := range s.Secrets() {
				if strings.Contains(e.logs.String(), secret) {
					t.Fatal("a credential reached the provider's logs")
				}
			}
		})
	}
}

// heldCap is a lifetime cap the test fires itself (process.Options.AfterFunc).
type heldCap struct {
	mu    sync.Mutex
	fired func()
}

func (c *heldCap) arm(_ time.Duration, f func()) process.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fired = f
	return c
}

// Stop disarms the cap: a runner that ended by itself is not stopped.
func (c *heldCap) Stop() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	armed := c.fired != nil
	c.fired = nil
	return armed
}

// fire runs the cap as its timer would when the lifetime ends.
func (c *heldCap) fire(t *testing.T) {
	t.Helper()
	c.mu.Lock()
	f := c.fired
	c.mu.Unlock()
	if f == nil {
		t.Fatal("no lifetime cap armed for the runner")
	}
	f()
}

// waitJobTaken waits until the simulator has job id in progress on runner
// name, and fails t if ctx ends first.
func waitJobTaken(ctx context.Context, t *testing.T, s sim, id int64, name string) {
	t.Helper()
	for {
		if js, _ := s.Job(id); js.Status == "in_progress" && js.RunnerName == name {
			return
		}
		select {
		case <-ctx.Done():
			js, _ := s.Job(id)
			t.Fatalf("the runner never took its job: %+v", js)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// checkNothingLeft waits for the runner (pid, its group's leader group) to
// be gone, and fails t if anything of it outlives it: in its sandbox's
// pid namespace ns when sandboxed, else the job's background process,
// whose pid it wrote to leftover.
func checkNothingLeft(t *testing.T, pid, group int, ns, leftover string, sandboxed bool) {
	t.Helper()
	waitGone(t, pid)
	if sandboxed {
		// Its /tmp was its own: the leftover is found by its
		// namespace, which must be empty once its init is gone.
		waitGone(t, group)
		if left := inNamespace(ns); len(left) > 0 {
			t.Errorf("processes %v of the runner's sandbox outlived it", left)
		}
	} else if b, err := os.ReadFile(leftover); err != nil {
		t.Errorf("the job's background process did not report its pid: %v", err)
	} else if lp, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
		waitGone(t, lp)
	}
}

// TestCleanEnvironment: a runner sees only PATH, HOME (its work
// directory), TMPDIR, its instance id, its JIT configuration and the extras.
func TestCleanEnvironment(t *testing.T) {
	t.Parallel()
	e := newProvider(t, process.Options{Command: []string{"sleep", "3600"}, Env: []string{"RUNNER_ALLOW_RUNASROOT=1"}, Path: "/usr/bin:/bin"})
	in := launchOne(t, e.p, pool.Spec{Shared: pool.Shared{Pool: "cpu"}}, "tok-env", provider.Registration{Mode: provider.ModeJIT, JITConfig: "CANARYJIT", RunnerName: "r"})
	pid, dir, _ := e.p.Process(in.ID)
	got, err := environ(pid)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"PATH": "/usr/bin:/bin", "HOME": dir, "TMPDIR": filepath.Join(dir, "tmp"), "SKIFF_INSTANCE_ID": in.ID,
		process.EnvJITConfig: "CANARYJIT", "RUNNER_ALLOW_RUNASROOT": "1", provider.EnvDeprecatedExitCode: "1"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("environment %v\nwant %v", got, want)
	}
	if strings.Contains(e.logs.String(), "CANARYJIT") {
		t.Error("the JIT configuration reached the logs")
	}
	if in.Zone != "local" || in.Capacity != provider.OnDemand || in.InstanceType != "local" || !strings.HasPrefix(in.ID, "proc-") {
		t.Errorf("instance %+v", in)
	}
}

// TestPoolLimit: a pool runs at most its limit of runners; a launch beyond
// it is a retryable capacity error per runner, at once; a runner that ended
// frees its place.
func TestPoolLimit(t *testing.T) {
	t.Parallel()
	e := newProvider(t, process.Options{Command: []string{"sleep", "3600"}, Limits: map[string]int{"gpu": 1, "off": 0}})
	ctx := context.Background()
	reg := func(n string) provider.Registration {
		return provider.Registration{Mode: provider.ModeJIT, JITConfig: "CANARY" + n, RunnerName: n}
	}
	pl, err := e.p.Plan(ctx, provider.Launch{Token: "tok-gpu", Spec: pool.Spec{Shared: pool.Shared{Pool: "gpu", Backend: pool.BackendEC2}, EC2: &pool.EC2{InstanceTypes: []string{"rtx-4090"}}},
		Runners: []provider.RunnerRequest{{Name: "a", JobID: 1}, {Name: "b", JobID: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.p.Launch(ctx, pl, []provider.Registration{reg("a"), reg("b")})
	if err != nil || res.Runners[0].Err != nil || !errors.Is(res.Runners[1].Err, provider.ErrCapacity) || provider.Permanent(res.Runners[1].Err) {
		t.Fatalf("launch of 2 into a pool of 1: %+v, %v; want the first launched, the second a retryable ErrCapacity", res, err)
	}
	first := res.Runners[0].Instance
	if first.InstanceType != "local" {
		t.Errorf("instance type %q, want local (a process runs on this machine, not on the pool's EC2 types)", first.InstanceType)
	}
	spec := pool.Spec{Shared: pool.Shared{Pool: "gpu"}}
	one := func(token, name string) error {
		pl, _ := e.p.Plan(ctx, provider.Launch{Token: token, Spec: spec, Runners: []provider.RunnerRequest{{Name: name}}})
		_, err := e.p.Launch(ctx, pl, []provider.Registration{reg(name)})
		return err
	}
	if err := one("tok-full", "c"); !errors.Is(err, provider.ErrCapacity) {
		t.Errorf("launch into a full pool: %v, want ErrCapacity", err)
	}
	spec.Pool = "off"
	if err := one("tok-off", "d"); !errors.Is(err, provider.ErrCapacity) {
		t.Errorf("launch into a pool of limit 0: %v, want ErrCapacity", err)
	}
	spec.Pool = "gpu"
	if err := e.p.Terminate(ctx, []string{first.ID}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := testenv.AwaitContext(t)
	defer cancel()
	if _, err := e.p.Wait(wctx, first.ID); err != nil {
		t.Fatal(err)
	}
	if err := one("tok-freed", "e"); err != nil {
		t.Errorf("launch after the pool's runner ended: %v", err)
	}
}

// TestReplayAndRestart: a token replayed after a restart launched nothing
// here (a permanent error, so scale-up completes it); instance ids keep
// counting up across restarts; a token registration is refused.
func TestReplayAndRestart(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	ctx := context.Background()
	spec := pool.Spec{Shared: pool.Shared{Pool: "cpu"}}
	l := provider.Launch{Token: "tok-restart", Spec: spec, Runners: []provider.RunnerRequest{{Name: "a"}}}
	e1 := newProvider(t, process.Options{Command: []string{"sleep", "3600"}, DataDir: data})
	pl, _ := e1.p.Plan(ctx, l)
	res, err := e1.p.Launch(ctx, pl, []provider.Registration{{Mode: provider.ModeJIT, JITConfig: "x", RunnerName: "a"}})
	if err != nil {
		t.Fatal(err)
	}
	firstID := res.Runners[0].Instance.ID
	if err := e1.p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Room for two runners whatever the machine's CPUs (the default limit):
	// the token-mode launch below must meet its mode check, not the limit.
	e2 := newProvider(t, process.Options{Command: []string{"sleep", "3600"}, DataDir: data, Limits: map[string]int{"cpu": 2}})
	if _, err := e2.p.Launch(ctx, pl, nil); !errors.Is(err, provider.ErrInvalid) || !provider.Permanent(err) {
		t.Errorf("replay of a token from before the restart: %v, want a permanent ErrInvalid", err)
	}
	in := launchOne(t, e2.p, spec, "tok-after", provider.Registration{Mode: provider.ModeJIT, JITConfig: "y", RunnerName: "b"})
	n1, _ := strconv.Atoi(strings.TrimPrefix(firstID, "proc-"))
	n2, _ := strconv.Atoi(strings.TrimPrefix(in.ID, "proc-"))
	if n2 <= n1 {
		t.Errorf("id after a restart %s, want one after %s", in.ID, firstID)
	}
	pl, _ = e2.p.Plan(ctx, provider.Launch{Token: "tok-token-mode", Spec: spec, Runners: []provider.RunnerRequest{{Name: "c"}}})
	if _, err := e2.p.Launch(ctx, pl, []provider.Registration{{Mode: provider.ModeToken, Token: "t", RunnerName: "c"}}); !errors.Is(err, provider.ErrInvalid) {
		t.Errorf("token registration: %v, want ErrInvalid", err)
	}
}

func TestNewRefusesBadOptions(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		o    process.Options
		want string
	}{
		{"no command", process.Options{DataDir: t.TempDir()}, "Command"},
		{"no data directory", process.Options{Command: []string{"sleep"}}, "DataDir"},
		{"command not found", process.Options{Command: []string{"no-such-runner-xyz"}, DataDir: t.TempDir()}, "no-such-runner-xyz"},
		{"extra sets the JIT configuration", process.Options{Command: []string{"sleep"}, DataDir: t.TempDir(), Env: []string{process.EnvJITConfig + "=x"}}, process.EnvJITConfig},
		{"extra sets HOME", process.Options{Command: []string{"sleep"}, DataDir: t.TempDir(), Env: []string{"HOME=/"}}, "HOME"},
		{"extra is not KEY=VALUE", process.Options{Command: []string{"sleep"}, DataDir: t.TempDir(), Env: []string{"JUSTAKEY"}}, "KEY=VALUE"},
		{"negative limit", process.Options{Command: []string{"sleep"}, DataDir: t.TempDir(), Limits: map[string]int{"gpu": -1}}, "gpu"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := process.New(tc.o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New = %v, want an error naming %s", err, tc.want)
			}
		})
	}
	// A work directory left by a crashed provider is removed.
	data := t.TempDir()
	stale := filepath.Join(data, "runners", "proc-7")
	if err := os.MkdirAll(stale, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := process.New(process.Options{Command: []string{"sleep"}, DataDir: data}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale work directory survived: %v", err)
	}
}

// TestEnded: a runner whose process exits is told of at once on Ended, and
// the List after it shows the runner terminated; two ends before the
// receiver looks coalesce into one value whose List shows both.
func TestEnded(t *testing.T) {
	t.Parallel()
	e := newProvider(t, process.Options{Command: []string{"true"}, DefaultLimit: 4})
	ctx := context.Background()
	spec := pool.Spec{Shared: pool.Shared{Pool: "cpu"}}
	reg := func(n string) provider.Registration {
		return provider.Registration{Mode: provider.ModeJIT, JITConfig: "CANARY" + n, RunnerName: n}
	}
	ended := func(want ...string) {
		t.Helper()
		<-e.p.Ended() // no timer: the test binary's own -timeout is the safety net
		all, err := e.p.List(ctx, provider.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		gone := map[string]bool{}
		for _, in := range all {
			gone[in.ID] = !in.State.Alive()
		}
		for _, id := range want {
			if !gone[id] {
				t.Errorf("after Ended, %s is listed alive or not at all: %+v", id, all)
			}
		}
	}
	first := launchOne(t, e.p, spec, "tok-1", reg("a"))
	ended(first.ID)
	second := launchOne(t, e.p, spec, "tok-2", reg("b"))
	third := launchOne(t, e.p, spec, "tok-3", reg("c"))
	for _, id := range []string{second.ID, third.ID} {
		wctx, cancel := testenv.AwaitContext(t)
		if _, err := e.p.Wait(wctx, id); err != nil {
			t.Fatal(err)
		}
		cancel()
	}
	ended(second.ID, third.ID)
	select {
	case <-e.p.Ended():
		t.Error("a second value for ends already received")
	default:
	}
}

// TestOutdatedRunner: a runner that exits with the deprecation exit code
// is listed ended with the skiff:runner-outdated tag, naming the version its
// directory's listener reports when it has one; any other end is not.
func TestOutdatedRunner(t *testing.T) {
	t.Parallel()
	const refuse = `[ "$ACTIONS_RUNNER_RETURN_VERSION_DEPRECATED_EXIT_CODE" = 1 ] && exit 7; exit 0`
	for _, tc := range []struct {
		name    string
		command []string
		// listener, when set, puts the command in a runner directory as
		// run.sh beside a bin/Runner.Listener that prints this version.
		listener string
		tagged   string // the outdated tag's value, "" for none
	}{
		{"exit 7 when the variable is on", []string{"sh", "-c", refuse}, "", "unknown"},
		{"exit 7 from a runner directory", []string{refuse}, "2.330.0", "2.330.0"},
		{"exit 0", []string{"true"}, "", ""},
		{"exit 1", []string{"false"}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			command := tc.command
			if tc.listener != "" {
				dir := t.TempDir()
				script := func(path, body string) {
					if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
						t.Fatal(err)
					}
					testenv.WriteExecutable(t, path, []byte("#!/bin/sh\n"+body+"\n"))
				}
				script(filepath.Join(dir, "bin", "Runner.Listener"), `[ "$1" = --version ] && echo `+tc.listener)
				script(filepath.Join(dir, "run.sh"), command[0])
				command = []string{filepath.Join(dir, "run.sh")}
			}
			e := newProvider(t, process.Options{Command: command, Path: "/usr/bin:/bin"})
			in := launchOne(t, e.p, pool.Spec{Shared: pool.Shared{Pool: "cpu"}}, "tok-outdated",
				provider.Registration{Mode: provider.ModeJIT, JITConfig: "CANARYJIT", RunnerName: "r"})
			wctx, cancel := testenv.AwaitContext(t)
			defer cancel()
			if _, err := e.p.Wait(wctx, in.ID); err != nil {
				t.Fatal(err)
			}
			all, err := e.p.List(context.Background(), provider.Filter{IDs: []string{in.ID}})
			if err != nil || len(all) != 1 {
				t.Fatalf("list %+v %v", all, err)
			}
			if got := all[0].Tags[names.TagRunnerOutdated]; got != tc.tagged {
				t.Errorf("tagged outdated %q, want %q: %+v", got, tc.tagged, all[0])
			}
			if got := all[0].Tags[names.TagRunnerVersion]; got != tc.listener {
				t.Errorf("runner version tag %q, want %q", got, tc.listener)
			}
		})
	}
}
