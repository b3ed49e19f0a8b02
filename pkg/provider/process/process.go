// Package process is the compute provider of `skiff local`: each runner is
// one operating-system process on this machine — a local install of the
// GitHub Actions runner (run.sh) or the stand-in (cmd/skiff-standin) — in a
// fresh work directory with a clean environment, for exactly one job, in
// a bubblewrap sandbox of its own unless its pool opted out
// (process.sandbox: none; see sandbox.go): without skiff's data directory,
// the other runners' directories and processes or the home directories,
// with its own /tmp and pid namespace, on a read-only system. A machine
// where bwrap cannot make a sandbox (SandboxError) launches only the
// pools that opted out.
//
// A runner process's life:
//
//	Launch ──► running ──(exits: its job done, a crash)───────────────────────► terminated
//	              │                                                          ▲  (directory removed,
//	              └──(Terminate, or the pool's lifetime cap)──► stopping ────┘   leftovers killed)
//	                   SIGTERM to its process group, SIGKILL after KillGrace
//
// The registration reaches the runner the way the boot script hands it to
// run.sh: in the environment variable ACTIONS_RUNNER_INPUT_JITCONFIG, never
// on a command line, never on disk, never in a log; in a sandbox, no other
// runner can read that environment (its /proc is not there). The environment holds
// nothing else of skiff's: PATH, HOME (the work directory), TMPDIR (inside
// it), SKIFF_INSTANCE_ID, the JIT configuration and the operator's extras.
//
// A pool may run at most its limit of processes at once (one GPU job per GPU,
// say); a launch beyond it is a retryable provider.ErrCapacity for each
// runner that does not fit, never a wait. Instances are named proc-<n>, n
// counting up across restarts (the counter lives in the data directory).
// Replaying a plan returns the first launch's instances.
//
// Close ends every runner. A provider that ends without Close (kill -9, a
// crash) leaves its runners running: their jobs go on. Each runner has a
// record in the data directory (its instance, plan token, pid and process
// identity), and the next provider on the same directory adopts every
// runner whose process still runs — verified by pid, boot and start time,
// so a recycled pid is never taken for a runner — as if it had started it:
// listed as running, counted in its pool's limit, stopped at the end of its
// lifetime, reaped when it exits, and found again by a replay of its token.
// Runners that ended meanwhile are listed as terminated for Retain and
// cleaned up. Adopting rather than killing keeps the promise that no busy
// runner is killed, and is why runners do not get a parent-death signal.
// Telling a pid's process apart needs Linux's /proc; elsewhere an earlier
// provider's runners are left alone, with a warning.
//
// Only Unix-like systems: process groups and signals.
package process

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/skiffci/skiff/internal/privatefile"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/runnerversion"
)

// EnvJITConfig is the variable the runner reads its JIT configuration from
// (run.sh's --jitconfig input; the boot script sets the same).
const EnvJITConfig = "ACTIONS_RUNNER_INPUT_JITCONFIG"

// Defaults of Options.
const (
	// DefaultKillGrace is how long a runner has between SIGTERM and SIGKILL:
	// the runner cancels its job and reports it within a few seconds.
	DefaultKillGrace = 10 * time.Second
	// DefaultRetain is how long an ended runner stays in List: long enough
	// for the reconciler's next passes to see how it ended.
	DefaultRetain = provider.DefaultRetain
)

