package process

import (
	"bufio"
	"bytes"
	"context"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/skiffci/skiff/pkg/metrics"
	"github.com/skiffci/skiff/pkg/provider"
)

// SampleEvery is how often the provider samples its runners' processes
// (and the GPUs through nvidia-smi): once a second, the resolution of
// CloudWatch's agent on EC2 is 10 s, and a scan of /proc for a few
// hundred processes costs a few milliseconds.
const SampleEvery = time.Second

// Usage is what one runner's processes used over its life: its process
// tree's CPU time and peak memory, and what it used of each GPU.
type Usage struct {
	// Start and End bound the runner's process's life.
	Start, End time.Time
	// CPUSeconds is the tree's CPU time, user and system.
	CPUSeconds float64
	// PeakCPUPercent is the highest CPU use over one sampling interval,
	// percent of all the host's CPUs (0 when no interval was sampled).
	PeakCPUPercent float64
	// PeakMemoryBytes is the tree's highest resident memory.
	PeakMemoryBytes uint64
	// GPUs are the GPUs the runner's processes used (nvidia-smi).
	GPUs []GPUUsage
	// CPUFrom and MemoryFrom name the sources: "cgroup" (the runner's
	// cgroup v2 group: cpu.stat, memory.peak), "proc" (sampling /proc for
	// the runner's process group) or "rusage" (the runner's own and its
	// waited-for children's, at its exit).
	CPUFrom, MemoryFrom string
	// Host is the machine the runner ran on.
	Host Host
}

// GPUUsage is what a runner used of one GPU, from nvidia-smi's samples.
type GPUUsage struct {
	Index int
	UUID  string
	Model string
	// PeakUtilizationPercent is the GPU's highest utilisation while the
	// runner used it (the GPU's, not the runner's share of it).
	PeakUtilizationPercent float64
	// PeakMemoryMiB is the most memory the runner's processes held on it.
	PeakMemoryMiB  float64
	MemoryTotalMiB float64
}

// Host describes a machine: what a local record says it ran on.
type Host struct {
	CPUModel    string
	CPUs        int
	MemoryBytes uint64
	GPUModel    string
	GPUs        int
}

// Peaks turns the usage into a metrics record's peaks: CPU and memory as
// percent of the host, the absolute peaks too, and each GPU used.
func (u Usage) Peaks() *metrics.Peaks {
	p := &metrics.Peaks{CPUSeconds: ptr(u.CPUSeconds)}
	if u.Host.CPUs > 0 {
		if wall := u.End.Sub(u.Start).Seconds(); wall > 0 {
			p.CPUMean = ptr(u.CPUSeconds / wall / float64(u.Host.CPUs) * 100)
		}
		if u.PeakCPUPercent > 0 {
			p.CPUPeak = ptr(u.PeakCPUPercent)
		}
		// The peak over an interval is at least the mean over the life.
		if p.CPUMean != nil && (p.CPUPeak == nil || *p.CPUPeak < *p.CPUMean) {
			p.CPUPeak = ptr(*p.CPUMean)
		}
	}
	if u.PeakMemoryBytes > 0 {
		p.MemoryPeakGiB = ptr(float64(u.PeakMemoryBytes) / (1 << 30))
		if u.Host.MemoryBytes > 0 {
			p.MemoryPeak = ptr(float64(u.PeakMemoryBytes) / float64(u.Host.MemoryBytes) * 100)
		}
	}
	for _, g := range u.GPUs {
		gp := metrics.GPUPeak{Index: g.Index, Model: g.Model, Utilization: ptr(g.PeakUtilizationPercent), MemoryUsedMiB: ptr(g.PeakMemoryMiB)}
		if g.MemoryTotalMiB > 0 {
			gp.MemoryTotalMiB = ptr(g.MemoryTotalMiB)
		}
		p.GPUs = append(p.GPUs, gp)
	}
	return p
}

func ptr(v float64) *float64 { return &v }

// RecordHost is the host as a metrics record describes it.
func RecordHost(h Host) *metrics.Host {
	out := &metrics.Host{CPUModel: h.CPUModel, CPUs: h.CPUs, GPUModel: h.GPUModel, GPUs: &h.GPUs}
	if h.MemoryBytes > 0 {
		out.MemoryGiB = ptr(math.Round(float64(h.MemoryBytes)/(1<<30)*100) / 100)
	}
	return out
}

