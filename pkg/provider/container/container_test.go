package container_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/provider/container"
	"github.com/skiffci/skiff/pkg/provider/providertest"
)

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// fixture is one provider on the shared engine, with a deployment of its
// own so that fixtures never list each other's containers.
type fixture struct {
	e    *engine
	p    *container.Provider
	dir  string
	dep  string
	env  []string
	logs *syncBuffer
}

func newFixture(t *testing.T, env ...string) *fixture {
	t.Helper()
	e := needEngine(t)
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	dep := "t" + hex.EncodeToString(b)
	logs := &syncBuffer{}
	dir := t.TempDir()
	p, err := container.New(container.Options{Engine: e.client, Dir: filepath.Join(dir, "runners"), Deployment: dep, Env: env,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{e: e, p: p, dir: filepath.Join(dir, "runners"), dep: dep, env: env, logs: logs}
	t.Cleanup(func() {
		p := f.p
		ins, _ := p.List(context.Background(), provider.Filter{})
		var ids []string
		for _, in := range ins {
			ids = append(ids, in.ID)
		}
		_ = p.Terminate(context.Background(), ids)
	})
	return f
}

// spec is a container pool's launch spec for the test image.
func spec(name string) pool.Spec {
	return pool.Spec{Shared: pool.Shared{Pool: name, Backend: pool.BackendContainer},
		Container: &pool.Container{Image: testImage, Memory: "64Mi", Pids: 256, Network: pool.ContainerNetworkRunner,
			Pull: pool.ContainerPullNever, GPUMode: pool.ContainerGPUCDI}}
}

func TestConformance(t *testing.T) {
	providertest.Run(t, func(t *testing.T) providertest.Harness {
		f := newFixture(t)
		return providertest.Harness{
			Provider: f.p, Spec: spec("conformance"), Backend: pool.BackendContainer, Logs: f.logs.String,
			Delivered: func(id string) (provider.Registration, bool) {
				// What the container reads at /run/skiff/jit/jitconfig.
				b, err := os.ReadFile(filepath.Join(f.dir, id, "jitconfig"))
				if err != nil {
					return provider.Registration{}, false
				}
				in, err := f.e.client.ContainerInspect(context.Background(), id, client.ContainerInspectOptions{})
				if err != nil {
					return provider.Registration{}, false
				}
				return provider.Registration{JITConfig: string(b), RunnerName: in.Container.Config.Labels[container.LabelRunner]}, true
			},
			FailCapacity: func() { container.SetCeiling(f.p, container.Ceiling{MemoryBytes: 1 << 20}) },
		}
	})
}

// launch launches n runners of pool spec s with token tok and canary JIT configurations.
func launch(t *testing.T, p *container.Provider, s pool.Spec, tok string, n int) (provider.Plan, provider.Result, []provider.Registration) {
	t.Helper()
	l := provider.Launch{Token: tok, Spec: s}
	var regs []provider.Registration
	for i := range n {
		name := tok + "-" + string(rune('a'+i))
		l.Runners = append(l.Runners, provider.RunnerRequest{Name: name, JobID: int64(i + 1), RunID: 1, Repository: "acme/app", Owner: "acme"})
		regs = append(regs, provider.Registration{Mode: provider.ModeJIT, JITConfig: "JITCANARY" + tok + name, RunnerName: name})
	}
	pl, res := providertest.PlanAndLaunch(t, p, l, regs)
	return pl, res, regs
}

// TestContained checks each container as the engine holds it: the JIT
// configuration in neither its environment nor its labels, never
// privileged, every capability dropped, no new privileges, a read-only
// root, a pids limit, no engine socket.
func TestContained(t *testing.T) {
	f := newFixture(t)
	_, res, regs := launch(t, f.p, spec("contained"), "tok-contained", 1)
	id := res.Runners[0].Instance.ID
	got, err := f.e.client.ContainerInspect(context.Background(), id, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := got.Container
	raw := string(got.Raw)
	if strings.Contains(strings.Join(c.Config.Env, "\n"), regs[0].JITConfig) {
		t.Error("the JIT configuration is in the container's environment")
	}
	for k, v := range c.Config.Labels {
		if strings.Contains(v, regs[0].JITConfig) {
			t.Errorf("the JIT configuration is in label %s", k)
		}
	}
	if strings.Contains(raw, regs[0].JITConfig) {
		t.Error("the JIT configuration is in what inspect shows")
	}
	hc := c.HostConfig
	switch {
	case hc.Privileged:
		t.Error("the container is privileged")
	case len(hc.CapDrop) == 0 || len(hc.CapAdd) > 0:
		// The engine spells "all" its own way (Podman lists its defaults);
		// TestProbe reads the effective set inside: none.
		t.Errorf("capabilities dropped %v, added %v: want all dropped, none added", hc.CapDrop, hc.CapAdd)
	case !hc.ReadonlyRootfs:
		t.Error("the root is writable")
	case hc.PidsLimit == nil || *hc.PidsLimit <= 0:
		t.Error("no pids limit")
	case !strings.Contains(strings.Join(hc.SecurityOpt, ","), "no-new-privileges"):
		t.Errorf("security options %v lack no-new-privileges", hc.SecurityOpt)
	}
	for _, b := range hc.Binds {
		if strings.Contains(b, ".sock") {
			t.Errorf("an engine socket is mounted: %s", b)
		}
	}
	if strings.Contains(f.logs.String(), "JITCANARY") {
		t.Error("a JIT configuration reached the logs")
	}
}

// TestProbe runs the stand-in's probe inside a container: what the job
// sees from inside.
//
// The hostile job's checks on this backend: it cannot see skiff's data
// directory (nor the other runners' JIT files in it), sees no process but
// its own, and a child it leaves in a session of its own does not outlive
// its container.
func TestProbe(t *testing.T) {
	marker := "SKIFF_TEST_ORPHAN=" + t.Name() + hex.EncodeToString([]byte(time.Now().String()))[:16]
	f := newFixture(t, "SKIFF_TEST_MODE=probe", marker)
	f.p = withEnv(t, f, "SKIFF_TEST_HOST_DIR="+f.dir)
	_, res, _ := launch(t, f.p, spec("probe"), "tok-probe", 2)
	id := res.Runners[0].Instance.ID
	probe := filepath.Join(f.dir, id, "usage", "probe")
	var b []byte
	await(t, "the probe's report", func() bool {
		var err error
		b, err = os.ReadFile(probe)
		return err == nil && bytes.HasSuffix(b, []byte("\n"))
	})
	want := map[string]string{"jit_readable": "true", "env_has_jit": "false", "root_writable": "false", "tmp_writable": "true",
		"home_writable": "true", "docker_sock": "false", "podman_sock": "false", "CapEff": "0000000000000000", "NoNewPrivs": "1", "mknod": "false",
		"host_dir_visible": "false", "processes": "1"}
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		k, v, _ := strings.Cut(l, "=")
		got[k] = v
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("inside the container %s = %q, want %q", k, got[k], v)
		}
	}
	awaitEnded(t, f, id)
	if orphanOf(marker) {
		t.Error("a process the job left behind outlived its container")
	}
}

// orphanOf reports whether a process on this host carries marker in its
// environment.
func orphanOf(marker string) bool {
	procs, _ := filepath.Glob("/proc/[0-9]*/environ")
	for _, p := range procs {
		if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte(marker)) {
			return true
		}
	}
	return false
}

