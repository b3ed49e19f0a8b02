package local_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skiffci/skiff/internal/local"
	"github.com/skiffci/skiff/internal/localtest"
	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/metrics"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/pool/poolfile"
	"github.com/skiffci/skiff/pkg/provider"
)

// slurmPools are two Slurm pools of the test cluster, priced by the
// operator: one CPU and 512 MiB per job, and one GPU per job. RUNNER is
// the runner install, WORK the work root (both on the "shared filesystem").
const slurmPools = `version: 1
defaults:
  slurm:
    runAs: shared
    runnerDir: RUNNER
    workDir: WORK
pools:
  - name: cpu
    labels: [cpu]
    maxRunners: 20
    costPerHour: 1.5
    slurm:
      partition: debug
      account: ci
      cpusPerTask: 1
      memory: 512M
  - name: gpu
    labels: [gpu]
    maxRunners: 2
    costPerHour: 3
    slurm:
      partition: debug
      account: ci
      cpusPerTask: 2
      memory: 1G
      gres: gpu:1
`

// standinWork is what each stand-in runner does (SKIFF_STANDIN_WORK): burn
// 0.4 s of CPU and hold 96 MiB, for at least SKIFF_STANDIN_DURATION (3 s:
// three of the accounting's one-second samples of the job's memory).
const standinWork = "*=0.4:96"

// TestLocalModeSlurm: skiff local with the slurm provider against a real
// single-node cluster with accounting, the GitHub simulator and stand-in
// runners: every job completes on a runner that was a Slurm batch job, with
// one metrics record each, which says what sacct measured (CPU time, peak
// memory, the allocation and its GPUs), where it ran (cluster, partition,
// node) and its cost at the pool's rate.
func TestLocalModeSlurm(t *testing.T) {
	t.Parallel()
	ls := startLocalSlurm(t, testenv.SlurmOptions{CPUs: 16, Accounting: true}, slurmPools)
	s, sim, l, logs := ls.Slurm, ls.sim, ls.l, ls.logs

	const n = 4
	var jobs []ghsim.JobSpec
	for i := range n {
		labels := []string{"self-hosted", "cpu"}
		if i == n-1 {
			labels = []string{"self-hosted", "gpu"}
		}
		jobs = append(jobs, ghsim.JobSpec{Name: fmt.Sprintf("job-%d", i), Labels: labels})
	}
	run, err := sim.StartRun(ghsim.RunSpec{Repo: "acme/app", Jobs: jobs})
	if err != nil {
		t.Fatal(err)
	}
	localtest.Poll(t, fmt.Sprintf("the %d jobs to complete", n), logs, func() bool { return completedJobs(sim, run.JobIDs) == n })
	localtest.Poll(t, "the pools to count no runner once every job ended", logs, func() bool {
		cpu, _ := l.Ledger.Live(context.Background(), "cpu")
		gpu, _ := l.Ledger.Live(context.Background(), "gpu")
		return cpu+gpu == 0 // the state poll is another goroutine's
	})
	recs := map[int64]int{}
	byJob := map[int64]metrics.Record{}
	localtest.Poll(t, fmt.Sprintf("a metrics record for each of the %d jobs", n), logs, func() bool {
		recs = map[int64]int{} // records are written by the reconciler's goroutine
		for r, err := range l.MetricsRecords.List(context.Background(), metrics.Filter{}) {
			if err != nil {
				t.Fatal(err)
			}
			recs[r.JobID]++
			byJob[r.JobID] = r
		}
		return len(recs) >= n
	})
	if err := ls.stop(); err != nil {
		t.Errorf("Run: %v", err)
	}
	for _, id := range run.JobIDs {
		if j, _ := sim.Job(id); j.Conclusion != "success" {
			t.Errorf("job %d: %+v", id, j)
		}
		if recs[id] != 1 {
			t.Errorf("job %d has %d metrics records, want 1 (all: %v)", id, recs[id], recs)
		}
	}
	for _, id := range run.JobIDs {
		if r, ok := byJob[id]; ok {
			checkSlurmRecord(t, r, s.Node, r.Pool == "gpu")
		}
	}
	for _, secret := range sim.Secrets() {
		if secret != "" && strings.Contains(logs.String(), secret) {
			t.Fatal("a credential reached the logs")
		}
	}
}

