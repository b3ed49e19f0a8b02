//go:build linux

package process

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times: 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// procInfo is what one /proc/<pid>/stat says.
type procInfo struct {
	pgrp     int
	cpuTicks uint64 // utime + stime + cutime + cstime
	rssPages uint64
}

// procTable is one scan of /proc.
type procTable map[int]procInfo

// scanProcs reads every process's stat file; processes that exit during
// the scan are skipped.
func scanProcs() procTable {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return procTable{}
	}
	t := make(procTable, len(ents))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pi, ok := readStat(pid); ok {
			t[pid] = pi
		}
	}
	return t
}

// readStat reads /proc/<pid>/stat: the fields after the command's last
// ')' (it may hold spaces) are proc(5)'s 3rd on; pgrp is the 5th, utime,
// stime, cutime, cstime the 14th to 17th, rss the 24th.
func readStat(pid int) (procInfo, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procInfo{}, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procInfo{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 22 {
		return procInfo{}, false
	}
	num := func(k int) uint64 { v, _ := strconv.ParseUint(f[k], 10, 64); return v }
	pgrp, _ := strconv.Atoi(f[2])
	return procInfo{pgrp: pgrp, cpuTicks: num(11) + num(12) + num(13) + num(14), rssPages: num(21)}, true
}

// ProcessCPU is process pid's CPU time so far (user and system, its own
// and its reaped children's), read from /proc/<pid>/stat.
func ProcessCPU(pid int) (time.Duration, bool) {
	pi, ok := readStat(pid)
	if !ok {
		return 0, false
	}
	return time.Duration(pi.cpuTicks) * time.Second / clockTicks, true
}

// group lists the processes of the process group led by pgid (a runner's
// group: the provider starts each runner as a group leader).
func (t procTable) group(pgid int) []int {
	var pids []int
	for pid, pi := range t {
		if pi.pgrp == pgid {
			pids = append(pids, pid)
		}
	}
	return pids
}

// tree sums the processes' CPU time (their own and their reaped
// children's) and their resident memory now, or the largest peak resident
// set of any one of them (VmHWM) if that is larger.
func (t procTable) tree(pids []int) (cpuSeconds float64, memBytes uint64) {
	page := uint64(os.Getpagesize())
	var ticks, rss, hwm uint64
	for _, pid := range pids {
		pi, ok := t[pid]
		if !ok {
			if pi, ok = readStat(pid); !ok {
				continue
			}
		}
		ticks += pi.cpuTicks
		rss += pi.rssPages * page
		hwm = max(hwm, peakRSS(pid))
	}
	return float64(ticks) / clockTicks, max(rss, hwm)
}

// peakRSS reads a process's VmHWM (its peak resident set) in bytes.
func peakRSS(pid int) uint64 {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// cgroupParent is where runner groups are made: a directory under this
// process's own cgroup v2 group, named for the data directory (so two
// providers on one machine never share one), made at the first runner's
// start (newCgroup). "" when there is no cgroup v2 hierarchy: the runners
// are then measured through /proc alone, as they are when the directory
// cannot be made (no permission).
func cgroupParent(dataDir string) string {
	mount := cgroup2Mount()
	if mount == "" {
		return ""
	}
	own := ""
	if b, err := os.ReadFile("/proc/self/cgroup"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "0::"); ok {
				own = rest
			}
		}
	}
	abs, _ := filepath.Abs(dataDir)
	sum := sha256.Sum256([]byte(abs))
	dir := filepath.Join(mount, own, "skiff-runners-"+hex.EncodeToString(sum[:4]))
	// Groups an earlier provider on this data directory left (its adopted
	// runners' groups, once they ended): rmdir removes only empty ones.
	if ents, err := os.ReadDir(dir); err == nil {
		for _, e := range ents {
			if e.IsDir() {
				_ = os.Remove(filepath.Join(dir, e.Name()))
			}
		}
	}
	return dir
}

// cgroup2Mount is where the cgroup v2 hierarchy is mounted, or "".
func cgroup2Mount() string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		// id parent major:minor root mountpoint options... - fstype source ...
		pre, post, ok := strings.Cut(line, " - ")
		if !ok || !strings.HasPrefix(post, "cgroup2 ") {
			continue
		}
		if f := strings.Fields(pre); len(f) >= 5 {
			return f[4]
		}
	}
	return ""
}

