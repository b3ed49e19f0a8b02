package process_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/metrics"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/provider/process"
)

// TestUsageOfARunner runs children of known behaviour as runners and
// checks what the provider measured, and the record built from it, on
// both paths: the runner in a cgroup v2 group of its own (where this
// machine lets the provider make one) and without (/proc and rusage).
//
// Tolerances: CPU time is at least what the children burnt (each burns
// until its own CPU time reaches the target) and at most 0.75 s more per
// process: a Go binary's start, its runtime and the page faults of the
// allocation. Peak memory is at least the MiB the child touched and at
// most 64 MiB more: the test binary's own resident pages and the Go
// runtime's heap and stacks (no upper bound under the race detector: the
// child is this test binary, and its shadow memory is resident too).
func TestUsageOfARunner(t *testing.T) {
	t.Parallel()
	const mib = 96
	cases := []struct {
		name      string
		cgroups   bool
		unsampled bool // measured at its end alone: no sample can see the peak
		spec      string
		cpu       float64 // seconds burnt in all
		procs     int
		cpuFrom   []string
		wantPeak  float64 // MiB one child holds: the least the peak can be
	}{
		{name: "cgroup, one process", cgroups: true, spec: "mib=96,cpu=1", cpu: 1, procs: 1, cpuFrom: []string{"cgroup"}, wantPeak: mib},
		{name: "proc and rusage, one process", spec: "mib=96,cpu=1", cpu: 1, procs: 1, cpuFrom: []string{"rusage", "proc"}, wantPeak: mib},
		{name: "proc and rusage, a tree of three", spec: "mib=96,cpu=0.5,children=2", cpu: 1.5, procs: 3, cpuFrom: []string{"rusage", "proc"}, wantPeak: mib},
		{name: "rusage alone, a tree of three", unsampled: true, spec: "mib=96,cpu=0.5,children=2", cpu: 1.5, procs: 3, cpuFrom: []string{"rusage"}, wantPeak: mib},
		{name: "cgroup, a tree of three", cgroups: true, spec: "mib=96,cpu=0.5,children=2", cpu: 1.5, procs: 3, cpuFrom: []string{"cgroup"}, wantPeak: mib},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newProvider(t, process.Options{Command: []string{testBinary(t)}, Env: []string{"SKIFF_USAGE_CHILD=" + tc.spec}})
			if tc.cgroups {
				parent := process.CgroupParent(e.p)
				if parent == "" {
					t.Skip("no cgroup v2 hierarchy here")
				}
				if err := os.Mkdir(parent, 0o755); err != nil && !os.IsExist(err) {
					t.Skipf("this machine lets the provider make no cgroup v2 group (%v): run as root", err)
				}
			}
			if !tc.cgroups {
				process.WithoutCgroups(e.p)
			}
			if tc.unsampled {
				process.WithoutSamples(e.p)
			}
			id := launchAndWait(t, e.p, "tok-"+tc.name)
			u, ok := e.p.Usage(id)
			if !ok {
				t.Fatal("no usage for an ended runner")
			}
			t.Logf("CPU %.2f s from %s, peak %.1f MiB from %s, peak CPU %.0f%%", u.CPUSeconds, u.CPUFrom,
				float64(u.PeakMemoryBytes)/(1<<20), u.MemoryFrom, u.PeakCPUPercent)
			slack, least := 0.75*float64(tc.procs), tc.cpu
			if u.CPUFrom == "proc" {
				// A sandboxed runner without a cgroup is measured by samples
				// of its sandbox's processes: the last one may miss up to one
				// interval of CPU (docs/local.md).
				least -= process.SampleEvery.Seconds()
			}
			if u.CPUSeconds < least || u.CPUSeconds > tc.cpu+slack {
				t.Errorf("CPU %.2f s (from %s), want %.1f–%.1f", u.CPUSeconds, u.CPUFrom, least, tc.cpu+slack)
			}
			if !contains(tc.cpuFrom, u.CPUFrom) {
				t.Errorf("CPU from %q, want one of %v", u.CPUFrom, tc.cpuFrom)
			}
			// The children of a tree may hold their memory at the same
			// time (a sample or the cgroup then sees the sum), or not.
			peak, most := float64(u.PeakMemoryBytes)/(1<<20), float64(tc.procs)*(tc.wantPeak+64)
			if peak < tc.wantPeak || (peak > most && !testenv.RaceDetector) {
				t.Errorf("peak memory %.1f MiB (from %s), want %.0f–%.0f", peak, u.MemoryFrom, tc.wantPeak, most)
			}
			if u.Host.CPUs < 1 || u.Host.MemoryBytes == 0 || u.End.Before(u.Start) {
				t.Errorf("host %+v, life %v–%v", u.Host, u.Start, u.End)
			}

			// The record says so.
			checkUsageRecord(t, id, u, tc.cpu, slack, tc.wantPeak)
		})
	}
}