// checkSlurmRecord checks what a Slurm job's record says against what the
// stand-in did (standinWork) and the pool it ran in (slurmPools).
func checkSlurmRecord(t *testing.T, r metrics.Record, node string, gpu bool) {
	t.Helper()
	cpus, mem, rate, gpus := 1, 0.5, 1.5, 0
	if gpu {
		cpus, mem, rate, gpus = 2, 1, 3, 1
	}
	if err := metrics.Validate(r); err != nil {
		t.Errorf("job %d: the record fails the schema: %v", r.JobID, err)
	}
	if r.CloudProvider != "slurm" || r.InstanceType != "debug" || r.Region != "" {
		t.Errorf("job %d: cloudProvider %q, instanceType %q, region %q; want slurm, the partition debug, no region", r.JobID, r.CloudProvider, r.InstanceType, r.Region)
	}
	if sl := r.Slurm; sl == nil || sl.Cluster != "skifftest" || sl.Partition != "debug" || sl.Nodes != node || sl.JobID == "" || sl.State != "COMPLETED" {
		t.Errorf("job %d: slurm %+v, want cluster skifftest, partition debug, node %s, a job id, COMPLETED", r.JobID, r.Slurm, node)
	}
	if h := r.Host; h == nil || h.CPUs != cpus || h.MemoryGiB == nil || *h.MemoryGiB != mem || h.GPUs == nil || *h.GPUs != gpus {
		t.Errorf("job %d: host %+v, want the allocation: %d CPUs, %g GiB, %d GPUs", r.JobID, r.Host, cpus, mem, gpus)
	}
	if gpu && (r.GPU == nil || r.GPU.Count != 1) {
		t.Errorf("job %d: gpu %+v, want a count of 1", r.JobID, r.GPU)
	}
	// The stand-in burns 0.4 s of CPU (its own start and the batch script
	// add some: at most a second over) and holds 96 MiB for 3 s (its Go
	// runtime adds tens of MiB: at most 256 MiB in all).
	if c := r.CPU; c == nil || c.Seconds == nil || *c.Seconds < 0.35 || *c.Seconds > 1.4 || c.MeanPercent == nil {
		t.Errorf("job %d: cpu %+v, want 0.35–1.4 CPU-seconds and a mean", r.JobID, r.CPU)
	}
	if m := r.Memory; m == nil || m.PeakGiB == nil || *m.PeakGiB < 96.0/1024 || *m.PeakGiB > 256.0/1024 || m.PeakPercent == nil {
		t.Errorf("job %d: memory %+v, want a peak of 96–256 MiB and its share of the allocation", r.JobID, r.Memory)
	}
	if c := r.Cost; c == nil || c.Basis != metrics.BasisOperatorRate || c.HourlyUSD != rate || c.EstimatedUSD <= 0 {
		t.Errorf("job %d: cost %+v, want the pool's rate %g per hour", r.JobID, r.Cost, rate)
	}
	if slices.Contains(r.MissingSources, metrics.SourceAgent) || slices.Contains(r.MissingSources, metrics.SourceMemory) ||
		slices.Contains(r.MissingSources, metrics.SourcePrice) {
		t.Errorf("job %d: missing sources %v", r.JobID, r.MissingSources)
	}
}

// localSlurm is skiff local with the slurm provider on a test cluster, the
// GitHub simulator sending its webhooks, and stand-in runners.
type localSlurm struct {
	*testenv.Slurm
	sim  *ghsim.Server
	l    *local.Local
	logs *testenv.SyncBuffer
	// stop ends Run and returns its error.
	stop func() error
}

// startLocalSlurm starts a cluster of o, and skiff local over it with the
// pools file poolsYAML (RUNNER and WORK replaced by the runner install and
// the work root on the "shared filesystem").
func startLocalSlurm(t *testing.T, o testenv.SlurmOptions, poolsYAML string, mods ...func(c *local.Config, standin string)) localSlurm {
	t.Helper()
	s := testenv.StartSlurm(t, o)
	standin := buildStandin(t, s.Dir)
	sim, pemKey := testenv.GitHubApp(t, "CANARYSLURM")
	runnerDir := s.RunnerInstall(t, standin)
	shared := filepath.Join(s.Dir, "shared")
	pools := strings.NewReplacer("RUNNER", runnerDir, "WORK", filepath.Join(shared, "work")).Replace(poolsYAML)
	c := local.Config{
		Provider: "slurm", SlurmShared: shared, SlurmEnv: []string{"SLURM_CONF=" + s.Conf},
		// A spare runner (a replacement whose job another runner took)
		// exits when idle, as an instance powers off.
		RunnerEnv:      []string{"SKIFF_STANDIN_DURATION=3s", "SKIFF_STANDIN_WORK=" + standinWork, "SKIFF_STANDIN_IDLE=10s"},
		MetricsRecords: true,
		ReconcileEvery: 2 * time.Second, // records are the reconciler's to write
	}
	for _, m := range mods {
		m(&c, standin)
	}
	l, logs, stop := startLocal(t, sim, pemKey, pools, c)
	return localSlurm{Slurm: s, sim: sim, l: l, logs: logs, stop: stop}
}

