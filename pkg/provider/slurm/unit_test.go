package slurm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provider"
)

// TestClassify: Slurm's messages (as sbatch, squeue and scancel print
// them) map to the neutral kinds; Slurm's message is kept.
func TestClassify(t *testing.T) {
	t.Parallel()
	cases := []struct {
		stderr string
		want   error
		final  bool
	}{
		{"sbatch: error: invalid partition specified: gpu\nsbatch: error: Batch job submission failed: Invalid partition name specified", provider.ErrInvalid, true},
		{"sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified", provider.ErrInvalid, true},
		{"sbatch: error: Batch job submission failed: Invalid qos specification", provider.ErrInvalid, true},
		{"sbatch: error: Batch job submission failed: Requested node configuration is not available", provider.ErrInvalid, true},
		{"sbatch: error: Batch job submission failed: Job violates accounting/QOS policy (job submit limit, user's size and/or time limits)", provider.ErrQuota, false},
		{"sbatch: error: Slurm temporarily unable to accept job, sleeping and retrying", provider.ErrQuota, false},
		{"sbatch: error: Batch job submission failed: Required partition not available (inactive or drain)", provider.ErrCapacity, false},
		{"sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)", provider.ErrTransient, false},
		{"slurm_load_jobs error: Unable to contact slurm controller (connect failure)", provider.ErrTransient, false},
		{"sbatch: error: Batch job submission failed: Socket timed out on send/recv operation", provider.ErrTransient, false},
		{"sbatch: error: something new", provider.ErrTransient, false},
	}
	for _, tc := range cases {
		err := classify("submitting", &ExitError{Command: "sbatch", Code: 1, Stderr: tc.stderr})
		if !errors.Is(err, tc.want) || provider.Permanent(err) != tc.final {
			t.Errorf("%q: %v (permanent %v), want %v (permanent %v)", tc.stderr, err, provider.Permanent(err), tc.want, tc.final)
		}
		last := tc.stderr[strings.LastIndex(tc.stderr, "error: ")+len("error: "):]
		if !strings.Contains(err.Error(), last) {
			t.Errorf("%v lacks Slurm's message %q", err, last)
		}
	}
	if err := classify("x", fmt.Errorf("starting: %w", errors.New(`exec: "sbatch": executable file not found in $PATH`))); !errors.Is(err, provider.ErrTransient) {
		t.Errorf("an unknown start failure: %v", err)
	}
}

func TestState(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]provider.State{
		"PENDING": provider.Pending, "CONFIGURING": provider.Pending, "REQUEUED": provider.Pending,
		"RUNNING": provider.Running, "COMPLETING": provider.Stopping, "SUSPENDED": provider.Stopped,
		"COMPLETED": provider.Terminated, "CANCELLED": provider.Terminated, "CANCELLED by 0": provider.Terminated,
		"FAILED": provider.Terminated, "TIMEOUT": provider.Terminated, "NODE_FAIL": provider.Terminated,
		"PREEMPTED": provider.Terminated, "BOOT_FAIL": provider.Terminated, "OUT_OF_MEMORY": provider.Terminated,
	} {
		if got := state(s); got != want {
			t.Errorf("state(%s) = %s, want %s", s, got, want)
		}
	}
}