// Options configures a Provider.
type Options struct {
	// Command is the runner's command and arguments, e.g.
	// ["/opt/actions-runner/run.sh"] or ["skiff-standin"]; a bare name is
	// looked up in PATH. Required.
	Command []string
	// DataDir holds the runners' work directories (DataDir/runners/<id>),
	// their records (DataDir/procs/<id>.json) and the id counter. One
	// provider per data directory at a time. Required.
	DataDir string
	// Env are extra KEY=VALUE entries for every runner (say
	// RUNNER_ALLOW_RUNASROOT=1, or the stand-in's SKIFF_STANDIN_DURATION).
	// They cannot set PATH, HOME, TMPDIR, SKIFF_INSTANCE_ID or the JIT
	// configuration.
	Env []string
	// Path is the runners' PATH (default: this process's PATH).
	Path string
	// Limits caps the runners of a pool alive at once; pools not listed
	// take DefaultLimit. A limit of 0 refuses the pool's launches (as no
	// capacity).
	Limits map[string]int
	// DefaultLimit is the limit of unlisted pools (default: the number of CPUs).
	DefaultLimit int
	// DefaultLifetime caps a runner whose spec has no MaxLifetime (default DefaultLifetime).
	DefaultLifetime time.Duration
	// KillGrace is the time between SIGTERM and SIGKILL (default DefaultKillGrace).
	KillGrace time.Duration
	// Retain is how long an ended runner stays listed (default DefaultRetain).
	Retain time.Duration
	// LogDir, when set, receives each runner's stdout and stderr as
	// LogDir/<id>.log (mode 0600); otherwise they are discarded.
	LogDir string
	// Bwrap is bubblewrap's path (default: bwrap on this process's PATH),
	// the sandbox of every runner of a pool that does not opt out
	// (process.sandbox: none).
	Bwrap string
	// Hide are more paths a sandboxed runner must not see (files or
	// directories), say the GitHub App's key file. DataDir, LogDir and
	// the home directories are always hidden.
	Hide []string
	// Logger gets the provider's own logs (default slog.Default()).
	Logger *slog.Logger
	// Now is the clock of launch times and retention (default time.Now).
	// Lifetimes and the kill grace are real time.
	Now func() time.Time
	// AfterFunc arms a runner's lifetime cap: it calls f once d has
	// passed (default: time.AfterFunc). A test fires the cap when the
	// runner has done what the test waits for, instead of racing a short
	// lifetime against the machine's speed.
	AfterFunc func(d time.Duration, f func()) Timer
}

// Timer is an armed lifetime cap; *time.Timer is one.
type Timer interface {
	// Stop disarms the cap; it reports whether it had not fired yet.
	Stop() bool
}

// Provider runs runners as local processes. It is safe for concurrent use.
// Call Close to end every runner.
type Provider struct {
	o    Options
	path string // the resolved Command[0]
	dirs runnerversion.Dirs
	dir  string // DataDir/runners
	recs string // DataDir/procs

	mu   sync.Mutex
	next int // the last runner number used
	// reservedTo is the highest number the counter file reserves.
	reservedTo int
	procs      map[string]*proc
	order      []string
	byToken    map[string][]string
	failCap    bool
	usage      *sampler // measures each runner (usage.go)
	sandbox    *sandbox // nil when sandboxErr says why
	sandboxErr error    // why runners cannot be sandboxed here
	adopts     bool     // this process reaps its orphans: sandboxes' inits
	// ended holds one value once any runner ended since it was last
	// received (Ended): the ends coalesce, so none is ever blocked on.
	ended chan struct{}
}

type proc struct {
	inst     provider.Instance
	pid      int
	group    int      // its process group: its sandbox's init's, else pid
	groupID  identity // the sandbox's init's identity (zero without one)
	dir      string
	done     chan struct{}
	exit     int
	ended    time.Time
	timer    Timer
	stopping bool
	adopted  bool     // started by an earlier provider
	use      *tracker // nil for an adopted runner
	used     *Usage   // what it used, once it ended
}

var _ provider.Provider = (*Provider)(nil)

// reserved are the variables the provider sets itself.
var reserved = []string{"PATH", "HOME", "TMPDIR", "SKIFF_INSTANCE_ID", EnvJITConfig}