// heldPools is one pool whose partition starts down: its runners wait in
// Slurm's queue until the test brings the partition up.
const heldPools = `version: 1
defaults:
  slurm:
    runAs: shared
    runnerDir: RUNNER
    workDir: WORK
pools:
  - name: held
    labels: [held]
    maxRunners: 4
    slurm:
      partition: held
`

// TestLocalModeSlurmAdminCancel: an administrator scancels a runner's
// batch job while it waits in Slurm's queue; the reconciler sees the
// runner gone with its job still queued and launches a replacement, which
// runs the job once the partition is up: the job completes, with one
// replacement and two batch jobs in all.
func TestLocalModeSlurmAdminCancel(t *testing.T) {
	t.Parallel()
	ls := startLocalSlurm(t, testenv.SlurmOptions{Partitions: []string{"held State=DOWN"}}, heldPools)
	run, err := ls.sim.StartRun(ghsim.RunSpec{Repo: "acme/app", Jobs: []ghsim.JobSpec{{Name: "build", Labels: []string{"self-hosted", "held"}}}})
	if err != nil {
		t.Fatal(err)
	}
	jobID := run.JobIDs[0]
	instances := func() []provider.Instance {
		all, err := ls.l.Provider.List(context.Background(), provider.Filter{Pool: "held"})
		if err != nil {
			t.Fatal(err)
		}
		return all
	}
	var first provider.Instance
	localtest.Poll(t, "the runner's batch job to wait in the held partition", ls.logs, func() bool {
		all := instances()
		if len(all) == 1 && all[0].State == provider.Pending && all[0].QueueReason == "PartitionDown" {
			first = all[0]
			return true
		}
		return false
	})
	if out, err := ls.Command("scancel", first.ID).CombinedOutput(); err != nil {
		t.Fatalf("scancel %s: %v: %s", first.ID, err, out)
	}
	var second provider.Instance
	localtest.Poll(t, "a replacement runner", ls.logs, func() bool {
		for _, in := range instances() {
			if in.ID != first.ID && in.State.Alive() {
				second = in
				return true
			}
		}
		return false
	})
	if out, err := ls.Command("scontrol", "update", "PartitionName=held", "State=UP").CombinedOutput(); err != nil {
		t.Fatalf("bringing the partition up: %v: %s", err, out)
	}
	localtest.Poll(t, "the job to complete", ls.logs, func() bool {
		j, ok := ls.sim.Job(jobID)
		return ok && j.Status == "completed"
	})
	if j, _ := ls.sim.Job(jobID); j.Conclusion != "success" || j.RunnerName != second.Tags[names.TagRunnerName] {
		t.Errorf("job %d: %+v, want success on the replacement %s", jobID, j, second.Tags[names.TagRunnerName])
	}
	all := instances()
	if len(all) != 2 {
		t.Errorf("%d batch jobs for one job, want the cancelled one and its replacement: %+v", len(all), all)
	}
	for _, in := range all {
		if in.ID == first.ID && in.State.Alive() {
			t.Errorf("the cancelled batch job %s is %s", in.ID, in.State)
		}
	}
	if n := strings.Count(ls.logs.String(), `"msg":"stranded job: replacement launched","job_id":`+strconv.FormatInt(jobID, 10)); n != 1 {
		t.Errorf("%d replacements logged for job %d, want 1", n, jobID)
	}
}

// runAsPools is a Slurm pool whose runners run as two run-as accounts
// (RUNAS), with a maxRunners above their number.
const runAsPools = `version: 1
pools:
  - name: cpu
    labels: [cpu]
    maxRunners: 4
    slurm:
      runAs: RUNAS
      runnerDir: RUNNER
      workDir: WORK
`