func TestArgs(t *testing.T) {
	t.Parallel()
	p := Pool{Partition: "gpu", Account: "lab", QOS: "ci", Reservation: "r1", Constraint: "a100", Gres: "gpu:a100:1",
		CPUsPerTask: 4, MemoryMiB: 16384, Exclusive: true, ExtraOptions: []string{"--nice=10"}}
	cases := []struct {
		name  string
		sizes Sizes
		want  string
	}{
		{"the pool's values", Sizes{}, "--partition=gpu --account=lab --qos=ci --reservation=r1 --constraint=a100 --cpus-per-task=4 --mem=16384M --gres=gpu:a100:1 --time=90 --exclusive --nice=10"},
		{"sizes replace them, keeping the GPU type", Sizes{VCPU: 8, MemoryGiB: 32, GPUs: 2, DiskGiB: 100},
			"--partition=gpu --account=lab --qos=ci --reservation=r1 --constraint=a100 --cpus-per-task=8 --mem=32768M --gres=gpu:a100:2 --tmp=100G --time=90 --exclusive --nice=10"},
	}
	for _, tc := range cases {
		if got := strings.Join(p.Args(tc.sizes, 89*time.Minute+time.Second), " "); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
	for gres, want := range map[string]string{"": "gpu:3", "gpu:1": "gpu:3", "gpu:a100:2": "gpu:a100:3", "license:1": "license:1,gpu:3"} {
		if got := withGPUs(gres, 3); got != want {
			t.Errorf("withGPUs(%q, 3) = %q, want %q", gres, got, want)
		}
	}
	for _, bad := range []Pool{{ExtraOptions: []string{"--uid=0"}}, {ExtraOptions: []string{"--export=ALL"}}, {Gres: "gpu"}, {Partition: "a b"}} {
		if err := bad.Check(); err == nil {
			t.Errorf("Check(%+v) passed", bad)
		}
	}
	if got := SizesOf(&pool.Label{CPU: pool.Spans{{Min: 8, Max: 8}, {Min: 16, Max: 16}}, GPU: pool.Spans{{Min: 1, Max: 1}}}); got != (Sizes{VCPU: 8, GPUs: 1}) {
		t.Errorf("SizesOf = %+v", got)
	}
}

func TestParseSqueue(t *testing.T) {
	t.Parallel()
	out := "12|PENDING|gpu|(null)|2026-12-01T10:00:00|skiff.tok.r1|skiff%3Apool=gpu|N/A|Priority\n" +
		"13|RUNNING|gpu|node7|2026-12-01T10:00:01|skiff.tok.r2|skiff%3Apool=gpu|2026-12-01T10:00:05|None\n" +
		"14|RUNNING|gpu|node7|2026-12-01T10:00:01|someone-else|x=y|2026-12-01T10:00:05|None\n" +
		"15|PENDING|gpu||2026-12-01T10:00:01|skiff.tok.r3||N/A|QOSMaxJobsPerUserLimit|odd|text\n"
	jobs := parseSqueue(out, "skiff.")
	if len(jobs) != 3 {
		t.Fatalf("parsed %d jobs, want 3: %+v", len(jobs), jobs)
	}
	if j := jobs[0]; j.ID != "12" || j.Nodes != "" || j.Reason != "Priority" || j.Tags[names.TagPool] != "gpu" || j.Submitted.IsZero() {
		t.Errorf("job 12: %+v", j)
	}
	if j := jobs[1]; j.Reason != "" || j.Nodes != "node7" || j.Started.IsZero() || !jobs[0].Started.IsZero() {
		t.Errorf("job 13: %+v", j)
	}
	if j := jobs[2]; j.Reason != "QOSMaxJobsPerUserLimit|odd|text" {
		t.Errorf("job 15's reason %q", j.Reason)
	}
}

func TestParseUsage(t *testing.T) {
	t.Parallel()
	// sacct --noheader --parsable2 --format=usageFormat of a job and its steps.
	out := "42|hpc|gpu|node7|COMPLETED|125|01:02:03|| billing=4,cpu=4,gres/gpu=2,mem=16G,node=1\n" +
		"42.batch|hpc||node7|COMPLETED|125|01:00:00.500|2048000K|cpu=4,gres/gpu=2,mem=16G,node=1\n" +
		"42.extern|hpc||node7|COMPLETED|125|00:00:00.001|1024K|billing=4,cpu=4,gres/gpu=2,mem=16G,node=1\n"
	u, ok := parseUsage(out, "42")
	want := Usage{Cluster: "hpc", Partition: "gpu", Nodes: "node7", State: "COMPLETED", Elapsed: 125 * time.Second,
		CPUTime: time.Hour + 2*time.Minute + 3*time.Second, MaxRSSBytes: 2048000 * 1024, GPUs: 2}
	if !ok || u != want {
		t.Errorf("parseUsage = %+v (%v), want %+v", u, ok, want)
	}
	if _, ok := parseUsage(out, "43"); ok {
		t.Error("parseUsage found a job that is not there")
	}
	if got := parseCPUTime("1-02:03:04"); got != 26*time.Hour+3*time.Minute+4*time.Second {
		t.Errorf("parseCPUTime(1-02:03:04) = %s", got)
	}
}

// TestScriptHoldsNoSecret: the batch script names the file, never the
// configuration, and quotes what it is given.
func TestScriptHoldsNoSecret(t *testing.T) {
	t.Parallel()
	fc := &fakeSlurm{}
	p := newFake(t, fc)
	l := provider.Launch{Token: "tok", Spec: pool.Spec{Shared: pool.Shared{Pool: "cpu"}}, Runners: []provider.Runner{{Name: "r1"}}}
	pl, err := p.Plan(context.Background(), l)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Launch(context.Background(), pl, []provider.Registration{{Mode: provider.ModeJIT, JITConfig: "CANARY-SECRET"}}); err != nil {
		t.Fatal(err)
	}
	if len(fc.submits) != 1 {
		t.Fatalf("%d submits", len(fc.submits))
	}
	sub := fc.submits[0]
	if strings.Contains(sub.script, "CANARY") || slices.ContainsFunc(sub.args, func(a string) bool { return strings.Contains(a, "CANARY") }) {
		t.Errorf("the configuration is in the script or argv:\n%s\n%v", sub.script, sub.args)
	}
	for _, want := range []string{"--parsable", "--export=NONE", "--job-name=skiff.tok.r1"} {
		if !slices.Contains(sub.args, want) {
			t.Errorf("sbatch args %v lack %s", sub.args, want)
		}
	}
	if !strings.Contains(sub.script, "'"+p.jitFile("skiff.tok.r1")+"'") || !strings.Contains(sub.script, "'/it'\\''s/runner'") {
		t.Errorf("script:\n%s", sub.script)
	}
}

// fakeSlurm is a Commander that answers sbatch with job ids and squeue
// with its jobs, and counts the calls: the benchmarks' and unit tests'
// stand-in for a cluster (the integration tests use a real one).
type fakeSlurm struct {
	jobs []string // squeue lines
	// loseAnswer makes sbatch take the job and fail as a timeout does.
	loseAnswer bool
	next       int
	submits    []struct {
		args   []string
		script string
	}
}

func (f *fakeSlurm) Run(_ context.Context, name string, args []string, stdin []byte) ([]byte, error) {
	switch name {
	case "sbatch":
		f.next++
		f.submits = append(f.submits, struct {
			args   []string
			script string
		}{args, string(stdin)})
		var jn, comment string
		for _, a := range args {
			if v, ok := strings.CutPrefix(a, "--job-name="); ok {
				jn = v
			}
			if v, ok := strings.CutPrefix(a, "--comment="); ok {
				comment = v
			}
		}
		f.jobs = append(f.jobs, fmt.Sprintf("%d|PENDING|debug||2026-12-01T10:00:00|%s|%s|N/A|Priority", f.next, jn, comment))
		if f.loseAnswer {
			return nil, &ExitError{Command: name, Code: 1, Stderr: "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation"}
		}
		return []byte(fmt.Sprintf("%d\n", f.next)), nil
	case "squeue":
		return []byte(strings.Join(f.jobs, "\n") + "\n"), nil
	case "scancel", "sacct":
		return nil, nil
	}
	return nil, fmt.Errorf("unexpected command %s", name)
}

func newFake(t testing.TB, fc *fakeSlurm) *Provider {
	t.Helper()
	p, err := New(Options{Commander: fc, User: "ci", JITDir: t.TempDir() + "/jit", WorkDir: "/shared/work",
		Command: []string{"/it's/runner"}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// BenchmarkReconcile1000 lists 1,000 of skiff's Slurm jobs through a fake
// command layer (a real cluster of 1,000 jobs does not fit a test
// machine): one squeue per pass, whatever the count.
func BenchmarkReconcile1000(b *testing.B) {
	fc := &fakeSlurm{}
	for i := range 1000 {
		fc.jobs = append(fc.jobs, fmt.Sprintf("%d|RUNNING|debug|node%d|2026-12-01T10:00:00|skiff.tok%d.r|skiff%%3Apool=cpu&skiff%%3Arunner-name=r%d|2026-12-01T10:00:01|None", i+1, i%50, i, i))
	}
	p := newFake(b, fc)
	p.Calls()
	b.ResetTimer()
	for range b.N {
		got, err := p.List(context.Background(), provider.Filter{Pool: "cpu", AliveOnly: true})
		if err != nil || len(got) != 1000 {
			b.Fatalf("List: %d, %v", len(got), err)
		}
	}
	b.StopTimer()
	calls := p.Calls()
	b.ReportMetric(float64(calls["squeue"]+calls["sacct"])/float64(b.N), "calls/pass")
	if calls["squeue"] != b.N || len(calls) != 1 {
		b.Fatalf("calls %v for %d passes", calls, b.N)
	}
}

// TestLostSubmitAnswer: sbatch fails as a timeout does after the
// controller took the job; the provider finds the job by name, keeps its
// registration file, and the launch succeeds: a retry would have
// submitted the runner twice.
func TestLostSubmitAnswer(t *testing.T) {
	t.Parallel()
	fc := &fakeSlurm{loseAnswer: true}
	p := newFake(t, fc)
	pl, err := p.Plan(context.Background(), provider.Launch{Token: "tok", Spec: pool.Spec{Shared: pool.Shared{Pool: "cpu"}}, Runners: []provider.Runner{{Name: "r1"}}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Launch(context.Background(), pl, []provider.Registration{{Mode: provider.ModeJIT, JITConfig: "CANARY"}})
	if err != nil || res.Runners[0].Instance.ID != "1" {
		t.Fatalf("Launch after a lost answer: %+v, %v; want job 1", res, err)
	}
	if calls := p.Calls(); calls["sbatch"] != 1 || calls["squeue"] != 1 {
		t.Errorf("calls %v, want one sbatch and one squeue", calls)
	}
	if _, err := os.Stat(p.jitFile("skiff.tok.r1")); err != nil {
		t.Errorf("the registration file of the job Slurm took is gone: %v", err)
	}
}
