package slurm_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/provider/providertest"
	"github.com/skiffci/skiff/pkg/provider/slurm"
)

// cluster is a test's Slurm cluster and a directory the jobs share with
// the test (the "shared filesystem").
type cluster struct {
	*testenv.Slurm
	shared string
}

var prefixes atomic.Int64

func startCluster(t *testing.T, o testenv.SlurmOptions) cluster {
	t.Helper()
	s := testenv.StartSlurm(t, o)
	shared := filepath.Join(s.Dir, "shared")
	if err := os.Mkdir(shared, 0o755); err != nil {
		t.Fatal(err)
	}
	return cluster{Slurm: s, shared: shared}
}

type env struct {
	p    *slurm.Provider
	o    slurm.Options
	logs *testenv.SyncBuffer
	// out is where the test runner command reports what it saw, one file
	// per instance.
	out string
	// sections are the pools' slurm: sections, by pool.
	sections map[string]*pool.Slurm
}

// spec is a launch spec of pool name, with its slurm: section if it has one.
func (e env) spec(name string) pool.Spec {
	return pool.Spec{Shared: pool.Shared{Pool: name, MaxLifetime: time.Hour}, Slurm: e.sections[name]}
}

// recorder is a runner command that writes what it was given (its JIT
// configuration, whether the JIT file was still there, its work directory)
// to $OUT/<instance>, then runs "$@".
const recorder = `printf '%s\n%s\n%s\n' "$ACTIONS_RUNNER_INPUT_JITCONFIG" "$(ls "$JITDIR" | grep -c "$SLURM_JOB_NAME")" "$HOME" > "$OUT/$SKIFF_INSTANCE_ID.tmp" && mv "$OUT/$SKIFF_INSTANCE_ID.tmp" "$OUT/$SKIFF_INSTANCE_ID"; exec "$@"`

// newEnv is a provider on c whose runners record what they saw, then run then.
func (c cluster) newEnv(t *testing.T, sections map[string]*pool.Slurm, then ...string) env {
	t.Helper()
	n := prefixes.Add(1)
	dir := filepath.Join(c.shared, "p"+strconv.FormatInt(n, 10))
	out := filepath.Join(dir, "out")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	logs := &testenv.SyncBuffer{}
	jitDir := filepath.Join(dir, "jit")
	o := slurm.Options{
		Commander:  slurm.Exec{Env: []string{"SLURM_CONF=" + c.Conf}},
		NamePrefix: "skiff" + strconv.FormatInt(n, 10) + ".",
		Cluster:    "skifftest",
		JITDir:     jitDir,
		WorkDir:    filepath.Join(dir, "work"),
		Command:    append([]string{"/bin/sh", "-c", recorder, "recorder"}, then...),
		Env:        []string{"OUT=" + out, "JITDIR=" + jitDir},
		LogDir:     filepath.Join(dir, "log"),
		Logger:     slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if err := os.MkdirAll(o.LogDir, 0o755); err != nil {
		t.Fatal(err)
	}
	p, err := slurm.New(o)
	if err != nil {
		t.Fatal(err)
	}
	// Cancel what is left, so that the cluster's stop is quick.
	providertest.TerminateAtCleanup(t, p, provider.Filter{AliveOnly: true})
	return env{p: p, o: o, logs: logs, out: out, sections: sections}
}

// seen is what a runner recorded.
type seen struct {
	JIT      string
	FileLeft bool
	Home     string
}

// waitSeen waits until the runner of instance id has recorded what it saw.
func (e env) waitSeen(t *testing.T, id string) seen {
	t.Helper()
	var b []byte
	poll(t, "runner "+id+" to start", func() bool {
		var err error
		b, err = os.ReadFile(filepath.Join(e.out, id))
		return err == nil
	})
	lines := strings.Split(string(b), "\n")
	if len(lines) < 3 {
		t.Fatalf("runner %s recorded %q", id, b)
	}
	return seen{JIT: lines[0], FileLeft: lines[1] != "0", Home: lines[2]}
}

// poll checks cond every 20 ms until it holds: Slurm tells of its jobs
// only when asked.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.Await(t, what, 20*time.Millisecond, cond, nil)
}