// newCgroup makes a runner's group and opens it for the runner's start
// (clone3 puts the child in it before it runs). ok is false when it
// cannot: the runner then runs without one.
func newCgroup(parent, id string) (dir string, fd int, ok bool) {
	if parent == "" {
		return "", -1, false
	}
	switch err := os.Mkdir(parent, 0o755); {
	case err == nil:
		// Memory accounting per runner needs the memory controller in the
		// groups below; the kernel allows it only where it is delegated (a
		// group whose parent enables it). Without it, memory comes from
		// /proc and rusage, and cpu.stat still counts CPU.
		_ = os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+memory"), 0o644)
	case !os.IsExist(err):
		return "", -1, false
	}
	dir = filepath.Join(parent, id)
	if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
		return "", -1, false
	}
	fd, err := syscall.Open(dir, syscall.O_DIRECTORY|syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		_ = os.Remove(dir)
		return "", -1, false
	}
	return dir, fd, true
}

// startInCgroup asks for the runner to start in the group open at fd.
func startInCgroup(attr *syscall.SysProcAttr, fd int) {
	attr.UseCgroupFD, attr.CgroupFD = true, fd
}

func closeFD(fd int) { _ = syscall.Close(fd) }

// cgroupPids lists the processes in a group.
func cgroupPids(dir string) []int {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var pids []int
	for _, l := range strings.Fields(string(b)) {
		// A process outside this pid namespace is listed as 0, and init
		// (1) is no runner's: neither is read or signalled (kill(0) would
		// signal the daemon's own process group).
		if pid, err := strconv.Atoi(l); err == nil && pid > 1 {
			pids = append(pids, pid)
		}
	}
	return pids
}

// readCgroup reads a group's CPU time (cpu.stat usage_usec, always there
// in cgroup v2) and, with the memory controller, its peak memory
// (memory.peak, Linux 5.19 and later).
func readCgroup(dir string) cgroupTotals {
	var cg cgroupTotals
	if b, err := os.ReadFile(filepath.Join(dir, "cpu.stat")); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "usage_usec "); ok {
				if us, err := strconv.ParseUint(strings.TrimSpace(rest), 10, 64); err == nil {
					cg.cpuSeconds, cg.cpuOK = float64(us)/1e6, true
				}
			}
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "memory.peak")); err == nil {
		if v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil {
			cg.peakBytes, cg.peakOK = v, true
		}
	}
	return cg
}

// removeCgroup removes a group, and reports whether it is gone. A group
// that still holds processes (the job's leftovers, killed as the runner
// ends, take a moment to die) is signalled and stays for a later try.
func removeCgroup(dir string) bool {
	err := os.Remove(dir)
	if err == nil || os.IsNotExist(err) {
		return true
	}
	for _, pid := range cgroupPids(dir) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	return false
}

// describeHost reads the host's CPU model (/proc/cpuinfo), memory
// (/proc/meminfo) and GPUs (nvidia-smi).
func describeHost(smi string) Host {
	h := Host{CPUs: numCPU()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if ok && strings.TrimSpace(k) == "model name" {
				h.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
				h.MemoryBytes = kb * 1024
			}
		}
	}
	h.GPUModel, h.GPUs = hostGPUs(smi)
	return h
}

// adoptOrphans makes this process the reaper of its orphaned descendants
// (PR_SET_CHILD_SUBREAPER): bwrap's monitor exits as soon as its command
// does, orphaning the sandbox's init, which by then has reaped the
// runner's whole tree. As this process's child the init can be waited for,
// and its rusage is what the runner used. It reports whether it could.
func adoptOrphans() bool {
	return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == nil
}

// waitOrphan reaps pid, a descendant this process adopted, and returns
// its rusage (with that of every child it reaped). ok is false when pid is
// not this process's child, or did not end within grace: a goroutine then
// reaps it whenever it ends.
func waitOrphan(pid int, grace time.Duration) (ru *syscall.Rusage, ok bool) {
	type waited struct {
		ru  syscall.Rusage
		err error
	}
	done := make(chan waited, 1)
	go func() {
		var w waited
		var ws syscall.WaitStatus
		for {
			_, w.err = syscall.Wait4(pid, &ws, 0, &w.ru)
			if w.err != syscall.EINTR {
				break
			}
		}
		done <- w
	}()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case w := <-done:
		return &w.ru, w.err == nil
	case <-t.C:
		return nil, false
	}
}