// startMeasured starts a runner's command in a cgroup v2 group of its own
// where the provider can make one (its path is returned), else as is. A
// start into a group that the kernel refuses (no clone3, no permission) is
// retried without one, as a new command (a Cmd starts once).
func (p *Provider) startMeasured(cmd *exec.Cmd, id string) (started *exec.Cmd, cgroup string, err error) {
	dir, fd, ok := newCgroup(p.usage.cgroup, id)
	if !ok {
		return cmd, "", cmd.Start()
	}
	plain := *cmd.SysProcAttr
	startInCgroup(cmd.SysProcAttr, fd)
	err = cmd.Start()
	closeFD(fd)
	if err == nil {
		return cmd, dir, nil
	}
	removeCgroup(dir)
	retry := exec.Command(cmd.Path)
	retry.Args, retry.Dir, retry.Env, retry.Stdout, retry.Stderr, retry.SysProcAttr = cmd.Args, cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr, &plain
	retry.ExtraFiles = cmd.ExtraFiles
	return retry, "", retry.Start()
}

// measured ends a runner's measurement once its process has exited: its
// rusage (with its waited-for children) and its cgroup's totals complete
// the samples. It runs before reap, so a runner listed as terminated has
// its usage.
func (p *Provider) measured(pr *proc, state *os.ProcessState) {
	if pr.use == nil {
		return
	}
	var ru *syscall.Rusage
	if state != nil {
		ru, _ = state.SysUsage().(*syscall.Rusage)
	}
	sample := true
	if pr.group != pr.pid && p.adopts {
		// bwrap's monitor exits with its command, orphaning the sandbox's
		// init, which this process adopted: the init's rusage holds the
		// whole tree it reaped, where the monitor's holds nothing of it.
		// A last sample first, should the init not end in time.
		p.usage.sample(pr.use, time.Now())
		signalGroup(pr.pid, pr.group, pr.groupID, syscall.SIGKILL)
		if initRU, ok := waitOrphan(pr.group, p.o.KillGrace); ok {
			ru, sample = addRusage(ru, initRU), false
		}
	}
	u := p.usage.end(pr.use, ru, time.Now(), sample)
	p.mu.Lock()
	pr.used = &u
	p.mu.Unlock()
}

// addRusage is what a and b used together: their CPU times summed, the
// larger of their largest resident sets.
func addRusage(a, b *syscall.Rusage) *syscall.Rusage {
	if a == nil {
		return b
	}
	sum := *a
	sum.Utime = syscall.NsecToTimeval(a.Utime.Nano() + b.Utime.Nano())
	sum.Stime = syscall.NsecToTimeval(a.Stime.Nano() + b.Stime.Nano())
	sum.Maxrss = max(a.Maxrss, b.Maxrss)
	return &sum
}

// Usage returns what a runner used, once it has ended: its process tree's
// CPU time and peak memory, and the GPUs it used. ok is false while it
// runs, for an unknown or no longer listed id, and for a runner an earlier
// provider started (adopted after a restart: not measured).
func (p *Provider) Usage(id string) (Usage, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pr := p.procs[id]
	if pr == nil || pr.used == nil || pr.inst.State != provider.Terminated {
		return Usage{}, false
	}
	u := *pr.used
	u.GPUs = append([]GPUUsage(nil), u.GPUs...)
	return u, true
}

// Peaks is what an ended runner used, as a metrics record's peaks
// (writer.UsageSource).
func (p *Provider) Peaks(id string) (*metrics.Peaks, bool) {
	u, ok := p.Usage(id)
	if !ok {
		return nil, false
	}
	return u.Peaks(), true
}

// Host describes the machine the runners run on.
func (p *Provider) Host() Host { return p.usage.host }

// tracker accumulates one runner's usage from the samples and, at its
// exit, from its cgroup and its rusage.
type tracker struct {
	pid    int
	cgroup string // its cgroup v2 directory, or ""

	mu       sync.Mutex
	u        Usage
	lastCPU  float64 // the tree's CPU seconds at lastAt
	lastAt   time.Time
	gpus     map[string]*GPUUsage
	finished bool
}