// waitState waits until instance id is in state st, and returns it.
func (e env) waitState(t *testing.T, id string, st provider.State) provider.Instance {
	t.Helper()
	var in provider.Instance
	poll(t, "instance "+id+" to be "+string(st), func() bool {
		got, err := e.p.List(context.Background(), provider.Filter{IDs: []string{id}})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 1 {
			in = got[0]
		}
		return len(got) == 1 && got[0].State == st
	})
	return in
}

func launchN(t *testing.T, p *slurm.Provider, spec pool.Spec, token string, n int) (provider.Plan, []provider.Registration, provider.Result) {
	t.Helper()
	l := provider.Launch{Token: token, Spec: spec}
	var regs []provider.Registration
	for i := range n {
		name := fmt.Sprintf("runner-%s-%d", token, i)
		l.Runners = append(l.Runners, provider.RunnerRequest{Name: name, JobID: int64(1000 + i), RunID: 9, Repository: "acme/app", Owner: "acme"})
		regs = append(regs, provider.Registration{Mode: provider.ModeJIT, JITConfig: fmt.Sprintf("CANARYJIT-%s-%d", token, i), RunnerName: name})
	}
	plan, res := providertest.PlanAndLaunch(t, p, l, regs)
	return plan, regs, res
}

func TestConformance(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testenv.SlurmOptions{CPUs: 32, Partitions: []string{"held State=DOWN"}})
	providertest.Run(t, func(t *testing.T) providertest.Harness {
		e := c.newEnv(t, nil, "sleep", "3600")
		// The pool's section: HoldInQueue sends later launches to a
		// partition that is down, where they wait for PartitionDown;
		// Dequeue moves a job to the partition that is up, and Slurm
		// starts it when it next schedules.
		section := &pool.Slurm{}
		return providertest.Harness{
			Provider: e.p,
			Spec:     pool.Spec{Shared: pool.Shared{Pool: "conformance", MaxLifetime: time.Hour}, Slurm: section},
			Delivered: func(id string) (provider.Registration, bool) {
				s := e.waitSeen(t, id)
				ins, _ := e.p.List(context.Background(), provider.Filter{IDs: []string{id}})
				if len(ins) != 1 || s.JIT == "" {
					return provider.Registration{}, false
				}
				return provider.Registration{Mode: provider.ModeJIT, JITConfig: s.JIT, RunnerName: ins[0].Tags[names.TagRunnerName]}, true
			},
			FailCapacity: e.p.FailCapacity,
			Logs:         e.logs.String,
			HoldInQueue:  func(string) { section.Partition = "held" },
			HeldReason:   "PartitionDown",
			Dequeue: func(ids ...string) {
				for _, id := range ids {
					if out, err := c.Command("scontrol", "update", "JobId="+id, "Partition=debug").CombinedOutput(); err != nil {
						t.Fatalf("scontrol update JobId=%s Partition=debug: %v: %s", id, err, out)
					}
				}
			},
			Await: func(what string, cond func() bool) { poll(t, what, cond) },
		}
	})
}