// TestLocalModeSlurmRunAs: skiff local with a pool of two run-as accounts:
// the pool's maxRunners falls to two, every job completes on a runner that
// ran as one of the accounts (submitted through real sudo), skiff's record
// of its jobs is in its data directory, and nothing of the accounts' is
// left at the end.
func TestLocalModeSlurmRunAs(t *testing.T) {
	t.Parallel()
	s := testenv.StartSlurm(t, testenv.SlurmOptions{CPUs: 16})
	accounts := []string{"skiff-lrun1", "skiff-lrun2"}
	if _, err := exec.LookPath("sudo"); err != nil {
		testenv.Missing(t, "sudo", "apt-get install -y sudo")
		return
	}
	shared := runAsShared(t, s, accounts)
	standin := buildStandin(t, s.Dir)
	sim, pemKey := testenv.GitHubApp(t, "CANARYRUNAS")
	runnerDir := s.RunnerInstall(t, standin)
	yaml := strings.NewReplacer("RUNAS", "["+strings.Join(accounts, ", ")+"]", "RUNNER", runnerDir,
		"WORK", filepath.Join(shared, "work")).Replace(runAsPools)
	pools, err := poolfile.Parse([]byte(yaml), "pools.yaml")
	if err != nil {
		t.Fatal(err)
	}
	l, logs, stop := startLocal(t, sim, pemKey, yaml, local.Config{
		Provider: "slurm", SlurmShared: shared, SlurmEnv: []string{"SLURM_CONF=" + s.Conf},
		SlurmSudo: []string{"sudo", "-n", "--preserve-env=SLURM_CONF", "-u"}, Pools: pools,
		RunnerEnv:      []string{"SKIFF_STANDIN_DURATION=1s", "SKIFF_STANDIN_IDLE=10s", "SLURM_CONF=" + s.Conf},
		ReconcileEvery: 2 * time.Second,
	})
	if got := pools.Pool("cpu").MaxRunners; got != len(accounts) {
		t.Errorf("the pool's maxRunners is %d, want its %d accounts", got, len(accounts))
	}
	const n = 3
	var jobs []ghsim.JobSpec
	for i := range n {
		jobs = append(jobs, ghsim.JobSpec{Name: fmt.Sprintf("job-%d", i), Labels: []string{"self-hosted", "cpu"}})
	}
	run, err := sim.StartRun(ghsim.RunSpec{Repo: "acme/app", Jobs: jobs})
	if err != nil {
		t.Fatal(err)
	}
	localtest.Poll(t, fmt.Sprintf("the %d jobs to complete", n), logs, func() bool { return completedJobs(sim, run.JobIDs) >= n })
	all, err := l.Provider.List(context.Background(), provider.Filter{Pool: "cpu"})
	if err != nil {
		t.Fatal(err)
	}
	ranAs := map[string]int{}
	for _, in := range all {
		ranAs[in.Tags["slurm:run-as"]]++
	}
	if len(all) < n || ranAs[accounts[0]]+ranAs[accounts[1]] != len(all) {
		t.Errorf("runners ran as %v, want all %d and more as %v", ranAs, n, accounts)
	}
	for _, id := range run.JobIDs {
		if j, _ := sim.Job(id); j.Conclusion != "success" {
			t.Errorf("job %d: %+v", id, j)
		}
	}
	// skiff's record of its jobs is in its data directory, not on the
	// filesystem the jobs share.
	if _, err := os.Stat(filepath.Join(shared, "jit", ".records")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("skiff's job record is on the shared filesystem (%v)", err)
	}
	if err := stop(); err != nil {
		t.Errorf("Run: %v", err)
	}
}