// New returns a provider that runs o.Command. It adopts the runners an
// earlier provider on DataDir left running (a crash), cleans up after
// those that ended, removes other leftover work directories, and fails,
// naming the option, on a missing command or data directory or a bad extra
// variable.
func New(o Options) (*Provider, error) {
	var errs []error
	if len(o.Command) == 0 || o.Command[0] == "" {
		errs = append(errs, errors.New("process provider: Command is required"))
	}
	if o.DataDir == "" {
		errs = append(errs, errors.New("process provider: DataDir is required"))
	}
	for _, kv := range o.Env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			errs = append(errs, fmt.Errorf("process provider: Env entry %q is not KEY=VALUE", k))
		} else if slices.Contains(reserved, k) {
			errs = append(errs, fmt.Errorf("process provider: Env cannot set %s", k))
		}
	}
	for pool, n := range o.Limits {
		if n < 0 {
			errs = append(errs, fmt.Errorf("process provider: the limit of pool %q is negative", pool))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	// Absolute: the sandbox binds the work directories at their paths.
	for _, d := range []*string{&o.DataDir, &o.LogDir} {
		if *d == "" {
			continue
		}
		abs, err := filepath.Abs(*d)
		if err != nil {
			return nil, fmt.Errorf("process provider: resolving %s: %w", *d, err)
		}
		*d = abs
	}
	if o.Path == "" {
		o.Path = os.Getenv("PATH")
	}
	if o.DefaultLimit <= 0 {
		o.DefaultLimit = runtime.NumCPU()
	}
	if o.KillGrace <= 0 {
		o.KillGrace = DefaultKillGrace
	}
	if o.Retain <= 0 {
		o.Retain = DefaultRetain
	}
	provider.FillDefaults(&o.DefaultLifetime, &o.Logger, &o.Now)
	if o.AfterFunc == nil {
		o.AfterFunc = func(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
	}
	path, err := lookPath(o.Command[0], o.Path)
	if err != nil {
		return nil, fmt.Errorf("process provider: finding the runner command: %w", err)
	}
	p := &Provider{o: o, path: path, ended: make(chan struct{}, 1), dir: filepath.Join(o.DataDir, "runners"), recs: filepath.Join(o.DataDir, "procs"),
		procs: map[string]*proc{}, byToken: map[string][]string{}, usage: newSampler(o.DataDir)}
	for _, d := range []string{p.dir, p.recs} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("process provider: creating the data directory: %w", err)
		}
	}
	if o.LogDir != "" {
		if err := os.MkdirAll(o.LogDir, 0o700); err != nil {
			return nil, fmt.Errorf("process provider: creating the log directory: %w", err)
		}
	}
	if b, err := os.ReadFile(p.counterFile()); err == nil {
		p.next, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		p.reservedTo = p.next
	}
	if err := p.recover(); err != nil {
		return nil, fmt.Errorf("process provider: %w", err)
	}
	hide := append([]string{o.DataDir}, o.Hide...)
	if o.LogDir != "" {
		hide = append(hide, o.LogDir)
	}
	p.sandbox, p.sandboxErr = newSandbox(o.Bwrap, path, o.Command[1:], hide)
	if p.sandboxErr == nil {
		p.sandboxErr = p.sandbox.probe(p.dir)
	}
	if p.sandboxErr != nil {
		p.sandbox = nil
		o.Logger.Warn("runners cannot be sandboxed here: only pools with process.sandbox: none can launch", "err", p.sandboxErr)
	} else {
		p.adopts = adoptOrphans()
	}
	return p, nil
}

// SandboxError says why this machine cannot sandbox runners (bwrap
// missing, or unable to make the namespaces), or nil when it can. A
// launch of a pool that needs the sandbox is then refused.
func (p *Provider) SandboxError() error { return p.sandboxErr }

// lookPath resolves cmd against path (the runners' PATH, not ours) unless
// it names a file.
func lookPath(cmd, path string) (string, error) {
	if strings.Contains(cmd, "/") {
		abs, err := filepath.Abs(cmd)
		if err != nil {
			return "", err
		}
		return exec.LookPath(abs)
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			continue
		}
		if f, err := exec.LookPath(filepath.Join(d, cmd)); err == nil {
			return filepath.Abs(f)
		}
	}
	return "", fmt.Errorf("%q is not in PATH", cmd)
}

func (p *Provider) counterFile() string { return filepath.Join(p.o.DataDir, "next-runner-id") }

// Name implements provider.Provider.
func (p *Provider) Name() string { return "process" }

// Capabilities implements provider.Provider: the process backend's
// (pool.Declared). A runner gets the host as it is: no sizes, no spot.
func (p *Provider) Capabilities() provider.Capabilities { return pool.Declared[pool.BackendProcess] }