// TestRegistrationFile: the JIT configuration travels in a 0600 file of a
// 0700 directory, which another Unix user can neither read nor find
// through scontrol; it is not in the batch script; the job reads and
// deletes it before the runner starts; a job cancelled while pending
// leaves no file behind.
func TestRegistrationFile(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testenv.SlurmOptions{Partitions: []string{"held State=DOWN"}})
	other := testenv.SecondUser(t)
	e := c.newEnv(t, map[string]*pool.Slurm{"held": {Partition: "held"}}, "true")

	// Held: the partition is down, so the job waits with Slurm's reason.
	_, regs, res := launchN(t, e.p, e.spec("held"), "tok-held", 1)
	held := res.Runners[0].Instance
	// Until the node registers, Slurm's reason is the node's; then the partition's.
	poll(t, "the pending reason PartitionDown", func() bool {
		in := e.waitState(t, held.ID, provider.Pending)
		return in.QueueReason == "PartitionDown"
	})
	files, _ := filepath.Glob(filepath.Join(e.o.JITDir, "*.jit"))
	if len(files) != 1 {
		t.Fatalf("registration files %v, want one", files)
	}
	if fi, err := os.Stat(files[0]); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("registration file mode %v (%v), want 0600", fi.Mode(), err)
	}
	if fi, err := os.Stat(e.o.JITDir); err != nil || fi.Mode().Perm() != 0o711 {
		t.Errorf("registration directory mode %v (%v), want 0711 (others pass through, never list)", fi.Mode(), err)
	}
	if b, err := os.ReadFile(files[0]); err != nil || string(b) != regs[0].JITConfig {
		t.Errorf("registration file holds %q (%v)", b, err)
	}
	if out, err := exec.Command("runuser", "-u", other.Username, "--", "cat", files[0]).CombinedOutput(); err == nil || strings.Contains(string(out), "CANARY") {
		t.Errorf("user %s read the registration file: %s", other.Username, out)
	}
	for _, args := range [][]string{{"scontrol", "show", "job", "-dd", held.ID}, {"squeue", "--states=all", "-o", "%all"}} {
		out, _ := c.AsUser(other, args[0], args[1:]...).CombinedOutput()
		if !strings.Contains(string(out), held.ID) && args[0] == "scontrol" {
			t.Errorf("%v as %s does not show the job at all (the check would be empty): %s", args, other.Username, out)
		}
		if strings.Contains(string(out), "CANARY") {
			t.Errorf("%v as %s shows the registration: %s", args, other.Username, out)
		}
	}
	script, err := c.Command("scontrol", "write", "batch_script", held.ID, "-").CombinedOutput()
	if err != nil || !strings.Contains(string(script), files[0]) {
		t.Fatalf("batch script of %s (%v): %s", held.ID, err, script)
	}
	if strings.Contains(string(script), "CANARY") {
		t.Errorf("the batch script holds the registration:\n%s", script)
	}
	// scontrol exits 0 either way; what it printed tells.
	if out, _ := c.AsUser(other, "scontrol", "write", "batch_script", held.ID, "-").CombinedOutput(); strings.Contains(string(out), files[0]) {
		t.Errorf("user %s read the batch script: %s", other.Username, out)
	}
	if err := e.p.Terminate(context.Background(), []string{held.ID}); err != nil {
		t.Fatal(err)
	}
	e.waitState(t, held.ID, provider.Terminated)
	if _, err := os.Stat(files[0]); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the registration file of a job cancelled while pending is still there (%v)", err)
	}

	// Run: the runner gets the configuration, and the file is gone before it starts.
	_, regs, res = launchN(t, e.p, pool.Spec{Shared: pool.Shared{Pool: "cpu", MaxLifetime: time.Hour}}, "tok-run", 1)
	id := res.Runners[0].Instance.ID
	s := e.waitSeen(t, id)
	if s.JIT != regs[0].JITConfig || s.FileLeft {
		t.Errorf("runner saw %+v: want its registration, and the file already gone", s)
	}
	if !strings.HasPrefix(s.Home, e.o.WorkDir+"/") {
		t.Errorf("runner's work directory %s is not under %s", s.Home, e.o.WorkDir)
	}
	e.waitState(t, id, provider.Terminated)
	poll(t, "the work directory's removal", func() bool { _, err := os.Stat(s.Home); return errors.Is(err, fs.ErrNotExist) })
	if left, _ := filepath.Glob(filepath.Join(e.o.JITDir, "*.jit")); len(left) != 0 {
		t.Errorf("registration files left: %v", left)
	}
	if strings.Contains(e.logs.String(), "CANARY") {
		t.Error("a registration reached the provider's logs")
	}
}

// TestReplayAfterCrash: a daemon killed between sbatch's answer and its
// record of the launch replays the plan after its restart: one squeue
// finds the jobs by name, and nothing is submitted again.
func TestReplayAfterCrash(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testenv.SlurmOptions{})
	e := c.newEnv(t, nil, "sleep", "3600")
	plan, _, first := launchN(t, e.p, pool.Spec{Shared: pool.Shared{Pool: "cpu", MaxLifetime: time.Hour}}, "tok-crash", 3)
	// The restarted daemon: a new provider with the same options; it has
	// only the plan, which the caller stored before launching.
	again, err := slurm.New(e.o)
	if err != nil {
		t.Fatal(err)
	}
	res, err := again.Launch(context.Background(), plan, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range first.Runners {
		if got, want := res.Runners[i].Instance.ID, first.Runners[i].Instance.ID; got != want || res.Runners[i].Err != nil {
			t.Errorf("replayed runner %d: %q (%v), want job %s", i, got, res.Runners[i].Err, want)
		}
	}
	if calls := again.Calls(); calls["sbatch"] != 0 || calls["squeue"] != 1 || len(calls) != 1 {
		t.Errorf("the replay ran %v, want one squeue and no sbatch", calls)
	}
	all, _ := again.List(context.Background(), provider.Filter{})
	if len(all) != 3 {
		t.Errorf("%d jobs after the replay, want 3", len(all))
	}
}