// observe takes one sample of the runner's tree: its CPU seconds so far
// and its resident memory now.
func (t *tracker) observe(at time.Time, cpuSeconds float64, memBytes uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.finished {
		return
	}
	if !t.lastAt.IsZero() && at.After(t.lastAt) && t.u.Host.CPUs > 0 {
		pct := (cpuSeconds - t.lastCPU) / at.Sub(t.lastAt).Seconds() / float64(t.u.Host.CPUs) * 100
		t.u.PeakCPUPercent = max(t.u.PeakCPUPercent, min(pct, 100))
	}
	t.lastCPU, t.lastAt = cpuSeconds, at
	t.u.CPUSeconds = max(t.u.CPUSeconds, cpuSeconds)
	t.u.PeakMemoryBytes = max(t.u.PeakMemoryBytes, memBytes)
}

// observeGPU takes one sample of a GPU the runner's processes hold memory on.
func (t *tracker) observeGPU(g gpuSample, usedMiB float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.finished {
		return
	}
	if t.gpus == nil {
		t.gpus = map[string]*GPUUsage{}
	}
	u := t.gpus[g.UUID]
	if u == nil {
		u = &GPUUsage{Index: g.Index, UUID: g.UUID, Model: g.Name, MemoryTotalMiB: g.MemoryTotalMiB}
		t.gpus[g.UUID] = u
	}
	u.PeakUtilizationPercent = max(u.PeakUtilizationPercent, g.UtilizationPercent)
	u.PeakMemoryMiB = max(u.PeakMemoryMiB, usedMiB)
}

// finish ends the tracker when the runner has exited, with its rusage (its
// own and its waited-for children's CPU time, and the largest resident set
// of any one of them) and its cgroup's totals, and returns the usage.
func (t *tracker) finish(at time.Time, ru *syscall.Rusage, cg cgroupTotals) Usage {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.finished {
		return t.usageLocked()
	}
	t.finished = true
	t.u.End = at
	if t.u.CPUFrom == "" && t.u.CPUSeconds > 0 {
		t.u.CPUFrom = "proc"
	}
	if t.u.MemoryFrom == "" && t.u.PeakMemoryBytes > 0 {
		t.u.MemoryFrom = "proc"
	}
	if ru != nil {
		cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
		if cpu > t.u.CPUSeconds {
			t.u.CPUSeconds, t.u.CPUFrom = cpu, "rusage"
		}
		if maxRSS := uint64(ru.Maxrss) * 1024; maxRSS > t.u.PeakMemoryBytes { // Linux: KiB
			t.u.PeakMemoryBytes, t.u.MemoryFrom = maxRSS, "rusage"
		}
	}
	if cg.cpuOK {
		t.u.CPUSeconds, t.u.CPUFrom = max(t.u.CPUSeconds, cg.cpuSeconds), "cgroup"
	}
	if cg.peakOK {
		t.u.PeakMemoryBytes, t.u.MemoryFrom = max(t.u.PeakMemoryBytes, cg.peakBytes), "cgroup"
	}
	return t.usageLocked()
}

func (t *tracker) usageLocked() Usage {
	u := t.u
	u.GPUs = nil
	for _, g := range t.gpus {
		u.GPUs = append(u.GPUs, *g)
	}
	slicesSortGPUs(u.GPUs)
	return u
}

func slicesSortGPUs(gs []GPUUsage) {
	for i := 1; i < len(gs); i++ {
		for j := i; j > 0 && gs[j].Index < gs[j-1].Index; j-- {
			gs[j], gs[j-1] = gs[j-1], gs[j]
		}
	}
}

// cgroupTotals is what a runner's cgroup says at its end.
type cgroupTotals struct {
	cpuSeconds float64
	cpuOK      bool
	peakBytes  uint64
	peakOK     bool
}

// sampler samples every live runner once per SampleEvery: one scan of
// /proc for all of them, and one pair of nvidia-smi queries when the host
// has it.
type sampler struct {
	host   Host
	smi    string // nvidia-smi's path, or ""
	cgroup string // the directory runner groups are made in, or ""
	every  time.Duration

	mu      sync.Mutex
	live    map[*tracker]struct{}
	stale   []string // ended runners' groups that still held processes
	running bool
	stop    chan struct{}
	stopped chan struct{}
}

