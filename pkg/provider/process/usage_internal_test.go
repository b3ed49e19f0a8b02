package process

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/skiffci/skiff/internal/testenv"
)

// The output of NVIDIA's documented queries (nvidia-smi --query-gpu=...
// and --query-compute-apps=... with --format=csv,noheader,nounits): fields
// separated by ", ", memory in MiB, utilisation in percent, [N/A] where a
// value is not available.
const (
	smiGPUsOut = "0, GPU-5d8a1c3e-7b1f-4a5e-9c2d-0e1f2a3b4c5d, 87, 20345, 24564, NVIDIA GeForce RTX 4090\n" +
		"1, GPU-1a2b3c4d-0000-1111-2222-333344445555, [N/A], 3, 24564, NVIDIA GeForce RTX 4090\n"
)

func TestParseSMI(t *testing.T) {
	t.Parallel()
	gs := parseGPUs([]byte(smiGPUsOut + "garbage line\n\n"))
	if len(gs) != 2 || gs[0].Index != 0 || gs[0].UtilizationPercent != 87 || gs[0].MemoryTotalMiB != 24564 ||
		gs[0].Name != "NVIDIA GeForce RTX 4090" || gs[1].UtilizationPercent != 0 || gs[1].UUID == "" {
		t.Errorf("GPUs %+v", gs)
	}
	as := parseApps([]byte("4242, 6246, GPU-5d8a1c3e-7b1f-4a5e-9c2d-0e1f2a3b4c5d\n999999, [N/A], GPU-x\n"))
	if len(as) != 1 || as[0].PID != 4242 || as[0].UsedMiB != 6246 {
		t.Errorf("apps %+v (a process without a memory figure is skipped)", as)
	}
}

// holdChild starts the test binary as a child of known behaviour (see
// usageChild) in a process group of its own, and returns once every
// process of its tree said it is ready; closing stdin ends it.
func holdChild(t *testing.T, spec string, procs int, attr *syscall.SysProcAttr) (*exec.Cmd, func()) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := exec.Command(exe)
	c.Env = append(os.Environ(), "SKIFF_USAGE_CHILD="+spec)
	c.SysProcAttr = attr
	stdin, err := c.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(stdout)
	for range procs {
		if _, err := r.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	return c, func() { stdin.Close(); _ = c.Wait() }
}

// TestSampleProcessGroup samples a tree of three processes holding 32 MiB
// each at once: a sample sums the group's resident memory (which no
// single rusage can tell) and attributes the GPU memory nvidia-smi (a fake
// on PATH, answering in NVIDIA's format) reports for the runner's pid.
func TestSampleProcessGroup(t *testing.T) {
	c, done := holdChild(t, "mib=32,cpu=0.2,children=2,hold=1", 3, &syscall.SysProcAttr{Setpgid: true})
	defer done()
	dir := t.TempDir()
	fake := filepath.Join(dir, "nvidia-smi")
	script := "#!/bin/sh\ncase \"$1\" in\n--query-gpu=*) printf '%s' \"$GPUS\" ;;\n--query-compute-apps=*) printf '%s' \"$APPS\" ;;\n*) exit 2 ;;\nesac\n"
	testenv.WriteExecutable(t, fake, []byte(script))
	t.Setenv("GPUS", smiGPUsOut)
	t.Setenv("APPS", formatApps(c.Process.Pid))
	s := &sampler{smi: fake, every: time.Second, live: map[*tracker]struct{}{}, host: Host{CPUs: 2, MemoryBytes: 8 << 30}}
	tr := &tracker{pid: c.Process.Pid, u: Usage{Host: s.host}}
	s.live[tr] = struct{}{}
	pids := scanProcs().group(c.Process.Pid)
	if len(pids) != 3 {
		t.Fatalf("the group of %d has %d processes %v, want 3", c.Process.Pid, len(pids), pids)
	}
	s.sampleOnce(time.Now())
	u := tr.finish(time.Now(), nil, cgroupTotals{})
	// At most 64 MiB more each: the Go runtime's own pages (none under the
	// race detector, whose shadow memory the helpers' resident pages include).
	if peak := float64(u.PeakMemoryBytes) / (1 << 20); peak < 3*32 || (peak > 3*(32+64) && !testenv.RaceDetector) {
		t.Errorf("peak %.1f MiB, want the three together: 96–288", peak)
	}
	// The three burnt 0.6 s; /proc counts in 10 ms clock ticks that the
	// scheduler's tick samples, so it may read up to about a sixth less.
	if u.CPUSeconds < 0.5 || u.CPUSeconds > 0.6+3*0.75 || u.CPUFrom != "proc" {
		t.Errorf("CPU %.2f s from %s, want 0.5–2.85 from proc", u.CPUSeconds, u.CPUFrom)
	}
	if len(u.GPUs) != 1 || u.GPUs[0].PeakMemoryMiB != 6246 || u.GPUs[0].PeakUtilizationPercent != 87 || u.GPUs[0].Index != 0 ||
		u.GPUs[0].Model != "NVIDIA GeForce RTX 4090" || u.GPUs[0].MemoryTotalMiB != 24564 {
		t.Errorf("GPUs %+v, want GPU 0 with the runner's 6246 MiB", u.GPUs)
	}
	pk := u.Peaks()
	if len(pk.GPUs) != 1 || *pk.GPUs[0].MemoryUsedMiB != 6246 || pk.MemoryPeakGiB == nil || pk.CPUSeconds == nil {
		t.Errorf("peaks %+v", pk)
	}
}

func formatApps(pid int) string {
	return strconv.Itoa(pid) + ", 6246, GPU-5d8a1c3e-7b1f-4a5e-9c2d-0e1f2a3b4c5d\n999999, [N/A], GPU-1a2b3c4d-0000-1111-2222-333344445555\n"
}

// TestCgroupGroup starts a tree in a cgroup v2 group of its own, where
// this machine allows one: the group lists the tree, and its cpu.stat
// counts the tree's CPU time.
func TestCgroupGroup(t *testing.T) {
	parent := cgroupParent(t.TempDir())
	if parent == "" {
		t.Skip("no cgroup v2 hierarchy here")
	}
	if err := os.Mkdir(parent, 0o755); err != nil && !os.IsExist(err) {
		t.Skipf("no cgroup v2 group can be made here (%v): run as root", err)
	}
	defer removeCgroup(parent)
	dir, fd, ok := newCgroup(parent, "proc-1")
	if !ok {
		t.Fatal("could not make a runner's group")
	}
	defer removeCgroup(dir)
	attr := &syscall.SysProcAttr{Setpgid: true}
	startInCgroup(attr, fd)
	_, done := holdChild(t, "mib=8,cpu=0.3,children=1,hold=1", 2, attr)
	closeFD(fd)
	if pids := cgroupPids(dir); len(pids) != 2 {
		t.Errorf("the group holds %v, want the child and its child", pids)
	}
	done()
	cg := readCgroup(dir)
	if !cg.cpuOK || cg.cpuSeconds < 0.6 || cg.cpuSeconds > 0.6+1.5 {
		t.Errorf("cpu.stat: %+v, want 0.6–2.1 s", cg)
	}
}