// TestAdminCancel: an administrator's scancel of a running runner ends it
// as terminated, its work directory removed.
func TestAdminCancel(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testenv.SlurmOptions{})
	e := c.newEnv(t, nil, "sleep", "3600")
	_, _, res := launchN(t, e.p, pool.Spec{Shared: pool.Shared{Pool: "cpu", MaxLifetime: time.Hour}}, "tok-admin", 1)
	id := res.Runners[0].Instance.ID
	s := e.waitSeen(t, id)
	e.waitState(t, id, provider.Running)
	if out, err := c.Command("scancel", id).CombinedOutput(); err != nil {
		t.Fatalf("scancel: %v: %s", err, out)
	}
	poll(t, "the cancelled job to end", func() bool {
		got, _ := e.p.List(context.Background(), provider.Filter{IDs: []string{id}})
		return len(got) == 1 && !got[0].State.Alive()
	})
	e.waitState(t, id, provider.Terminated)
	poll(t, "the work directory's removal", func() bool { _, err := os.Stat(s.Home); return errors.Is(err, fs.ErrNotExist) })
	if alive, _ := e.p.List(context.Background(), provider.Filter{AliveOnly: true}); len(alive) != 0 {
		t.Errorf("alive after the cancel: %+v", alive)
	}
	// Terminating it again (the reconciler's pass) is not an error.
	if err := e.p.Terminate(context.Background(), []string{id, "999999"}); err != nil {
		t.Errorf("Terminate of an ended and an unknown job: %v", err)
	}
}

// TestControllerRestart: slurmctld stops in the middle of a burst. The
// submits it does not answer are transient errors; after its restart the
// jobs it accepted are all there, each once, and the failed runners,
// launched again, make up the burst: nothing lost, nothing twice.
func TestControllerRestart(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testenv.SlurmOptions{CPUs: 32})
	e := c.newEnv(t, nil, "sleep", "3600")
	spec := pool.Spec{Shared: pool.Shared{Pool: "cpu", MaxLifetime: time.Hour}}
	const n = 6
	var failed []int
	ids := map[string]bool{}
	for i := range n {
		if i == n/2 {
			c.StopController()
		}
		tok := "tok-burst-" + strconv.Itoa(i)
		l := provider.Launch{Token: tok, Spec: spec, Runners: []provider.RunnerRequest{{Name: "r" + strconv.Itoa(i), JobID: int64(i)}}}
		plan, err := e.p.Plan(context.Background(), l)
		if err != nil {
			t.Fatal(err)
		}
		res, err := e.p.Launch(context.Background(), plan, []provider.Registration{{Mode: provider.ModeJIT, JITConfig: "CANARY" + tok}})
		if err != nil {
			if !errors.Is(err, provider.ErrTransient) || provider.Permanent(err) {
				t.Errorf("launch %d with the controller down: %v, want a transient error", i, err)
			}
			failed = append(failed, i)
			continue
		}
		ids[res.Runners[0].Instance.ID] = true
	}
	if _, err := e.p.List(context.Background(), provider.Filter{}); !errors.Is(err, provider.ErrTransient) {
		t.Errorf("List with the controller down: %v, want a transient error", err)
	}
	c.StartController()
	for _, i := range failed {
		_, _, res := launchN(t, e.p, spec, "tok-burst-"+strconv.Itoa(i), 1)
		ids[res.Runners[0].Instance.ID] = true
	}
	all, err := e.p.List(context.Background(), provider.Filter{Pool: "cpu"})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]int{}
	for _, in := range all {
		byName[in.Tags[names.TagLaunchToken]]++
		if !ids[in.ID] {
			t.Errorf("job %s was not launched by the burst", in.ID)
		}
	}
	if len(all) != n || len(byName) != n || len(failed) == 0 {
		t.Errorf("after the restart: %d jobs of %d tokens (failed launches %v), want %d of %d", len(all), len(byName), failed, n, n)
	}
}

