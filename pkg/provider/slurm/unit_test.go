package slurm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skiffci/skiff/internal/privatefile"
	"github.com/skiffci/skiff/pkg/metrics"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/provider/providertest"
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

// TestSubmitArgs: the sbatch options are the launch spec's slurm: section
// mapped by pool.Slurm.Request (the one mapping of a section), the
// section's runnerDir and workDir start the runner, and skiff's own
// options come last; a spec without a section takes the provider's
// defaults and the cluster's default partition.
func TestSubmitArgs(t *testing.T) {
	t.Parallel()
	section := &pool.Slurm{Partition: "gpu", Account: "lab", QOS: "ci", Gres: "gpu:a100:1", CPUsPerTask: 4, MemoryMiB: 16384,
		RunnerDir: "/shared/actions-runner", WorkDir: "/scratch/ci", ExtraOptions: []string{"--nice=10"}}
	cases := []struct {
		name          string
		spec          pool.Spec
		args, command string
		workDir       string
	}{
		{"a section", pool.Spec{Shared: pool.Shared{Pool: "gpu", MaxLifetime: 89*time.Minute + time.Second}, Slurm: section},
			"--partition=gpu --account=lab --qos=ci --cpus-per-task=4 --mem=16G --gres=gpu:a100:1 --time=90 --nice=10",
			"'/shared/actions-runner/run.sh' &", "'/scratch/ci'"},
		{"a section with the job's sizes", pool.Spec{Shared: pool.Shared{Pool: "gpu", MaxLifetime: time.Hour,
			Sizes: pool.Sizes{VCPU: 8, MemoryGiB: 32, GPUs: 2, DiskGiB: 100}}, Slurm: section},
			"--partition=gpu --account=lab --qos=ci --cpus-per-task=8 --mem=32G --gres=gpu:a100:2 --tmp=100G --time=60 --nice=10",
			"'/shared/actions-runner/run.sh' &", "'/scratch/ci'"},
		{"no section", pool.Spec{Shared: pool.Shared{Pool: "cpu"}}, "--time=360", "'/it'\\''s/runner' &", "'/shared/work'"},
	}
	for _, tc := range cases {
		fc := &fakeSlurm{}
		p := newFake(t, fc)
		pl, err := p.Plan(context.Background(), provider.Launch{Token: "tok", Spec: tc.spec, Runners: []provider.RunnerRequest{{Name: "r1"}}})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if _, err := p.Launch(context.Background(), pl, []provider.Registration{{Mode: provider.ModeJIT, JITConfig: "x"}}); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		sub := fc.submits[0]
		if got := strings.Join(sub.args, " "); !strings.HasPrefix(got, tc.args+" --parsable --job-name=skiff.tok.r1 --export=NONE") {
			t.Errorf("%s: sbatch %s\nwant first %s, then skiff's", tc.name, got, tc.args)
		}
		if !strings.Contains(sub.script, "\n"+tc.command+"\n") || !strings.Contains(sub.script, "mkdir -p "+tc.workDir) {
			t.Errorf("%s: the script does not run %s in %s:\n%s", tc.name, tc.command, tc.workDir, sub.script)
		}
	}
	p, err := New(Options{Commander: &fakeSlurm{}, User: "ci", JITDir: t.TempDir() + "/jit"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Plan(context.Background(), provider.Launch{Token: "tok", Spec: pool.Spec{Shared: pool.Shared{Pool: "cpu"}}, Runners: []provider.RunnerRequest{{Name: "r1"}}})
	if !errors.Is(err, provider.ErrInvalid) || !provider.Permanent(err) {
		t.Errorf("a pool without a runner, on a provider without a default: %v, want a final ErrInvalid", err)
	}
}

func TestParseSqueue(t *testing.T) {
	t.Parallel()
	out := "12|ci|PENDING|gpu|(null)|2026-12-01T10:00:00|N/A|Priority\n" +
		"13|run1|RUNNING|gpu|node7|2026-12-01T10:00:01|2026-12-01T10:00:05|None\n" +
		"not a job line\n" +
		"15|ci|PENDING|gpu||2026-12-01T10:00:01|N/A|QOSMaxJobsPerUserLimit|odd|text\n"
	jobs := parseSqueue(out)
	if len(jobs) != 3 {
		t.Fatalf("parsed %d jobs, want 3: %+v", len(jobs), jobs)
	}
	if j := jobs[0]; j.ID != "12" || j.User != "ci" || j.Nodes != "" || j.Reason != "Priority" || j.Submitted.IsZero() {
		t.Errorf("job 12: %+v", j)
	}
	if j := jobs[1]; j.User != "run1" || j.Reason != "" || j.Nodes != "node7" || j.Started.IsZero() || !jobs[0].Started.IsZero() {
		t.Errorf("job 13: %+v", j)
	}
	if j := jobs[2]; j.Reason != "QOSMaxJobsPerUserLimit|odd|text" {
		t.Errorf("job 15's reason %q", j.Reason)
	}
}

// TestListTrustsOnlyTheRecord: List shows the jobs of skiff's record whose
// id and user Slurm confirms, with the record's tags; a job of the daemon's
// user that skiff did not submit is not listed, a job of a recorded id
// under another user is not taken for skiff's, and a live job of a run-as
// account that skiff did not submit is cancelled as that account, which
// gets no runner until it is gone.
func TestListTrustsOnlyTheRecord(t *testing.T) {
	t.Parallel()
	fc := &fakeSlurm{}
	p := newFake(t, fc)
	p.addRecord(&record{Name: "skiff.a.r", ID: "1", Pool: "cpu", Tags: map[string]string{names.TagPool: "cpu", names.TagRunnerName: "r"}})
	p.addRecord(&record{Name: "skiff.b.r", ID: "3", Account: "run1", Pool: "gpu", Tags: map[string]string{names.TagPool: "gpu"}})
	fc.lines = []string{
		"1|ci|RUNNING|debug|n1|2026-12-01T10:00:00|2026-12-01T10:00:01|None",
		"2|ci|RUNNING|debug|n1|2026-12-01T10:00:00|2026-12-01T10:00:01|None",
		"3|mallory|RUNNING|debug|n1|2026-12-01T10:00:00|2026-12-01T10:00:01|None",
		"4|run2|RUNNING|debug|n1|2026-12-01T10:00:00|2026-12-01T10:00:01|None",
	}
	p.accounts["run2"] = true
	got, err := p.List(context.Background(), provider.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].ID != "1" || got[0].Pool != "cpu" || got[0].Tags[names.TagRunnerName] != "r" || got[0].Tags[TagRunAs] != "ci" {
		t.Errorf("List = %+v, want job 1 alone, with the record's tags", got)
	}
	if want := "run2 scancel --user=run2 4"; !slices.Contains(fc.sudo, want) {
		t.Errorf("commands run through sudo %q, want %q", fc.sudo, want)
	}
	if _, free := p.freeAccount([]string{"run2"}); free {
		t.Error("run2 runs a job skiff did not submit, yet is free for a runner")
	}
}

func TestParseUsage(t *testing.T) {
	t.Parallel()
	// sacct --noheader --parsable2 --format=usageFormat of a job and its
	// steps; TRESUsageInMax as Slurm 22.05 prints it, with the GPU
	// fields of a site whose NVML plugin gathers them.
	out := "42|hpc|gpu|node7|COMPLETED|125|01:02:03||billing=4,cpu=4,gres/gpu=2,mem=16G,node=1|\n" +
		"42.batch|hpc||node7|COMPLETED|125|01:00:00.500|2048000K|cpu=4,gres/gpu=2,mem=16G,node=1|cpu=01:00:00,energy=0,fs/disk=2263,gres/gpumem=3000M,gres/gpuutil=87,mem=2048000K,pages=0,vmem=3000000K\n" +
		"42.extern|hpc||node7|COMPLETED|125|00:00:00.001|1024K|billing=4,cpu=4,gres/gpu=2,mem=16G,node=1|cpu=00:00:00,energy=0,fs/disk=0,mem=1024K,pages=0,vmem=0\n" +
		"43|hpc|debug|None assigned|CANCELLED by 0|0|00:00:00||billing=1,cpu=1,mem=100M,node=1|\n"
	u, ok := parseUsage(out, "42")
	want := Usage{JobID: "42", Cluster: "hpc", Partition: "gpu", Nodes: "node7", State: "COMPLETED", Elapsed: 125 * time.Second,
		CPUTime: time.Hour + 2*time.Minute + 3*time.Second, MaxRSSBytes: 2048000 * 1024, CPUs: 4, MemoryBytes: 16 << 30, GPUs: 2,
		GPUMemoryBytes: 3000 << 20, GPUMemoryOK: true, GPUUtilizationPercent: 87, GPUUtilizationOK: true}
	if !ok || u != want {
		t.Errorf("parseUsage = %+v (%v),\nwant %+v", u, ok, want)
	}
	if u, ok := parseUsage(out, "43"); !ok || u.Nodes != "" || u.CPUs != 1 || u.MemoryBytes != 100<<20 || u.GPUMemoryOK || u.MaxRSSBytes != 0 {
		t.Errorf("a job cancelled while pending: %+v (%v)", u, ok)
	}
	if _, ok := parseUsage(out, "44"); ok {
		t.Error("parseUsage found a job that is not there")
	}
	pk := want.Peaks()
	if pk.Slurm == nil || *pk.Slurm != (metrics.Slurm{Cluster: "hpc", Partition: "gpu", Nodes: "node7", JobID: "42", State: "COMPLETED"}) ||
		pk.Host == nil || pk.Host.CPUs != 4 || *pk.Host.MemoryGiB != 16 || *pk.Host.GPUs != 2 ||
		*pk.CPUSeconds != 3723 || *pk.MemoryPeakGiB != 2048000.0/1024/1024 || *pk.MemoryPeak != 2048000.0/1024/1024/16*100 ||
		*pk.GPUMemoryUsedMiB != 3000 || *pk.GPUUtilization != 87 {
		t.Errorf("Peaks = %+v (host %+v)", pk, pk.Host)
	}
	if mean := *pk.CPUMean; mean < 744 || mean > 745 { // 3723 s over 125 s on 4 CPUs, unclamped
		t.Errorf("CPUMean = %g", mean)
	}
	if st := (Usage{State: "CANCELLED by 0"}).Peaks().Slurm.State; st != "CANCELLED" {
		t.Errorf("state %q", st)
	}
	if got := parseCPUTime("1-02:03:04"); got != 26*time.Hour+3*time.Minute+4*time.Second {
		t.Errorf("parseCPUTime(1-02:03:04) = %s", got)
	}
}

// TestRecordZoneIsTheAccountingsCluster: a record built from a job's
// accounting names the cluster sacct reports as its zone, not the name the
// provider's options give the cluster (the instance's zone).
func TestRecordZoneIsTheAccountingsCluster(t *testing.T) {
	t.Parallel()
	out := "42|hpc-west|gpu|node7|COMPLETED|125|01:02:03||billing=4,cpu=4,mem=16G,node=1|\n"
	u, ok := parseUsage(out, "42")
	if !ok {
		t.Fatal("parseUsage found no job 42")
	}
	start := time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)
	r, err := metrics.Build(metrics.Inputs{
		Job: metrics.JobInput{ID: 7, Repository: "acme/api", WorkflowName: "CI", StartedAt: start, CompletedAt: start.Add(u.Elapsed)},
		Run: metrics.RunInput{Event: "push"}, CloudProvider: "slurm", Peaks: u.Peaks(),
		Instance: metrics.InstanceInput{ID: "42", Type: "gpu", Zone: "slurm"}, // Options.Cluster's default
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.Zone != "hpc-west" || r.Slurm == nil || r.Slurm.Cluster != "hpc-west" {
		t.Errorf("zone %q, slurm %+v: want the accounting's cluster hpc-west", r.Zone, r.Slurm)
	}
}

// TestScriptHoldsNoSecret: the batch script names the file, never the
// configuration, and quotes what it is given.
func TestScriptHoldsNoSecret(t *testing.T) {
	t.Parallel()
	fc := &fakeSlurm{}
	p := newFake(t, fc)
	l := provider.Launch{Token: "tok", Spec: pool.Spec{Shared: pool.Shared{Pool: "cpu"}}, Runners: []provider.RunnerRequest{{Name: "r1"}}}
	providertest.PlanAndLaunch(t, p, l, []provider.Registration{{Mode: provider.ModeJIT, JITConfig: "CANARY-SECRET"}})
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
	lines []string // squeue lines
	names []string // the job name of each id, from 1
	// loseAnswer makes sbatch take the job and fail as a timeout does.
	loseAnswer bool
	submits    []struct {
		args   []string
		script string
	}
	// sudo are the commands run through sudo: the account, the command
	// and its arguments.
	sudo []string
	// duringSqueue runs while squeue makes its answer.
	duringSqueue func()
}

func (f *fakeSlurm) Run(_ context.Context, name string, args []string, stdin []byte) ([]byte, error) {
	if name == "sudo" {
		args = args[2:] // -n -u
		f.sudo = append(f.sudo, strings.Join(args, " "))
		name, args = args[1], args[2:]
	}
	switch name {
	case "sbatch":
		f.submits = append(f.submits, struct {
			args   []string
			script string
		}{args, string(stdin)})
		var jn string
		for _, a := range args {
			if v, ok := strings.CutPrefix(a, "--job-name="); ok {
				jn = v
			}
		}
		f.names = append(f.names, jn)
		id := len(f.names)
		f.lines = append(f.lines, fmt.Sprintf("%d|ci|PENDING|debug||2026-12-01T10:00:00|N/A|Priority", id))
		if f.loseAnswer {
			return nil, &ExitError{Command: name, Code: 1, Stderr: "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation"}
		}
		return []byte(fmt.Sprintf("%d\n", id)), nil
	case "squeue":
		for _, a := range args {
			if n, ok := strings.CutPrefix(a, "--name="); ok {
				var ids []string
				for i, jn := range f.names {
					if jn == n {
						ids = append(ids, strconv.Itoa(i+1))
					}
				}
				return []byte(strings.Join(ids, "\n") + "\n"), nil
			}
		}
		out := []byte(strings.Join(f.lines, "\n") + "\n")
		if f.duringSqueue != nil {
			f.duringSqueue()
		}
		return out, nil
	case "scancel", "sacct", "install", "dd":
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

// TestRecordsReloaded: a provider started on the same directory reads the
// records the last one saved, and removes a temporary file a crash left in
// the middle of a save.
func TestRecordsReloaded(t *testing.T) {
	t.Parallel()
	o := Options{Commander: &fakeSlurm{}, User: "ci", JITDir: t.TempDir() + "/jit", WorkDir: "/shared/work", Command: []string{"/runner"}}
	p, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	err = p.saveRecord(&record{Name: "skiff.a.r", ID: "7", Pool: "cpu", Account: "run1"})
	p.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	torn := filepath.Join(p.o.StateDir, privatefile.TempPrefix+"skiff.b.r.json-123")
	if err := os.WriteFile(torn, []byte(`{"name":`), 0o600); err != nil {
		t.Fatal(err)
	}
	again, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	if r := again.records["skiff.a.r"]; r == nil || r.ID != "7" || r.Account != "run1" || len(again.records) != 1 {
		t.Errorf("records after a restart: %+v, want skiff.a.r alone", again.records)
	}
	if _, err := os.Stat(torn); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the torn temporary file is still there (%v)", err)
	}
}

// BenchmarkReconcile1000 lists 1,000 of skiff's Slurm jobs through a fake
// command layer (a real cluster of 1,000 jobs does not fit a test
// machine): one squeue per pass, whatever the count.
func BenchmarkReconcile1000(b *testing.B) {
	fc := &fakeSlurm{}
	p := newFake(b, fc)
	for i := range 1000 {
		fc.lines = append(fc.lines, fmt.Sprintf("%d|ci|RUNNING|debug|node%d|2026-12-01T10:00:00|2026-12-01T10:00:01|None", i+1, i%50))
		p.addRecord(&record{Name: fmt.Sprintf("skiff.tok%d.r", i), ID: strconv.Itoa(i + 1), Pool: "cpu",
			Tags: map[string]string{names.TagPool: "cpu", names.TagRunnerName: "r" + strconv.Itoa(i)}})
	}
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
	pl, err := p.Plan(context.Background(), provider.Launch{Token: "tok", Spec: pool.Spec{Shared: pool.Shared{Pool: "cpu"}}, Runners: []provider.RunnerRequest{{Name: "r1"}}})
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

// TestResolveTakesOnlyNewerJobs: a submit whose answer was lost is found by
// name among its account's jobs, but only newer than every job recorded for
// the account: an earlier runner's job that renamed itself to the name is
// not taken for it.
func TestResolveTakesOnlyNewerJobs(t *testing.T) {
	t.Parallel()
	const name = "skiff.tok.r1"
	cases := []struct {
		name  string
		named []int // ids of the account's jobs squeue finds by the name
		want  string
	}{
		{"an older job renamed itself", []int{3}, ""},
		{"the submitted job", []int{7}, "7"},
		{"both", []int{3, 7}, "7"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fc := &fakeSlurm{names: make([]string, 8)}
			for _, id := range tc.named {
				fc.names[id-1] = name
			}
			p := newFake(t, fc)
			p.addRecord(&record{Name: "skiff.old.r", ID: "5", Account: "run1", Ended: true})
			r := &record{Name: name, Account: "run1"}
			p.addRecord(r)
			j, ok, err := p.resolve(context.Background(), r)
			if err != nil || ok != (tc.want != "") || ok && (j.ID != tc.want || r.ID != tc.want) {
				t.Errorf("resolve = %+v, %v, %v; want job %q", j, ok, err, tc.want)
			}
		})
	}
}

// TestSubmitDuringListing: a submit that finishes while a listing's squeue
// runs is not in that squeue's answer, and is not taken for ended.
func TestSubmitDuringListing(t *testing.T) {
	t.Parallel()
	fc := &fakeSlurm{}
	p := newFake(t, fc)
	r := &record{Name: "skiff.tok.r1", Pool: "cpu"}
	p.addRecord(r)
	fc.duringSqueue = func() {
		// sbatch answers while squeue runs: the id is recorded after the
		// squeue's answer was made without the job.
		p.mu.Lock()
		r.ID = "9"
		p.byID["9"] = r
		p.mu.Unlock()
	}
	if _, err := p.List(context.Background(), provider.Filter{}); err != nil {
		t.Fatal(err)
	}
	if r.Ended {
		t.Error("a job submitted during the listing is taken for ended")
	}
}

// TestRunAsScript: a run-as account's batch script ends the account's other
// jobs and processes before the runner starts and when it ends, a runAs:
// shared one never does (they would be skiff's own), and both pass
// shellcheck where it is installed.
func TestRunAsScript(t *testing.T) {
	t.Parallel()
	p := newFake(t, &fakeSlurm{})
	pn := plan{Token: "tok", Pool: "cpu", Command: []string{"/opt/runner/run.sh"}, WorkDir: "/scratch"}
	cases := []struct {
		name, account string
		sweeps        bool
	}{
		{"run-as account", "ci-run1", true},
		{"shared", "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := p.script(pn, "skiff.tok.r1", "/jit/ci-run1/registration", tc.account)
			runner := strings.Index(s, "'/opt/runner/run.sh' &")
			start := strings.LastIndex(s[:runner], "\nsweep\n")
			if got := strings.Contains(s, "kill -KILL -1") && start > 0; got != tc.sweeps {
				t.Errorf("sweeps before the runner: %v, want %v:\n%s", got, tc.sweeps, s)
			}
			if !strings.Contains(s, "cleanup() {") || !strings.Contains(s, "; sweep; }") {
				t.Errorf("the cleanup does not sweep:\n%s", s)
			}
			if sc, err := exec.LookPath("shellcheck"); err == nil {
				cmd := exec.Command(sc, "-s", "sh", "-")
				cmd.Stdin = strings.NewReader(s)
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Errorf("shellcheck: %v\n%s\n%s", err, out, s)
				}
			}
		})
	}
}

// failedSlurm answers squeue with its jobs all FAILED and sacct with the
// version-deprecated exit code for each, after a short wait (the time a
// real sacct takes): a Commander safe for concurrent calls.
type failedSlurm struct{ ids []string }

func (f failedSlurm) Run(ctx context.Context, name string, args []string, _ []byte) ([]byte, error) {
	var b strings.Builder
	switch name {
	case "squeue":
		for _, id := range f.ids {
			fmt.Fprintf(&b, "%s|ci|FAILED|debug|n1|2026-12-01T10:00:00|2026-12-01T10:00:05|NonZeroExitCode\n", id)
		}
	case "sacct":
		time.Sleep(2 * time.Millisecond) // widens the window; no outcome depends on it
		for _, id := range f.ids {
			fmt.Fprintf(&b, "%s|FAILED|%d:0\n", id, provider.ExitVersionDeprecated)
		}
	case "scancel", "install", "dd":
	default:
		return nil, fmt.Errorf("unexpected command %s", name)
	}
	return []byte(b.String()), ctx.Err()
}

// TestListsWhileReadingExitCodes: the local daemon lists from its instance
// watch and from the reconciler at once, and one listing tags a record
// whose job ended with the version-deprecated code while the other copies
// the record's tags into its instances. Under the race detector (make test
// runs this package with it) a copy outside the lock fails here; without
// it the test checks that every listing's instances carry the record's
// own tags and, once read, the outdated tag.
func TestListsWhileReadingExitCodes(t *testing.T) {
	t.Parallel()
	var fc failedSlurm
	for i := range 20 {
		fc.ids = append(fc.ids, strconv.Itoa(100+i))
	}
	p, err := New(Options{Commander: fc, User: "ci", JITDir: t.TempDir() + "/jit", WorkDir: "/shared/work", Command: []string{"/runner"}})
	if err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	for _, id := range fc.ids {
		p.addRecord(&record{Name: "skiff.tok.r" + id, ID: id, Pool: "cpu", Written: time.Now(),
			Tags: map[string]string{names.TagRunnerVersion: "2.330.0"}})
	}
	p.mu.Unlock()
	listed := make(chan []provider.Instance)
	for range 4 {
		go func() {
			l, err := p.List(context.Background(), provider.Filter{})
			if err != nil {
				t.Errorf("List: %v", err)
			}
			listed <- l
		}()
	}
	for range 4 {
		for _, in := range <-listed {
			if in.Tags[names.TagRunnerVersion] != "2.330.0" || in.Pool != "cpu" {
				t.Errorf("instance %s: pool %q, tags %v", in.ID, in.Pool, in.Tags)
			}
		}
	}
	again, _ := p.List(context.Background(), provider.Filter{})
	for _, in := range again {
		if in.Tags[names.TagRunnerOutdated] != "2.330.0" {
			t.Errorf("instance %s after the exit codes were read: tags %v", in.ID, in.Tags)
		}
	}
	if len(again) != len(fc.ids) {
		t.Errorf("listed %d instances, want %d", len(again), len(fc.ids))
	}
}