// withEnv is the fixture's provider again with more runner environment.
func withEnv(t *testing.T, f *fixture, env ...string) *container.Provider {
	t.Helper()
	p, err := container.New(container.Options{Engine: f.e.client, Dir: f.dir, Deployment: f.dep, Env: append(f.env, env...),
		Logger: slog.New(slog.NewTextHandler(f.logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestReplay: launching a plan again, with or without registrations,
// returns the first launch's containers and creates none.
func TestReplay(t *testing.T) {
	f := newFixture(t)
	pl, first, regs := launch(t, f.p, spec("replay"), "tok-replay2", 2)
	for _, again := range [][]provider.Registration{regs, nil} {
		res, err := f.p.Launch(context.Background(), pl, again)
		if err != nil {
			t.Fatal(err)
		}
		for i := range res.Runners {
			if res.Runners[i].Instance.ID != first.Runners[i].Instance.ID {
				t.Errorf("replay (regs %v): runner %d on %s, want %s", again != nil, i, res.Runners[i].Instance.ID, first.Runners[i].Instance.ID)
			}
		}
	}
	out := f.e.podman(t, "ps", "-a", "-q", "--filter", "label="+container.LabelToken+"=tok-replay2")
	if n := len(strings.Fields(out)); n != 2 {
		t.Errorf("%d containers after replays, want 2", n)
	}
}

// TestEndRemoved: a container whose runner exited is read and removed by
// the next List (its network and directory too), and listed terminated.
func TestEndRemoved(t *testing.T) {
	f, id := runToEnd(t, "exit", "ends", "exit code 0")
	if out := f.e.podman(t, "ps", "-a", "-q", "--filter", "name="+id); strings.TrimSpace(out) != "" {
		t.Errorf("the ended container %s was not removed", id)
	}
	if out := f.e.podman(t, "network", "ls", "-q", "--filter", "name="+id); strings.TrimSpace(out) != "" {
		t.Errorf("the ended runner's network %s was not removed", id)
	}
	if _, err := os.Stat(filepath.Join(f.dir, id)); !os.IsNotExist(err) {
		t.Errorf("the ended runner's directory is still there: %v", err)
	}
}

// TestOutdatedRunner: runners start with the deprecation exit code turned
// on, and one that ends with it (GitHub refused its version) is listed
// with the outdated tag scale-down holds its pool for.
func TestOutdatedRunner(t *testing.T) {
	f, id := runToEnd(t, "deprecated", "outdated", "exit code 7")
	ins, err := f.p.List(context.Background(), provider.Filter{IDs: []string{id}})
	if err != nil || len(ins) != 1 || ins[0].Tags[names.TagRunnerOutdated] == "" {
		t.Errorf("listed %+v (%v), want the ended runner tagged %s", ins, err, names.TagRunnerOutdated)
	}
}

// TestNoSuchImage: a missing image is a final invalid launch naming it.
func TestNoSuchImage(t *testing.T) {
	f := newFixture(t)
	s := spec("noimage")
	s.Container.Image = "localhost/skiff-no-such-image:1"
	l := provider.Launch{Token: "tok-noimage", Spec: s, Runners: []provider.RunnerRequest{{Name: "r"}}}
	pl, err := f.p.Plan(context.Background(), l)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.p.Launch(context.Background(), pl, []provider.Registration{{Mode: provider.ModeJIT, JITConfig: "x", RunnerName: "r"}})
	if !provider.Permanent(err) || !strings.Contains(provider.Detail(err), s.Container.Image) {
		t.Errorf("Launch = %v (detail %q), want a final error naming the image", err, provider.Detail(err))
	}
	if left, _ := os.ReadDir(f.dir); len(left) != 0 {
		t.Errorf("a runner that could not start left %d directories (with its JIT configuration)", len(left))
	}
}

// TestEngineDown: an engine that does not answer is transient.
func TestEngineDown(t *testing.T) {
	c, err := client.New(client.WithHost("unix://" + filepath.Join(t.TempDir(), "none.sock")))
	if err != nil {
		t.Fatal(err)
	}
	p, err := container.New(container.Options{Engine: c, Dir: t.TempDir(), Deployment: "down"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.List(context.Background(), provider.Filter{})
	if provider.Reason(err) != "transient" || provider.Permanent(err) {
		t.Errorf("List = %v, want transient", err)
	}
}

// runToEnd launches one runner of pool (token tok-<pool>) whose test
// runner runs in mode (SKIFF_TEST_MODE), waits for List to see it end, and
// checks the end reason Ended gives.
func runToEnd(t *testing.T, mode, pool, wantReason string) (*fixture, string) {
	t.Helper()
	f := newFixture(t, "SKIFF_TEST_MODE="+mode)
	_, res, _ := launch(t, f.p, spec(pool), "tok-"+pool, 1)
	id := res.Runners[0].Instance.ID
	awaitEnded(t, f, id)
	if reason, ok := f.p.Ended(id); !ok || reason != wantReason {
		t.Errorf("end reason %q (%v), want %s", reason, ok, wantReason)
	}
	return f, id
}

func awaitEnded(t *testing.T, f *fixture, id string) {
	t.Helper()
	await(t, "runner "+id+" to end", func() bool {
		ins, err := f.p.List(context.Background(), provider.Filter{IDs: []string{id}})
		return err == nil && len(ins) == 1 && ins[0].State == provider.Terminated
	})
}

// await polls cond every 50 ms (each poll runs podman).
func await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.Await(t, what, 50*time.Millisecond, cond, nil)
}

func TestEndReason(t *testing.T) {
	t.Parallel()
	const mi = 1 << 20
	for _, tc := range []struct {
		name            string
		exit            int
		oom             bool
		peak, limit     int64
		engineErr, want string
		wantEnd         provider.EndReason
	}{
		{"exited", 0, false, 10 * mi, 256 * mi, "", "exit code 0", provider.EndExited},
		{"failed", 1, false, 10 * mi, 256 * mi, "", "exit code 1", provider.EndFailed},
		{"runner outdated", provider.ExitVersionDeprecated, false, 10 * mi, 256 * mi, "", "exit code 7", provider.EndRunnerOutdated},
		{"engine says OOM", 137, true, 0, 256 * mi, "", "OOMKilled: exit code 137", provider.EndOOMKilled},
		{"SIGKILL at the memory limit", 137, false, 250 * mi, 256 * mi, "", "OOMKilled: killed by SIGKILL at its memory limit (exit code 137)",
			provider.EndOOMKilled},
		{"SIGKILL well under the limit", 137, false, 20 * mi, 256 * mi, "", "exit code 137", provider.EndFailed},
		{"SIGKILL unmeasured", 137, false, 0, 256 * mi, "", "exit code 137", provider.EndFailed},
		{"SIGKILL without a limit", 137, false, 250 * mi, 0, "", "exit code 137", provider.EndFailed},
		{"engine error", 127, false, 0, 0, "no such file", "Error: no such file (exit code 127)", provider.EndBackendError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			end, got := container.EndReason(tc.exit, tc.oom, tc.peak, tc.limit, tc.engineErr)
			if got != tc.want || end != tc.wantEnd {
				t.Errorf("EndReason = %q, %q; want %q, %q", end, got, tc.wantEnd, tc.want)
			}
		})
	}
}

// TestCeiling: the runners' limits together never pass the host's
// ceiling: two runners of 64 MiB fill 128 MiB, within one launch and
// across launches; a third waits (capacity), and fits once one has gone.
func TestCeiling(t *testing.T) {
	f := newFixture(t)
	container.SetCeiling(f.p, container.Ceiling{MemoryBytes: 128 << 20})
	l := provider.Launch{Token: "tok-ceiling", Spec: spec("ceiling")}
	var regs []provider.Registration
	for _, n := range []string{"a", "b", "c"} {
		l.Runners = append(l.Runners, provider.RunnerRequest{Name: n})
		regs = append(regs, provider.Registration{Mode: provider.ModeJIT, JITConfig: "x", RunnerName: n})
	}
	_, res := providertest.PlanAndLaunch(t, f.p, l, regs)
	if res.Runners[0].Err != nil || res.Runners[1].Err != nil || provider.Reason(res.Runners[2].Err) != "capacity" {
		t.Fatalf("launch of 3 × 64 MiB under 128 MiB: %v, %v, %v; want two launched and a capacity refusal",
			res.Runners[0].Err, res.Runners[1].Err, res.Runners[2].Err)
	}
	_, more := launchErr(t, f.p, spec("ceiling"), "tok-ceiling2")
	if provider.Reason(more) != "capacity" {
		t.Errorf("a launch on a full host: %v, want capacity", more)
	}
	if err := f.p.Terminate(context.Background(), []string{res.Runners[0].Instance.ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := launchErr(t, f.p, spec("ceiling"), "tok-ceiling3"); err != nil {
		t.Errorf("a launch after a runner went: %v", err)
	}
}

// launchErr launches one runner and returns its instance id and error.
func launchErr(t *testing.T, p *container.Provider, s pool.Spec, tok string) (string, error) {
	t.Helper()
	l := provider.Launch{Token: tok, Spec: s, Runners: []provider.RunnerRequest{{Name: tok}}}
	pl, err := p.Plan(context.Background(), l)
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Launch(context.Background(), pl, []provider.Registration{{Mode: provider.ModeJIT, JITConfig: "x", RunnerName: tok}})
	if err == nil && len(res.Runners) == 1 {
		err = res.Runners[0].Err
	}
	if len(res.Runners) == 0 {
		return "", err
	}
	return res.Runners[0].Instance.ID, err
}

// TestConcurrentLists: Lists at once (skiff local's watcher, the
// reconciler, a status) that all see a container exited read its end
// once: one inspect and removal, one log line, and the end reason and
// usage the first read found, never a later reader's empty ones.
func TestConcurrentLists(t *testing.T) {
	f := newFixture(t, "SKIFF_TEST_MODE=exit")
	_, res, _ := launch(t, f.p, spec("lists"), "tok-lists", 1)
	id := res.Runners[0].Instance.ID
	await(t, "runner "+id+" to exit", func() bool {
		return strings.Contains(f.e.podman(t, "ps", "-a", "--filter", "name="+id, "--format", "{{.State}}"), "xited")
	})
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := f.p.List(context.Background(), provider.Filter{}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if reason, ok := f.p.Ended(id); !ok || reason != "exit code 0" {
		t.Errorf("end reason %q (%v) after concurrent Lists, want exit code 0", reason, ok)
	}
	if n := strings.Count(f.logs.String(), "a runner container ended"); n != 1 {
		t.Errorf("the end was read %d times, want once:\n%s", n, f.logs.String())
	}
}

// TestRunnerVersionLabel: a runner is tagged with the runner version its
// image's label names (one image inspect), and with none when the image
// has no such label or the label is not a runner version.
func TestRunnerVersionLabel(t *testing.T) {
	e := needEngine(t)
	e.labelImage(t, "localhost/skiff-container-test:labelled", map[string]string{container.LabelRunnerVersion: "2.334.0"})
	e.labelImage(t, "localhost/skiff-container-test:not-a-version", map[string]string{container.LabelRunnerVersion: "latest"})
	for _, tc := range []struct {
		name, image, pull, want string
	}{
		{"labelled", "localhost/skiff-container-test:labelled", pool.ContainerPullNever, "2.334.0"},
		{"labelled, read by the pull's inspect", "localhost/skiff-container-test:labelled", pool.ContainerPullMissing, "2.334.0"},
		{"no label", testImage, pool.ContainerPullNever, ""},
		{"label not a version", "localhost/skiff-container-test:not-a-version", pool.ContainerPullNever, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			s := spec("version")
			s.Container.Image, s.Container.Pull = tc.image, tc.pull
			_, res, _ := launch(t, f.p, s, "tok-version", 1)
			if got := res.Runners[0].Instance.Tags[names.TagRunnerVersion]; got != tc.want {
				t.Errorf("launched with %s=%q, want %q", names.TagRunnerVersion, got, tc.want)
			}
			ins, err := f.p.List(context.Background(), provider.Filter{IDs: []string{res.Runners[0].Instance.ID}})
			if err != nil || len(ins) != 1 || ins[0].Tags[names.TagRunnerVersion] != tc.want {
				t.Errorf("listed %+v (%v), want %s=%q", ins, err, names.TagRunnerVersion, tc.want)
			}
		})
	}
}