// TestSubmitErrors: Slurm's refusals reach the caller as the neutral kinds
// with Slurm's message.
func TestSubmitErrors(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testenv.SlurmOptions{})
	e := c.newEnv(t, map[string]*pool.Slurm{
		"nopart":   {Partition: "no-such-partition"},
		"toolarge": {MemoryMiB: 1 << 20},
		"nogres":   {Gres: "fpga:1"},
	}, "sleep", "3600")
	for _, tc := range []struct {
		pool string
		want error
		msg  string
	}{
		{"nopart", provider.ErrInvalid, "Invalid partition name specified"},
		{"toolarge", provider.ErrInvalid, "Requested node configuration is not available"},
		{"nogres", provider.ErrInvalid, "Invalid generic resource (gres) specification"},
	} {
		l := provider.Launch{Token: "tok-" + tc.pool, Spec: e.spec(tc.pool), Runners: []provider.RunnerRequest{{Name: "r"}}}
		plan, err := e.p.Plan(context.Background(), l)
		if err != nil {
			t.Fatal(err)
		}
		_, err = e.p.Launch(context.Background(), plan, []provider.Registration{{Mode: provider.ModeJIT, JITConfig: "CANARY"}})
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("pool %s: %v, want %v with %q", tc.pool, err, tc.want, tc.msg)
		}
	}
}

// TestSubmitLimit: a controller at its MaxJobCount refuses more jobs (the
// site's submit limit); sbatch waits and retries until the command's
// timeout, and the launch is a retryable quota error.
func TestSubmitLimit(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testenv.SlurmOptions{Extra: []string{"MaxJobCount=2"}})
	e := c.newEnv(t, nil, "sleep", "3600")
	launchN(t, e.p, pool.Spec{Shared: pool.Shared{Pool: "cpu"}}, "tok-first", 2)
	o := e.o
	o.CommandTimeout = 3 * time.Second
	p2, err := slurm.New(o)
	if err != nil {
		t.Fatal(err)
	}
	l := provider.Launch{Token: "tok-second", Spec: pool.Spec{Shared: pool.Shared{Pool: "cpu"}}, Runners: []provider.RunnerRequest{{Name: "r"}}}
	plan, _ := p2.Plan(context.Background(), l)
	_, err = p2.Launch(context.Background(), plan, []provider.Registration{{Mode: provider.ModeJIT, JITConfig: "CANARY"}})
	if !errors.Is(err, provider.ErrQuota) || provider.Permanent(err) {
		t.Errorf("submit over MaxJobCount: %v, want a retryable ErrQuota", err)
	}
	if left, _ := filepath.Glob(filepath.Join(o.JITDir, "*tok-second*")); len(left) != 0 {
		t.Errorf("a refused submit left its registration file: %v", left)
	}
}