type plan struct {
	// Unsandboxed: the pool opted out of the sandbox (process.sandbox: none).
	Unsandboxed bool                     `json:"unsandboxed,omitempty"`
	Token       string                   `json:"token"`
	Pool        string                   `json:"pool"`
	Type        string                   `json:"instance_type"`
	Lifetime    time.Duration            `json:"lifetime"`
	Tags        map[string]string        `json:"tags,omitempty"`
	Runners     []provider.RunnerRequest `json:"runners"`
	// RunnerVersion is the version of the runner in the command's
	// directory ("" when it holds no runner listener).
	RunnerVersion string `json:"runnerVersion,omitempty"`
}

// Plan implements provider.Provider.
func (p *Provider) Plan(ctx context.Context, l provider.Launch) (provider.Plan, error) {
	if err := l.Check(); err != nil {
		return "", err
	}
	if l.Spec.Pool == "" {
		return "", &provider.Error{Kind: provider.ErrInvalid, Code: "NoPool", Message: "a launch needs a pool", Final: true}
	}
	// A process pool cannot be sized (validate refuses its dynamic
	// bounds); another backend's pool run locally gets the host as it is.
	if l.Spec.Backend == pool.BackendProcess && !l.Spec.Sizes.Zero() {
		return "", &provider.Error{Kind: provider.ErrInvalid, Code: "NoDynamicSizes", Final: true,
			Message: "the process provider cannot size a runner (" + l.Spec.Sizes.String() + ")"}
	}
	// A process runs on this machine, whatever EC2 types the pool lists:
	// its records say local, and describe the host (Host).
	typ := "local"
	var tags map[string]string
	if e := l.Spec.EC2; e != nil { // local mode runs an EC2 pool's runners as processes
		tags = e.Tags
	}
	// Every pool's runners are sandboxed but a process pool's that opted out.
	unsandboxed := l.Spec.Process.Unsandboxed()
	if !unsandboxed && p.sandboxErr != nil {
		return "", &provider.Error{Kind: provider.ErrInvalid, Code: "NoSandbox", Final: true,
			Message: fmt.Sprintf("pool %s's runners need a sandbox, which this machine cannot give (%v): install bubblewrap, "+
				"or opt the pool out with process: {sandbox: none} (docs/local.md#the-sandbox)", l.Spec.Pool, p.sandboxErr)}
	}
	lifetime := l.Lifetime(p.o.DefaultLifetime)
	b, err := json.Marshal(plan{Unsandboxed: unsandboxed, Token: l.Token, Pool: l.Spec.Pool, Type: typ, Lifetime: lifetime, Tags: tags,
		Runners: l.Runners, RunnerVersion: p.dirs.Version(ctx, filepath.Dir(p.path))})
	if err != nil {
		return "", fmt.Errorf("encoding plan: %w", err)
	}
	return provider.Plan(b), nil
}