// newSampler looks for nvidia-smi (on this process's PATH), describes the
// host and finds where it can make cgroup v2 groups for runners.
func newSampler(dataDir string) *sampler {
	s := &sampler{every: SampleEvery, live: map[*tracker]struct{}{}}
	if p, err := exec.LookPath("nvidia-smi"); err == nil {
		s.smi = p
	}
	s.host = describeHost(s.smi)
	s.cgroup = cgroupParent(dataDir)
	return s
}

// watch starts tracking a runner's process (and its cgroup, if it has one).
func (s *sampler) watch(pid int, cgroup string, start time.Time) *tracker {
	t := &tracker{pid: pid, cgroup: cgroup, u: Usage{Start: start, Host: s.host}}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.live[t] = struct{}{}
	if !s.running {
		s.running, s.stop, s.stopped = true, make(chan struct{}), make(chan struct{})
		go s.loop(s.stop, s.stopped)
	}
	return t
}

// sample takes one last sample of a runner's process group (without a
// cgroup): a sandbox's init, while it is there, holds what its reaped
// children used.
func (s *sampler) sample(t *tracker, at time.Time) {
	if t.cgroup == "" {
		procs := scanProcs()
		cpu, mem := procs.tree(procs.group(t.pid))
		t.observe(at, cpu, mem)
	}
}

// end finishes a runner's tracker once its process has exited, and removes
// its cgroup. With sample, it samples the runner's process group once more
// first (its pid must not be reused yet: false once its init was reaped).
func (s *sampler) end(t *tracker, state *syscall.Rusage, at time.Time, sample bool) Usage {
	s.mu.Lock()
	delete(s.live, t)
	s.mu.Unlock()
	var cg cgroupTotals
	if t.cgroup != "" {
		cg = readCgroup(t.cgroup)
	} else if sample {
		s.sample(t, at)
	}
	u := t.finish(at, state, cg)
	if t.cgroup != "" && !removeCgroup(t.cgroup) {
		s.mu.Lock()
		s.stale = append(s.stale, t.cgroup)
		s.mu.Unlock()
	}
	return u
}

// close stops the sampling loop and removes the runners' parent group
// (once empty: a runner left running keeps it).
func (s *sampler) close() {
	s.mu.Lock()
	running, stop, stopped := s.running, s.stop, s.stopped
	s.running = false
	s.mu.Unlock()
	if running {
		close(stop)
		<-stopped
	}
	s.removeStale()
	if s.cgroup != "" {
		removeCgroup(s.cgroup)
	}
}

// forget removes the group of a runner the sampler did not start (one an
// earlier provider started, adopted after a restart), once it has ended.
func (s *sampler) forget(id string) {
	if s.cgroup == "" {
		return
	}
	if dir := filepath.Join(s.cgroup, id); !removeCgroup(dir) {
		s.mu.Lock()
		s.stale = append(s.stale, dir)
		s.mu.Unlock()
	}
}

// removeStale tries again to remove the groups that still held processes.
func (s *sampler) removeStale() {
	s.mu.Lock()
	stale := s.stale
	s.stale = nil
	s.mu.Unlock()
	var keep []string
	for _, dir := range stale {
		if !removeCgroup(dir) {
			keep = append(keep, dir)
		}
	}
	s.mu.Lock()
	s.stale = append(s.stale, keep...)
	s.mu.Unlock()
}

func (s *sampler) loop(stop, stopped chan struct{}) {
	defer close(stopped)
	tick := time.NewTicker(s.every)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			s.sampleOnce(time.Now())
		}
	}
}

// sampleOnce samples every live runner (and removes the groups of ended
// ones that could not be removed at their end).
func (s *sampler) sampleOnce(at time.Time) {
	s.removeStale()
	s.mu.Lock()
	ts := make([]*tracker, 0, len(s.live))
	for t := range s.live {
		ts = append(ts, t)
	}
	s.mu.Unlock()
	if len(ts) == 0 {
		return
	}
	procs := scanProcs()
	pidsOf := map[*tracker][]int{}
	for _, t := range ts {
		var pids []int
		if t.cgroup != "" {
			pids = cgroupPids(t.cgroup)
		} else {
			pids = procs.group(t.pid)
		}
		pidsOf[t] = pids
		cpu, mem := procs.tree(pids)
		if t.cgroup != "" {
			if cg := readCgroup(t.cgroup); cg.cpuOK {
				cpu = max(cpu, cg.cpuSeconds)
			}
		}
		t.observe(at, cpu, mem)
	}
	if s.smi == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.every)
	defer cancel()
	gpus, apps, err := querySMI(ctx, s.smi)
	if err != nil {
		return // a GPU sample missed; the next one may work
	}
	byUUID := map[string]gpuSample{}
	for _, g := range gpus {
		byUUID[g.UUID] = g
	}
	for _, t := range ts {
		used := map[string]float64{}
		for _, pid := range pidsOf[t] {
			for _, a := range apps {
				if a.PID == pid {
					used[a.GPUUUID] += a.UsedMiB
				}
			}
		}
		for uuid, mib := range used {
			if g, ok := byUUID[uuid]; ok {
				t.observeGPU(g, mib)
			}
		}
	}
}