// BenchmarkLaunch submits runners to a real cluster, 10 per launch, and
// reports the Slurm commands per runner (one sbatch each, nothing else)
// and the runners submitted per second.
func BenchmarkLaunch(b *testing.B) {
	s := testenv.StartSlurm(b, testenv.SlurmOptions{CPUs: 64})
	shared := filepath.Join(s.Dir, "shared")
	p, err := slurm.New(slurm.Options{Commander: slurm.Exec{Env: []string{"SLURM_CONF=" + s.Conf}}, JITDir: filepath.Join(shared, "jit"),
		WorkDir: filepath.Join(shared, "work"), Command: []string{"true"}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	const perLaunch = 10
	start := time.Now()
	for i := range b.N {
		l := provider.Launch{Token: "bench-" + strconv.Itoa(i), Spec: pool.Spec{Shared: pool.Shared{Pool: "cpu", MaxLifetime: time.Hour}}}
		var regs []provider.Registration
		for j := range perLaunch {
			l.Runners = append(l.Runners, provider.RunnerRequest{Name: "r" + strconv.Itoa(j)})
			regs = append(regs, provider.Registration{Mode: provider.ModeJIT, JITConfig: "x"})
		}
		providertest.PlanAndLaunch(b, p, l, regs)
	}
	elapsed := time.Since(start)
	calls := p.Calls()
	runners := float64(b.N * perLaunch)
	b.ReportMetric(float64(calls["sbatch"])/runners, "sbatch/runner")
	b.ReportMetric(float64(calls["squeue"]+calls["sacct"]+calls["scancel"])/runners, "other-calls/runner")
	b.ReportMetric(runners/elapsed.Seconds(), "runners/s")
	if _, err := p.List(context.Background(), provider.Filter{}); err != nil {
		b.Fatal(err)
	}
	if c := p.Calls(); c["squeue"] != 1 || len(c) != 1 {
		b.Fatalf("a listing ran %v, want one squeue", c)
	}
}

// TestAccounting runs against a cluster with slurmdbd: an unknown account
// is a final invalid launch with Slurm's message, a QOS submit limit is a
// retryable quota error, an ended job's usage comes from sacct, a job
// squeue has forgotten is still listed from sacct, and another user's
// sacct shows no registration.
func TestAccounting(t *testing.T) {
	t.Parallel()
	other := testenv.SecondUser(t)
	c := startCluster(t, testenv.SlurmOptions{Accounting: true, MinJobAge: 2, Users: []string{other.Username},
		Setup: [][]string{{"add", "qos", "limited", "MaxSubmitJobsPerUser=1"}, {"modify", "user", "root", "set", "qos+=limited"}}})
	e := c.newEnv(t, map[string]*pool.Slurm{
		"noacct":  {Account: "no-such-account"},
		"limited": {Account: "ci", QOS: "limited"},
		"gpu":     {Account: "ci", Gres: "gpu:1"},
		// Runners that refuse as an outdated runner does, and that fail.
		"outdated": {Account: "ci", RunnerDir: runnerDir(t, c, "outdated", `[ "$ACTIONS_RUNNER_RETURN_VERSION_DEPRECATED_EXIT_CODE" = 1 ] && exit 7; exit 0`, "2.329.0")},
		"failing":  {Account: "ci", RunnerDir: runnerDir(t, c, "failing", "exit 1", "")},
	}, "sleep", "1")
	defer checkOutdated(t, e)
	submit := func(pool, token string) error {
		plan, err := e.p.Plan(context.Background(), provider.Launch{Token: token, Spec: e.spec(pool), Runners: []provider.RunnerRequest{{Name: "r"}}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = e.p.Launch(context.Background(), plan, []provider.Registration{{Mode: provider.ModeJIT, JITConfig: "CANARY" + token}})
		return err
	}
	if err := submit("noacct", "tok-noacct"); !errors.Is(err, provider.ErrInvalid) || !provider.Permanent(err) ||
		!strings.Contains(err.Error(), "Invalid account") {
		t.Errorf("an unknown account: %v, want a final ErrInvalid with Slurm's message", err)
	}
	if err := submit("limited", "tok-limit-1"); err != nil {
		t.Fatalf("the first job of the limited QOS: %v", err)
	}
	if err := submit("limited", "tok-limit-2"); !errors.Is(err, provider.ErrQuota) || provider.Permanent(err) {
		t.Errorf("over the QOS's submit limit: %v, want a retryable ErrQuota", err)
	}

	_, regs, res := launchN(t, e.p, e.spec("gpu"), "tok-usage", 1)
	id := res.Runners[0].Instance.ID
	e.waitSeen(t, id)
	var u slurm.Usage
	poll(t, "the job's accounting record", func() bool {
		var err error
		u, err = e.p.Usage(context.Background(), id)
		return err == nil && u.State == "COMPLETED"
	})
	// The job asks no size: one CPU and DefMemPerCPU (100 MiB) of the cluster's.
	if u.Cluster != "skifftest" || u.Partition != "debug" || u.Nodes != c.Node || u.GPUs != 1 || u.Elapsed < time.Second || u.MaxRSSBytes <= 0 ||
		u.CPUs != 1 || u.MemoryBytes != 100<<20 || u.JobID != id {
		t.Errorf("usage %+v: want job %s, cluster skifftest, partition debug, node %s, 1 CPU, 100 MiB, 1 GPU, at least 1 s", u, id, c.Node)
	}
	// The records' read: one sacct for the ended job and one it does not know.
	e.p.Calls()
	peaks, err := e.p.Accounted(context.Background(), []string{id, "999999"})
	if calls := e.p.Calls(); err != nil || len(peaks) != 1 || calls["sacct"] != 1 {
		t.Fatalf("Accounted = %v (%v) in %v, want job %s alone in one sacct", peaks, err, calls, id)
	}
	if pk := peaks[id]; pk == nil || pk.Slurm == nil || pk.Slurm.Nodes != c.Node || pk.Host == nil || pk.Host.CPUs != 1 ||
		pk.CPUSeconds == nil || pk.MemoryPeakGiB == nil || pk.MemoryPeak == nil {
		t.Errorf("peaks of job %s: %+v", id, pk)
	}
	// After MinJobAge squeue forgets the job; List asks sacct for it.
	poll(t, "squeue to forget the job", func() bool {
		out, _ := c.Command("squeue", "-h", "--states=all", "-j", id, "-o", "%i").Output()
		return strings.TrimSpace(string(out)) == ""
	})
	got, err := e.p.List(context.Background(), provider.Filter{IDs: []string{id}})
	if err != nil || len(got) != 1 || got[0].State != provider.Terminated || got[0].Pool != "gpu" {
		t.Errorf("List of a job squeue forgot: %+v (%v), want it terminated, of pool gpu, from sacct", got, err)
	}
	out, _ := c.AsUser(other, "sacct", "--allusers", "--jobs="+id, "--format=ALL", "--parsable2").CombinedOutput()
	if !strings.Contains(string(out), id) {
		t.Errorf("sacct as %s does not show the job at all (the check would be empty): %s", other.Username, out)
	}
	if strings.Contains(string(out), regs[0].JITConfig) || strings.Contains(string(out), "CANARY") {
		t.Errorf("sacct as %s shows a registration: %s", other.Username, out)
	}
}

// runnerDir is a runner directory on the cluster's shared filesystem whose
// run.sh runs script, with a runner listener that reports version when it
// is not "".
func runnerDir(t *testing.T, c cluster, name, script, version string) string {
	t.Helper()
	dir := filepath.Join(c.shared, "runner-"+name)
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{slurm.RunScript: script}
	if version != "" {
		files["bin/Runner.Listener"] = `[ "$1" = --version ] && echo ` + version
	}
	for f, body := range files {
		testenv.WriteExecutable(t, filepath.Join(dir, f), []byte("#!/bin/sh\n"+body+"\n"))
	}
	return dir
}

// checkOutdated: a runner that exits with the deprecation exit code is
// listed ended with the skiff:runner-outdated tag, read from the
// accounting once, naming the version its directory's listener reports; a
// runner that fails otherwise is not tagged.
func checkOutdated(t *testing.T, e env) {
	t.Helper()
	ids := map[string]string{}
	for _, pl := range []string{"outdated", "failing"} {
		_, _, res := launchN(t, e.p, e.spec(pl), "tok-"+pl, 1)
		ids[pl] = res.Runners[0].Instance.ID
	}
	// The accounting may learn of a job's end after squeue: the code is
	// asked for at every listing until it is read, then never again.
	list := func() (map[string]provider.Instance, int) {
		e.p.Calls()
		got, err := e.p.List(context.Background(), provider.Filter{IDs: []string{ids["outdated"], ids["failing"]}})
		if err != nil {
			t.Fatal(err)
		}
		byPool := map[string]provider.Instance{}
		for _, in := range got {
			byPool[in.Pool] = in
		}
		return byPool, e.p.Calls()["sacct"]
	}
	var ins map[string]provider.Instance
	poll(t, "both exit codes read", func() bool {
		var calls int
		ins, calls = list()
		return ins["outdated"].State == provider.Terminated && ins["failing"].State == provider.Terminated && calls == 0
	})
	// The outdated runner's directory says its version: the tags name it.
	want := map[string][2]string{"outdated": {"2.329.0", "2.329.0"}, "failing": {"", ""}}
	for pl, w := range want {
		if got := [2]string{ins[pl].Tags[names.TagRunnerOutdated], ins[pl].Tags[names.TagRunnerVersion]}; got != w {
			t.Errorf("pool %s: tags outdated, version = %q, want %q: %+v", pl, got, w, ins[pl])
		}
	}
}