// Launch implements provider.Provider: one process per runner that fits in
// its pool's limit and has a JIT registration; the others get a per-runner
// error (ErrCapacity, ErrInvalid or ErrTransient). Replaying a token
// returns the first launch's instances, adopted ones included; replaying
// one of which nothing runs or is listed (never launched, or its runners
// ended before a restart) is a permanent ErrInvalid.
func (p *Provider) Launch(ctx context.Context, pl provider.Plan, regs []provider.Registration) (provider.Result, error) {
	var pn plan
	if err := provider.BeginLaunch(ctx, pl, &pn, "process", regs, func() (bool, int) { return pn.Token != "", len(pn.Runners) }); err != nil {
		return provider.Result{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if ids, ok := p.byToken[pn.Token]; ok {
		return p.resultLocked(ids), nil
	}
	if regs == nil {
		return provider.Result{}, &provider.Error{Kind: provider.ErrInvalid, Code: "UnknownPlan", Final: true,
			Message: "nothing was launched under this token here, or its runners had ended before the provider restarted"}
	}
	res := provider.Result{Runners: make([]provider.Launched, len(pn.Runners))}
	ids := make([]string, len(pn.Runners))
	for i, r := range pn.Runners {
		var err error
		switch {
		case p.failCap || p.liveLocked(pn.Pool) >= p.Limit(pn.Pool):
			err = &provider.Error{Kind: provider.ErrCapacity, Code: "PoolLimit",
				Message: fmt.Sprintf("pool %s runs its limit of %d runners on this machine", pn.Pool, p.Limit(pn.Pool))}
		case regs[i].Mode != provider.ModeJIT || regs[i].JITConfig == "":
			err = &provider.Error{Kind: provider.ErrInvalid, Code: "NotJIT", Final: true,
				Message: "the process provider runs just-in-time registered runners only"}
		default:
			var pr *proc
			pr, err = p.startLocked(pn, i, r, regs[i])
			if err == nil {
				ids[i] = pr.inst.ID
				res.Runners[i].Instance = pr.inst.Clone()
				continue
			}
		}
		res.Runners[i].Err = err
	}
	if err := res.Err(); err != nil {
		return res, err
	}
	p.byToken[pn.Token] = ids
	return res, nil
}

// Limit is how many runners of pool may be alive at once (Options.Limits,
// else Options.DefaultLimit).
func (p *Provider) Limit(pool string) int {
	if n, ok := p.o.Limits[pool]; ok {
		return n
	}
	return p.o.DefaultLimit
}

// liveLocked counts a pool's processes that have not exited (a stopping
// runner still holds its GPU).
func (p *Provider) liveLocked(pool string) int {
	n := 0
	for _, pr := range p.procs {
		if pr.inst.Pool == pool && pr.inst.State != provider.Terminated {
			n++
		}
	}
	return n
}

// startLocked starts one runner process, the i-th of plan pn, and records it.
func (p *Provider) startLocked(pn plan, i int, r provider.RunnerRequest, reg provider.Registration) (*proc, error) {
	id := p.nextIDLocked()
	dir := filepath.Join(p.dir, id)
	if err := os.RemoveAll(dir); err != nil {
		return nil, startFailed("clearing the work directory", err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "tmp"), 0o700); err != nil {
		return nil, startFailed("creating the work directory", err)
	}
	cmd, cgroup, group, err := p.spawn(id, dir, reg, !pn.Unsandboxed)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	deadline := time.Now().Add(pn.Lifetime)
	// Without its identity (not on Linux) a runner cannot be told apart
	// from a later process with its pid: a provider started after a crash
	// leaves it alone.
	ident, _ := identify(cmd.Process.Pid)
	var groupID identity
	if group != cmd.Process.Pid {
		groupID, _ = identify(group)
	}
	rec := record{ID: id, Pool: pn.Pool, InstanceType: pn.Type, LaunchedAt: p.o.Now().UTC(), Tags: runnerTags(pn, r),
		Token: pn.Token, Index: i, Runners: len(pn.Runners), PID: cmd.Process.Pid, Identity: ident, Deadline: deadline,
		Group: group, GroupIdentity: groupID}
	// A kill between the start and this write leaves the one runner
	// unrecorded: the next provider removes its directory but cannot find
	// its process.
	if err := p.writeRecord(rec); err != nil {
		// Without its record a crash would orphan the runner: it does not run.
		signalGroup(cmd.Process.Pid, group, groupID, syscall.SIGKILL)
		_ = syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		if group != cmd.Process.Pid && p.adopts {
			waitOrphan(group, p.o.KillGrace)
		}
		_ = os.RemoveAll(dir)
		if cgroup != "" {
			_ = removeCgroup(cgroup)
		}
		_ = os.Remove(p.recordFile(id))
		return nil, startFailed("recording the runner", err)
	}
	pr := &proc{inst: rec.instance(provider.Running), pid: cmd.Process.Pid, group: group, groupID: groupID, dir: dir,
		done: make(chan struct{}), use: p.usage.watch(group, cgroup, time.Now())}
	p.procs[id] = pr
	p.order = append(p.order, id)
	pr.timer = p.o.AfterFunc(time.Until(deadline), func() { p.stop(id, "lifetime") })
	p.o.Logger.Info("launched a runner process", "instance_id", id, "pool", pn.Pool, "pid", pr.pid, "job_id", r.JobID,
		"runner_name", r.Name, "lifetime", pn.Lifetime.String(), "sandboxed", !pn.Unsandboxed, "registration", reg)
	go func() {
		err := cmd.Wait()
		p.measured(pr, cmd.ProcessState)
		p.reap(pr, cmd.ProcessState.ExitCode(), err)
	}()
	return pr, nil
}

// startFailed is the transient error of a runner that could not start.
func startFailed(what string, err error) error {
	return &provider.Error{Kind: provider.ErrTransient, Code: "StartFailed", Message: what + ": " + err.Error()}
}

// idBlock is how many runner numbers the counter file reserves at a time.
// Replacing the file costs a flush of its data on ext4 (a rename over an
// existing file), about 10 ms on a busy disk, under the provider's lock:
// once per block instead of once per runner. A later provider starts
// after the block, so a restart skips at most idBlock-1 numbers.
const idBlock = 64

// nextIDLocked numbers the next runner process. The counter file holds the
// highest number reserved, so that a later provider does not reuse one; a
// failed write is tried again at the next number.
func (p *Provider) nextIDLocked() string {
	p.next++
	if p.next > p.reservedTo {
		top := p.next + idBlock - 1
		if privatefile.Write(p.counterFile(), []byte(strconv.Itoa(top)+"\n")) == nil {
			p.reservedTo = top
		}
	}
	return "proc-" + strconv.Itoa(p.next)
}

// spawn starts the runner command in dir, in a process group of its own
// (in a sandbox of its own when sandboxed), with its JIT config in the
// environment and its output in the log directory, if one is set; it
// returns the process, its cgroup ("" when unmeasured) and its process
// group (the sandbox's init's, else the process's own).
func (p *Provider) spawn(id, dir string, reg provider.Registration, sandboxed bool) (*exec.Cmd, string, int, error) {
	var cmd *exec.Cmd
	var info, infoW *os.File
	if sandboxed {
		if p.sandbox == nil { // the plan was made by another provider
			return nil, "", 0, &provider.Error{Kind: provider.ErrInvalid, Code: "NoSandbox", Final: true,
				Message: fmt.Sprintf("this machine cannot sandbox runners: %v", p.sandboxErr)}
		}
		var err error
		cmd, info, infoW, err = p.sandbox.command(dir, append([]string{p.path}, p.o.Command[1:]...))
		if err != nil {
			return nil, "", 0, startFailed("preparing the sandbox", err)
		}
		defer info.Close()
		defer infoW.Close()
	} else {
		cmd = exec.Command(p.path, p.o.Command[1:]...)
	}
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=" + p.o.Path, "HOME=" + dir, "TMPDIR=" + filepath.Join(dir, "tmp"),
		"SKIFF_INSTANCE_ID=" + id, EnvJITConfig + "=" + reg.JITConfig, provider.EnvDeprecatedExitCode + "=1"}, p.o.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if p.o.LogDir != "" {
		f, err := os.OpenFile(filepath.Join(p.o.LogDir, id+".log"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
		if err != nil {
			return nil, "", 0, startFailed("opening the runner's log", err)
		}
		defer f.Close() // the child has its own descriptor
		cmd.Stdout, cmd.Stderr = f, f
	}
	cmd, cgroup, err := p.startMeasured(cmd, id)
	if err != nil {
		return nil, "", 0, startFailed("starting the runner", err)
	}
	if !sandboxed {
		return cmd, cgroup, cmd.Process.Pid, nil
	}
	_ = infoW.Close() // bwrap has its own: the read below ends when bwrap closes it
	group, err := sandboxInit(info)
	if err != nil {
		_ = syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		if cgroup != "" {
			_ = removeCgroup(cgroup)
		}
		return nil, "", 0, startFailed("starting the sandbox", err)
	}
	return cmd, cgroup, group, nil
}

// signalGroup sends sig to a runner's process group: the group of its
// sandbox's init while that process is still the one recorded (gid; a
// pid a later process took is left alone), else its own (group 0 or
// group == pid).
func signalGroup(pid, group int, gid identity, sig syscall.Signal) {
	signalGroupWith(syscall.Kill, pid, group, gid, sig)
}

// signalGroupWith is signalGroup through kill. No pid or group below 2 is
// a runner's, and kill(2) reads them as more than one process: 0 as the
// caller's own group, -1 as every process it may signal, 1 as init. Such
// a value (a damaged record) signals nothing but a valid pid's own group.
func signalGroupWith(kill func(int, syscall.Signal) error, pid, group int, gid identity, sig syscall.Signal) {
	if pid <= 1 {
		return
	}
	if group <= 1 || group == pid {
		_ = kill(-pid, sig)
		return
	}
	if gid.Boot != "" {
		if got, err := identify(group); err != nil || got.Boot != gid.Boot || got.Start != gid.Start {
			return // the sandbox's init has ended: so has every process in it
		}
	}
	_ = kill(-group, sig)
	if sig == syscall.SIGKILL {
		// The init itself too, should it not lead its group yet (still
		// setting the sandbox up): every process in its pid namespace
		// dies with it.
		_ = kill(group, sig)
	}
}

// terminate asks a runner to end: SIGTERM to its group. A sandbox still
// being set up (its init does not lead a group of its own yet) runs no
// runner command to give a grace to: it is killed, with its monitor.
func terminate(pr *proc) {
	if pr.group > 0 && pr.group != pr.pid && !leadsGroup(pr.group) {
		signalGroup(pr.pid, 0, identity{}, syscall.SIGKILL) // its monitor's own group
		signalGroup(pr.pid, pr.group, pr.groupID, syscall.SIGKILL)
		return
	}
	signalGroup(pr.pid, pr.group, pr.groupID, syscall.SIGTERM)
}

// runnerTags are the plan's tags with skiff's own for runner r over them.
func runnerTags(pn plan, r provider.RunnerRequest) map[string]string {
	tags := map[string]string{}
	maps.Copy(tags, pn.Tags)
	maps.Copy(tags, r.Tags(pn.Pool, pn.Token))
	if pn.RunnerVersion != "" {
		tags[names.TagRunnerVersion] = pn.RunnerVersion
	}
	return tags
}

// reap ends a runner whose process exited with exit (-1 when a signal
// ended it, or when it was adopted: its status went to its new parent): it
// kills what the runner left in its process group, removes its directory
// and record, and marks it terminated.
func (p *Provider) reap(pr *proc, exit int, err error) {
	signalGroup(pr.pid, pr.group, pr.groupID, syscall.SIGKILL) // leftovers of the job; ESRCH when none
	rmErr := os.RemoveAll(pr.dir)
	if err := os.Remove(p.recordFile(pr.inst.ID)); err != nil && !errors.Is(err, os.ErrNotExist) && rmErr == nil {
		rmErr = err
	}
	p.mu.Lock()
	pr.timer.Stop()
	pr.exit, pr.ended = exit, p.o.Now().UTC()
	pr.inst.State = provider.Terminated
	stopping := pr.stopping
	if exit == provider.ExitVersionDeprecated && !stopping {
		// GitHub refused the runner's version: the one its directory
		// holds, when it holds a runner listener.
		if pr.inst.Tags == nil {
			pr.inst.Tags = map[string]string{}
		}
		pr.inst.Tags[names.TagRunnerOutdated] = cmp.Or(pr.inst.Tags[names.TagRunnerVersion], "unknown")
	}
	p.mu.Unlock()
	log := p.o.Logger.With("instance_id", pr.inst.ID, "pool", pr.inst.Pool, "pid", pr.pid, "exit_code", exit)
	if pr.adopted {
		log = log.With("adopted", true)
	}
	switch {
	case stopping:
		log.Info("runner process stopped")
	case err != nil:
		log.Warn("runner process failed", "err", err)
	default:
		log.Info("runner process exited")
	}
	if rmErr != nil {
		log.Error("removing the runner's work directory and record", "dir", pr.dir, "err", rmErr)
	}
	close(pr.done)
	select {
	case p.ended <- struct{}{}:
	default: // an earlier end is not received yet; its receiver lists this one too
	}
}

// Ended receives a value after one or more runner processes ended since
// the last value was received: the moment to List them, as local mode
// does to report an end at once (EC2's state-change events in AWS). Ends
// coalesce, so a slow receiver misses none: the List after a value shows
// every runner that ended before it.
func (p *Provider) Ended() <-chan struct{} { return p.ended }

// stop ends a runner: SIGTERM to its process group, SIGKILL after the grace.
func (p *Provider) stop(id, why string) {
	p.mu.Lock()
	pr := p.procs[id]
	if pr == nil || pr.stopping || pr.inst.State == provider.Terminated {
		p.mu.Unlock()
		return
	}
	pr.stopping = true
	pr.inst.State = provider.Stopping
	p.mu.Unlock()
	p.o.Logger.Info("stopping a runner process", "instance_id", id, "pool", pr.inst.Pool, "pid", pr.pid, "why", why)
	terminate(pr)
	go func() {
		t := time.NewTimer(p.o.KillGrace)
		defer t.Stop()
		select {
		case <-pr.done:
		case <-t.C:
			p.o.Logger.Warn("runner process outlived its grace; killing it", "instance_id", id, "pid", pr.pid)
			signalGroup(pr.pid, pr.group, pr.groupID, syscall.SIGKILL)
		}
	}()
}

func (p *Provider) resultLocked(ids []string) provider.Result {
	res := provider.Result{Runners: make([]provider.Launched, len(ids))}
	for i, id := range ids {
		if pr := p.procs[id]; pr != nil {
			res.Runners[i].Instance = pr.inst.Clone()
		} else {
			res.Runners[i].Err = &provider.Error{Kind: provider.ErrCapacity, Code: "NotLaunched", Message: "this runner was not launched"}
		}
	}
	return res
}

// List implements provider.Provider. Ended runners stay listed for
// Options.Retain.
func (p *Provider) List(ctx context.Context, f provider.Filter) ([]provider.Instance, error) {
	if err := ctx.Err(); err != nil {
		return nil, &provider.Error{Kind: provider.ErrTransient, Message: err.Error()}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pruneLocked()
	var out []provider.Instance
	for _, id := range p.order {
		in := p.procs[id].inst
		if len(f.IDs) > 0 && !slices.Contains(f.IDs, id) || f.Pool != "" && in.Pool != f.Pool || f.AliveOnly && !in.State.Alive() {
			continue
		}
		out = append(out, in.Clone())
	}
	return out, nil
}

func (p *Provider) pruneLocked() {
	cut := p.o.Now().Add(-p.o.Retain)
	keep := p.order[:0]
	for _, id := range p.order {
		pr := p.procs[id]
		if pr.inst.State == provider.Terminated && pr.ended.Before(cut) {
			delete(p.procs, id)
			continue
		}
		keep = append(keep, id)
	}
	p.order = keep
}

// Terminate implements provider.Provider: it signals the runners and
// returns; they are stopping until their processes exit.
func (p *Provider) Terminate(ctx context.Context, ids []string) error {
	if err := ctx.Err(); err != nil {
		return &provider.Error{Kind: provider.ErrTransient, Message: err.Error()}
	}
	for _, id := range ids {
		p.stop(id, "terminate")
	}
	return nil
}

// Wait waits until the runner's process has ended and its directory is
// gone, and returns its exit code (-1 when a signal ended it, or when an
// earlier provider started it: its exit status went to its new parent).
// An unknown id is an error.
func (p *Provider) Wait(ctx context.Context, id string) (int, error) {
	p.mu.Lock()
	pr := p.procs[id]
	p.mu.Unlock()
	if pr == nil {
		return 0, fmt.Errorf("waiting for %s: no such runner", id)
	}
	select {
	case <-pr.done:
		return pr.exit, nil
	case <-ctx.Done():
		return 0, fmt.Errorf("waiting for %s: %w", id, ctx.Err())
	}
}

// Process returns a runner's process id (in a sandbox, bwrap's monitor:
// skiff's child, which exits with the runner command) and work directory.
func (p *Provider) Process(id string) (pid int, dir string, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pr := p.procs[id]
	if pr == nil {
		return 0, "", false
	}
	return pr.pid, pr.dir, true
}

// Close ends every runner (SIGTERM, then SIGKILL after the grace) and waits
// until they are gone, or ctx ends.
func (p *Provider) Close(ctx context.Context) error {
	p.mu.Lock()
	var all []*proc
	for _, pr := range p.procs {
		all = append(all, pr)
	}
	p.mu.Unlock()
	for _, pr := range all {
		p.stop(pr.inst.ID, "shutdown")
	}
	for _, pr := range all {
		select {
		case <-pr.done:
		case <-ctx.Done():
			return fmt.Errorf("stopping runner processes: %w", ctx.Err())
		}
	}
	p.usage.close()
	return nil
}

// FailCapacity makes every later launch find no capacity (tests).
func (p *Provider) FailCapacity() {
	p.mu.Lock()
	p.failCap = true
	p.mu.Unlock()
}