// The queries the sampler runs: nvidia-smi's --query-gpu and
// --query-compute-apps with CSV output, no header, no units (memory in
// MiB, utilisation in percent). index and uuid tie a process's memory to
// its GPU.
var (
	smiGPUArgs  = []string{"--query-gpu=index,uuid,utilization.gpu,memory.used,memory.total,name", "--format=csv,noheader,nounits"}
	smiAppsArgs = []string{"--query-compute-apps=pid,used_memory,gpu_uuid", "--format=csv,noheader,nounits"}
)

// gpuSample is one line of the --query-gpu answer.
type gpuSample struct {
	Index              int
	UUID               string
	UtilizationPercent float64
	MemoryUsedMiB      float64
	MemoryTotalMiB     float64
	Name               string
}

// appSample is one line of the --query-compute-apps answer.
type appSample struct {
	PID     int
	UsedMiB float64
	GPUUUID string
}

func querySMI(ctx context.Context, smi string) ([]gpuSample, []appSample, error) {
	out, err := exec.CommandContext(ctx, smi, smiGPUArgs...).Output()
	if err != nil {
		return nil, nil, err
	}
	gpus := parseGPUs(out)
	out, err = exec.CommandContext(ctx, smi, smiAppsArgs...).Output()
	if err != nil {
		return gpus, nil, err
	}
	return gpus, parseApps(out), nil
}

// csvFields splits nvidia-smi's CSV lines ("a, b, c"); a field reading
// [N/A] or [Not Supported] is empty.
func csvFields(out []byte, n int) [][]string {
	var rows [][]string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		f := strings.SplitN(line, ",", n)
		if len(f) != n {
			continue
		}
		for i := range f {
			f[i] = strings.TrimSpace(f[i])
			if strings.HasPrefix(f[i], "[") {
				f[i] = ""
			}
		}
		rows = append(rows, f)
	}
	return rows
}

// parseGPUs reads the --query-gpu answer; lines it cannot read are skipped.
func parseGPUs(out []byte) []gpuSample {
	var gs []gpuSample
	for _, f := range csvFields(out, 6) {
		idx, err := strconv.Atoi(f[0])
		if err != nil || f[1] == "" {
			continue
		}
		util, _ := strconv.ParseFloat(f[2], 64)
		used, _ := strconv.ParseFloat(f[3], 64)
		total, _ := strconv.ParseFloat(f[4], 64)
		gs = append(gs, gpuSample{Index: idx, UUID: f[1], UtilizationPercent: util, MemoryUsedMiB: used, MemoryTotalMiB: total, Name: f[5]})
	}
	return gs
}

// parseApps reads the --query-compute-apps answer.
func parseApps(out []byte) []appSample {
	var as []appSample
	for _, f := range csvFields(out, 3) {
		pid, err := strconv.Atoi(f[0])
		if err != nil {
			continue
		}
		used, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			continue
		}
		as = append(as, appSample{PID: pid, UsedMiB: used, GPUUUID: f[2]})
	}
	return as
}

// hostGPUs counts the host's GPUs and names their model (the first's).
func hostGPUs(smi string) (model string, n int) {
	if smi == "" {
		return "", 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, smi, smiGPUArgs...).Output()
	if err != nil {
		return "", 0
	}
	gs := parseGPUs(out)
	if len(gs) == 0 {
		return "", 0
	}
	return gs[0].Name, len(gs)
}

// numCPU is the host's CPU count as Go sees it (the CPUs this process may
// run on).
func numCPU() int { return runtime.NumCPU() }
