package process

import (
	"slices"
	"syscall"
	"testing"
	"time"
)

// TestReadCgroupFixture reads a runner's cgroup v2 files from a fixture
// directory in the kernel's formats (Documentation/admin-guide/cgroup-v2:
// cpu.stat's usage_usec, memory.peak in bytes, cgroup.procs one pid a
// line), for machines where no group can be made: the CPU time, the peak
// memory and the group's processes; a group without the memory controller
// has no memory.peak, and its peak is not made up.
func TestReadCgroupFixture(t *testing.T) {
	t.Parallel()
	full := readCgroup("testdata/cgroup/runner-full")
	if !full.cpuOK || full.cpuSeconds != 1.523 || !full.peakOK || full.peakBytes != 256<<20 {
		t.Errorf("runner-full: %+v, want 1.523 CPU-seconds and a 256 MiB peak", full)
	}
	if pids := cgroupPids("testdata/cgroup/runner-full"); !slices.Equal(pids, []int{4242, 4243}) {
		t.Errorf("cgroup.procs: %v", pids)
	}
	// A process outside the reader's pid namespace is listed as 0 (seen
	// under WSL2, systemd's cg_read_pid): no pid to read or signal, and
	// kill(0) would signal skiff's own process group.
	if pids := cgroupPids("testdata/cgroup/runner-foreign"); !slices.Equal(pids, []int{4242}) {
		t.Errorf("cgroup.procs with processes of other pid namespaces: %v, want only 4242", pids)
	}
	nomem := readCgroup("testdata/cgroup/runner-nomem")
	if !nomem.cpuOK || nomem.cpuSeconds != 0.25 || nomem.peakOK {
		t.Errorf("runner-nomem: %+v, want 0.25 CPU-seconds and no peak", nomem)
	}
	if gone := readCgroup("testdata/cgroup/no-such-group"); gone.cpuOK || gone.peakOK {
		t.Errorf("a missing group: %+v", gone)
	}

	// The group's totals complete the samples at the runner's end: its
	// peak beats the sampled one (which misses what lived between two
	// samples), and both sources say so.
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	tr := &tracker{cgroup: "testdata/cgroup/runner-full", u: Usage{Start: start, Host: Host{CPUs: 2, MemoryBytes: 4 << 30}}}
	tr.observe(start.Add(time.Second), 0.5, 64<<20)
	u := tr.finish(start.Add(3*time.Second), &syscall.Rusage{Maxrss: 32 << 10}, full)
	if u.PeakMemoryBytes != 256<<20 || u.MemoryFrom != "cgroup" || u.CPUSeconds != 1.523 || u.CPUFrom != "cgroup" {
		t.Errorf("usage %+v, want the group's 256 MiB and 1.523 s", u)
	}
	if pk := u.Peaks(); pk.MemoryPeakGiB == nil || *pk.MemoryPeakGiB != 0.25 || pk.MemoryPeak == nil || *pk.MemoryPeak != 6.25 {
		t.Errorf("peaks %+v: want 0.25 GiB, 6.25 %% of the host", pk)
	}
	// Without the memory controller the samples' peak stands.
	tr = &tracker{cgroup: "testdata/cgroup/runner-nomem", u: Usage{Start: start, Host: Host{CPUs: 2}}}
	tr.observe(start.Add(time.Second), 0.1, 64<<20)
	if u := tr.finish(start.Add(2*time.Second), nil, nomem); u.PeakMemoryBytes != 64<<20 || u.MemoryFrom != "proc" || u.CPUFrom != "cgroup" {
		t.Errorf("usage %+v, want the sampled 64 MiB (proc) and the group's CPU time", u)
	}
}