// launchAndWait launches one runner of pool cpu (token token) and waits for
// it to exit 0; it returns its id.
func launchAndWait(t *testing.T, p *process.Provider, token string) string {
	t.Helper()
	ctx := context.Background()
	pl, err := p.Plan(ctx, provider.Launch{Token: token, Spec: pool.Spec{Shared: pool.Shared{Pool: "cpu"}}, Runners: []provider.RunnerRequest{{Name: "r", JobID: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Launch(ctx, pl, []provider.Registration{{Mode: provider.ModeJIT, JITConfig: "CANARY", RunnerName: "r"}})
	if err != nil || res.Runners[0].Err != nil {
		t.Fatalf("launch: %v %v", err, res.Runners[0].Err)
	}
	id := res.Runners[0].Instance.ID
	wctx, cancel := testenv.AwaitContext(t)
	defer cancel()
	if code, err := p.Wait(wctx, id); err != nil || code != 0 {
		t.Fatalf("wait: exit %d, %v", code, err)
	}
	return id
}

// checkUsageRecord fails t unless the metrics record built from u, the
// usage of runner id, says it burnt cpu seconds (up to slack more) and
// held wantPeak MiB, and has the host.
func checkUsageRecord(t *testing.T, id string, u process.Usage, cpu, slack, wantPeak float64) {
	t.Helper()
	start := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	rec, err := metrics.Build(metrics.Inputs{
		Job: metrics.JobInput{ID: 1, RunID: 2, Repository: "acme/ml", WorkflowName: "Train", StartedAt: start, CompletedAt: start.Add(time.Minute)},
		Run: metrics.RunInput{ID: 2, Event: "push"}, Instance: metrics.InstanceInput{ID: id, Type: "local", Capacity: metrics.CapacityOnDemand},
		CloudProvider: "local", Peaks: u.Peaks(), Host: process.RecordHost(u.Host)})
	if err != nil {
		t.Fatal(err)
	}
	if rec.CPU == nil || rec.CPU.Seconds == nil || *rec.CPU.Seconds < cpu-0.01 || *rec.CPU.Seconds > cpu+slack {
		t.Errorf("record cpu %+v", rec.CPU)
	}
	if rec.Memory == nil || rec.Memory.PeakGiB == nil || *rec.Memory.PeakGiB*1024 < wantPeak-10 || rec.Memory.PeakPercent == nil {
		t.Errorf("record memory %+v", rec.Memory)
	}
	if contains(rec.MissingSources, metrics.SourceCPU) || contains(rec.MissingSources, metrics.SourceMemory) ||
		contains(rec.MissingSources, metrics.SourceAgent) {
		t.Errorf("missingSources %v names a source that had data", rec.MissingSources)
	}
	if rec.Host == nil || rec.Host.CPUs != u.Host.CPUs {
		t.Errorf("record host %+v", rec.Host)
	}
}

// testBinary is this test binary: with SKIFF_USAGE_CHILD set, a child of
// known behaviour (usageChild).
func testBinary(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

func contains(l []string, s string) bool {
	for _, v := range l {
		if v == s {
			return true
		}
	}
	return false
}