// runAsShared makes the cluster's shared filesystem for run-as accounts:
// the registration root (each account's own directory in it, as the
// operator's one-time setup makes them) and the sticky work root; it
// creates the accounts, removed when t ends, and returns the shared root.
func runAsShared(t *testing.T, s *testenv.Slurm, accounts []string) string {
	t.Helper()
	shared := filepath.Join(s.Dir, "shared")
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{{shared, 0o755}, {filepath.Join(shared, "jit"), 0o711}, {filepath.Join(shared, "work"), 0o1777}} {
		if err := os.Mkdir(d.path, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d.path, d.mode); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range accounts {
		if _, err := user.Lookup(a); err != nil {
			if out, err := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", a).CombinedOutput(); err != nil {
				t.Fatalf("creating account %s: %v\n%s", a, err, out)
			}
		}
		t.Cleanup(func() {
			_ = exec.Command("pkill", "-KILL", "-u", a).Run()
			_ = exec.Command("userdel", a).Run()
		})
		// The operator's one-time setup: the account's registration directory.
		if out, err := exec.Command("install", "-d", "-o", a, "-m", "0700", filepath.Join(shared, "jit", a)).CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	return shared
}

// mixedPools are a Slurm pool and a process pool in one pools file, both
// taking their jobs from their runner scale sets.
const mixedPools = `version: 1
pools:
  - name: hpc
    labels: [hpc]
    jobs: listener
    maxRunners: 4
    costPerHour: 1.5
    slurm:
      partition: debug
      account: ci
      cpusPerTask: 1
      memory: 512M
      runAs: shared
      runnerDir: RUNNER
      workDir: WORK
  - name: lab
    labels: [lab]
    jobs: listener
    maxRunners: 4
    costPerHour: 0.5
    process: {}
`

// TestOneDaemonProcessAndSlurm: one skiff local serves a Slurm pool on the
// real cluster and a process pool on this machine at once, with no port
// open: each pool's jobs run on its own backend (a batch job, a sandboxed
// process), one ledger and one reconciler pass cover both, and each record
// says where its job ran, measured its backend's way.
func TestOneDaemonProcessAndSlurm(t *testing.T) {
	t.Parallel()
	ls := startLocalSlurm(t, testenv.SlurmOptions{CPUs: 8, Accounting: true}, mixedPools, func(c *local.Config, standin string) {
		c.RunnerCommand = []string{standin} // the process pool's runner; the Slurm pool's is its runnerDir
	})
	sim, l, logs := ls.sim, ls.l, ls.logs
	if l.URL() != "" {
		t.Errorf("a daemon whose pools all take jobs from scale sets listens on %s", l.URL())
	}
	if got := l.Provider.Name(); got != "process+slurm" {
		t.Errorf("provider %q, want one routing to process and slurm", got)
	}
	var jobs []ghsim.JobSpec
	for i := range 4 {
		jobs = append(jobs, ghsim.JobSpec{Name: fmt.Sprintf("job-%d", i), Labels: []string{[]string{"hpc", "lab"}[i%2]}})
	}
	run, err := sim.StartRun(ghsim.RunSpec{Repo: "acme/app", Jobs: jobs})
	if err != nil {
		t.Fatal(err)
	}
	byJob := map[int64]metrics.Record{}
	waitUntil(t, "every job completed, every record written", func() (bool, string) {
		hpc, _ := l.Ledger.Live(context.Background(), "hpc")
		lab, _ := l.Ledger.Live(context.Background(), "lab")
		for r, err := range l.MetricsRecords.List(context.Background(), metrics.Filter{}) {
			if err == nil {
				byJob[r.JobID] = r
			}
		}
		return completedJobs(sim, run.JobIDs) == 4 && hpc+lab == 0 && len(byJob) == 4,
			fmt.Sprintf("%d completed, %d live, %d records\n%s", completedJobs(sim, run.JobIDs), hpc+lab, len(byJob), logs)
	})
	if err := ls.stop(); err != nil {
		t.Errorf("Run: %v", err)
	}
	for _, id := range run.JobIDs {
		if j, _ := sim.Job(id); j.Conclusion != "success" {
			t.Errorf("job %d: %+v", id, j)
		}
		r := byJob[id]
		switch r.Pool {
		case "hpc":
			// sacct's measure, on the cluster's node.
			if r.CloudProvider != "slurm" {
				t.Errorf("job %d of pool hpc: record says provider %q, want slurm", id, r.CloudProvider)
			}
			checkSlurmRecord(t, r, ls.Node, false)
		case "lab":
			if r.CloudProvider != "local" || r.Host == nil || r.Slurm != nil {
				t.Errorf("job %d of pool lab: record says provider %q, host %+v, slurm %+v; want this machine's process", id, r.CloudProvider, r.Host, r.Slurm)
			}
			if c := r.Cost; c == nil || c.HourlyUSD != 0.5 {
				t.Errorf("job %d of pool lab: cost %+v, want the pool's rate", id, r.Cost)
			}
		default:
			t.Errorf("job %d: record of pool %q", id, r.Pool)
		}
	}
	if n := sim.AckedUnacquired(); n != 0 {
		t.Errorf("%d offers acknowledged before their job was acquired", n)
	}
}
