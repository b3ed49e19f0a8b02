// Package slurm is the compute provider of skiff on an HPC login node: each
// runner is one Slurm batch job, submitted with sbatch, listed with squeue,
// and cancelled with scancel. A pool's runners run as its run-as accounts
// (slurm: runAs: [a, b]), one live runner per account, none of them the
// daemon's: skiff submits and cancels as them through sudo, and writes each
// runner's registration as the account. A pool with runAs: shared runs
// them as the daemon's own (unprivileged) user.
//
// A runner's batch job:
//
//	sbatch ──► PENDING (Slurm's reason) ──► RUNNING ──► COMPLETING ──► COMPLETED, FAILED, TIMEOUT, …
//	  pending                                  running     stopping       terminated
//	  (the pool's waiting room,                    ▲
//	   not a failed boot)             scancel ─────┘ (Terminate; idempotent)
//
// The job's name is the launch token and the runner's name
// (NamePrefix + token + "." + runner). What skiff lists, cancels and
// charges comes from its own record of the jobs it submitted (StateDir; see
// record), matched by job id and user: a job's user can rewrite its name
// and comment with scontrol update, so neither is read back as skiff's
// tags, and squeue's listing holds no field a job can write. The batch
// script creates a fresh
// work directory under the pool's work root, starts the runner there, and
// removes the directory when the runner ends (or the job is cancelled).
//
// The runner's JIT configuration never appears in the batch script, on a
// command line, or in the job's environment: the controller stores job
// scripts and environments, and scontrol and sacct show them. It is a file
// of mode 0600, whose path the script holds; the job reads it and deletes it
// before the runner starts. For a run-as account it is
// JITDir/<account>/registration, written as the account (sudo install and
// dd) just before the submission, in the account's own 0700 directory;
// JITDir (0711, the daemon's) lets the accounts through but not list it.
// With runAs: shared it is JITDir/<job name>.jit, the daemon's; such a file
// whose job ended without reading it (a job cancelled while pending) is
// removed by the next List that sees the job ended or gone. An account's
// unread file is replaced by its next runner's.
//
// Listing takes one squeue for all of skiff's jobs (the daemon's user's
// and the run-as accounts'): Slurm 22.05's squeue --json ignores every
// filter and returns the whole cluster's jobs, so the provider asks for a
// fixed --format instead. Ended jobs stay in squeue for the site's
// MinJobAge (300 s by default); ids asked for that squeue no longer knows
// take one sacct (when the site keeps accounting).
package slurm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/runnerversion"
)

// Defaults of Options.
const (
	// DefaultNamePrefix starts every job name skiff submits.
	DefaultNamePrefix = "skiff."
	// DefaultOrphanAge is how long a JIT file whose job Slurm does not know
	// is kept: a file is written just before its sbatch, and a launch that
	// crashed in between is not replayed after this long.
	DefaultOrphanAge = 15 * time.Minute
	// DefaultCommandTimeout bounds each Slurm command: sbatch retries by
	// itself while the controller is busy, which a launch must not wait
	// out forever.
	DefaultCommandTimeout = 60 * time.Second
)

// DefaultSudo runs a command as a run-as account without a password
// prompt (-n: a rule that asks for one fails at once instead of hanging).
var DefaultSudo = []string{"sudo", "-n", "-u"}

// RegistrationFile is the name of a run-as account's registration file in
// its directory JITDir/<account>.
const RegistrationFile = "registration"

// Options configures a Provider.
type Options struct {
	// Commander runs the Slurm commands (default Exec{}).
	Commander Commander
	// User is the daemon's own user, whose jobs runAs: shared pools run as
	// (default: this process's user).
	User string
	// StateDir holds skiff's record of the jobs it submitted (mode 0700,
	// the daemon's own, not on a filesystem the jobs' accounts can write;
	// default JITDir/.records).
	StateDir string
	// Sudo runs a command as a run-as account: the account, the command and
	// its arguments follow it (default DefaultSudo).
	Sudo []string
	// NamePrefix starts every job name (default DefaultNamePrefix).
	NamePrefix string
	// Cluster names the cluster in instances (their Zone; default
	// "slurm"). A job's metrics record names the cluster as the
	// accounting does (sacct's Cluster) instead.
	Cluster string
	// JITDir holds the JIT configuration files, on a filesystem the
	// compute nodes share. It is created with mode 0700 and must not be
	// readable by others. Required.
	JITDir string
	// WorkDir is the root of the runners' work directories on the shared
	// filesystem for a launch whose pool has no slurm: section (or whose
	// section sets no workDir).
	WorkDir string
	// Command is the runner command for a launch whose pool has no slurm:
	// section (or whose section sets no runnerDir), e.g.
	// ["/shared/actions-runner/run.sh"]. A section's runnerDir runs
	// runnerDir/run.sh.
	Command []string
	// Env are extra KEY=VALUE entries for every runner (not secrets: they
	// are in the batch script).
	Env []string
	// Path is the runners' PATH (default /usr/local/bin:/usr/bin:/bin).
	Path string
	// LogDir, when set, receives each job's output as LogDir/<job name>.out
	// (LogDir/<account>/<job name>.out for a run-as account: a directory
	// the account owns, mode 0700, made by the operator); otherwise it is
	// discarded.
	LogDir string
	// DefaultLifetime is the time limit of a pool without one.
	DefaultLifetime time.Duration
	// OrphanAge: see DefaultOrphanAge.
	OrphanAge time.Duration
	// CommandTimeout: see DefaultCommandTimeout.
	CommandTimeout time.Duration
	// Logger gets the provider's logs (default slog.Default()).
	Logger *slog.Logger
	// Now is the clock of the orphan sweep (default time.Now).
	Now func() time.Time
}

// Provider runs runners as Slurm batch jobs. It is safe for concurrent use.
type Provider struct {
	o    Options
	dirs runnerversion.Dirs

	mu      sync.Mutex
	failCap bool
	calls   map[string]int
	// records are skiff's own record of its jobs, by job name and by id.
	records map[string]*record
	byID    map[string]*record
	// accounts are the run-as accounts seen in plans and records: their
	// jobs are listed.
	accounts map[string]bool
	// submitting are the job names whose sbatch is under way.
	submitting map[string]bool
	// foreign are the run-as accounts the last listing found with live
	// jobs skiff did not submit (submitted by a runner): not given to a
	// runner until those are gone.
	foreign map[string]bool
}

var _ provider.Provider = (*Provider)(nil)

// Capabilities implements provider.Provider: what pool.Declared says a
// Slurm pool may ask for.
func (p *Provider) Capabilities() provider.Capabilities { return pool.Declared[pool.BackendSlurm] }

var reserved = []string{"PATH", "HOME", "TMPDIR", "SKIFF_INSTANCE_ID", EnvJITConfig}

// EnvJITConfig is the runner's variable for its JIT configuration (run.sh's
// --jitconfig input), set by the batch script from the file, at run time.
const EnvJITConfig = "ACTIONS_RUNNER_INPUT_JITCONFIG"

// New returns a provider, failing with the option's name on a bad option.
// It creates JITDir (0711) and StateDir (0700), refuses them when others
// can read or write them, and reads skiff's record of its jobs.
func New(o Options) (*Provider, error) {
	var errs []error
	if o.JITDir == "" {
		errs = append(errs, errors.New("slurm provider: JITDir is required"))
	}
	for _, kv := range o.Env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || !envName.MatchString(k) {
			errs = append(errs, fmt.Errorf("slurm provider: Env entry %q is not KEY=VALUE", k))
		} else if slices.Contains(reserved, k) {
			errs = append(errs, fmt.Errorf("slurm provider: Env cannot set %s", k))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if o.Commander == nil {
		o.Commander = Exec{}
	}
	if o.User == "" {
		u, err := user.Current()
		if err != nil {
			return nil, fmt.Errorf("slurm provider: finding the current user: %w", err)
		}
		o.User = u.Username
	}
	if o.NamePrefix == "" {
		o.NamePrefix = DefaultNamePrefix
	}
	if o.Cluster == "" {
		o.Cluster = "slurm"
	}
	if o.Path == "" {
		o.Path = "/usr/local/bin:/usr/bin:/bin"
	}
	if o.OrphanAge <= 0 {
		o.OrphanAge = DefaultOrphanAge
	}
	if o.CommandTimeout <= 0 {
		o.CommandTimeout = DefaultCommandTimeout
	}
	if len(o.Sudo) == 0 {
		o.Sudo = DefaultSudo
	}
	if o.StateDir == "" {
		o.StateDir = filepath.Join(o.JITDir, ".records")
	}
	provider.FillDefaults(&o.DefaultLifetime, &o.Logger, &o.Now)
	// JITDir: the accounts pass through it to their own directories, and
	// nobody but the daemon's user lists or writes it.
	if err := privateDir(o.JITDir, 0o711); err != nil {
		return nil, fmt.Errorf("slurm provider: JITDir: %w", err)
	}
	if err := privateDir(o.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("slurm provider: StateDir: %w", err)
	}
	p := &Provider{o: o, calls: map[string]int{}, records: map[string]*record{}, byID: map[string]*record{},
		accounts: map[string]bool{}, submitting: map[string]bool{}, foreign: map[string]bool{}}
	if err := p.loadRecords(); err != nil {
		return nil, fmt.Errorf("slurm provider: %w", err)
	}
	return p, nil
}

// privateDir creates dir with mode (or sets it on a directory of the
// daemon's that has no more), and refuses one others may read or write.
func privateDir(dir string, mode os.FileMode) error {
	if err := os.MkdirAll(dir, mode); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if fi.Mode().Perm()&^mode != 0 {
		return fmt.Errorf("%s has mode %v: others could read or change runners' registrations and skiff's records (want %v)", dir, fi.Mode().Perm(), mode)
	}
	if fi.Mode().Perm() != mode {
		if err := os.Chmod(dir, mode); err != nil {
			return fmt.Errorf("setting the mode of %s: %w", dir, err)
		}
	}
	return nil
}

var (
	envName   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	safeName  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
	jobIDForm = regexp.MustCompile(`^[0-9]+$`)
	// accountName is the schema's form of a run-as account.
	accountName = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)
)

// Name implements provider.Provider.
func (p *Provider) Name() string { return "slurm" }

type plan struct {
	Token string `json:"token"`
	Pool  string `json:"pool"`
	// Args are the sbatch options of the pool's slurm: section for the
	// job's sizes (pool.Slurm.Request), the time limit included.
	Args []string `json:"args"`
	// Partition is the section's partition ("" for the cluster's default).
	Partition string `json:"partition,omitempty"`
	// Command runs the runner; WorkDir is the root of its work directory.
	Command []string                 `json:"command"`
	WorkDir string                   `json:"workDir"`
	Runners []provider.RunnerRequest `json:"runners"`
	// RunAs are the section's run-as accounts (none: runAs: shared, the
	// daemon's own user).
	RunAs []string `json:"runAs,omitempty"`
	// RunnerVersion is the version of the runner in the command's
	// directory ("" when it holds no runner listener).
	RunnerVersion string `json:"runnerVersion,omitempty"`
}

// RunScript is the runner's start script in a slurm: section's runnerDir.
const RunScript = "run.sh"

// Plan implements provider.Provider: the launch spec's slurm: section
// (pool.Slurm.Request with the job's sizes) gives the sbatch options, its
// runnerDir and workDir the runner; a spec without a section takes the
// cluster's defaults and the provider's Command and WorkDir. Runner names
// must be Slurm-safe ([A-Za-z0-9._-]), as skiff's are.
func (p *Provider) Plan(ctx context.Context, l provider.Launch) (provider.Plan, error) {
	if err := l.Check(); err != nil {
		return "", err
	}
	if l.Spec.Pool == "" || !safeName.MatchString(l.Spec.Pool) {
		return "", &provider.Error{Kind: provider.ErrInvalid, Code: "BadPool", Message: fmt.Sprintf("pool name %q is empty or not [A-Za-z0-9._-]", l.Spec.Pool), Final: true}
	}
	if !safeName.MatchString(l.Token) {
		return "", &provider.Error{Kind: provider.ErrInvalid, Code: "InvalidToken", Message: "the launch token must be [A-Za-z0-9-]", Final: true}
	}
	for _, r := range l.Runners {
		if !safeName.MatchString(r.Name) {
			return "", &provider.Error{Kind: provider.ErrInvalid, Code: "BadRunnerName", Final: true,
				Message: fmt.Sprintf("runner name %q is not [A-Za-z0-9._-]", r.Name)}
		}
	}
	sh := l.Spec.Shared
	sh.MaxLifetime = l.Lifetime(p.o.DefaultLifetime)
	section := l.Spec.Slurm
	if section == nil {
		section = &pool.Slurm{}
	}
	pn := plan{Token: l.Token, Pool: l.Spec.Pool, Args: section.Request(sh).Args(), Partition: section.Partition,
		Command: p.o.Command, WorkDir: p.o.WorkDir, Runners: l.Runners}
	if section.RunnerDir != "" {
		pn.Command = []string{filepath.Join(section.RunnerDir, RunScript)}
	}
	if section.WorkDir != "" {
		pn.WorkDir = section.WorkDir
	}
	if !section.RunAsShared {
		pn.RunAs = section.RunAs
	}
	for _, a := range pn.RunAs {
		if !accountName.MatchString(a) || a == p.o.User || a == "root" {
			return "", &provider.Error{Kind: provider.ErrInvalid, Code: "BadRunAs", Final: true,
				Message: fmt.Sprintf("run-as account %q of pool %s is not a Unix account name, or is root or skiff's own user", a, l.Spec.Pool)}
		}
	}
	if len(pn.Command) == 0 || pn.WorkDir == "" {
		return "", &provider.Error{Kind: provider.ErrInvalid, Code: "NoRunner", Final: true,
			Message: fmt.Sprintf("pool %s names no runner install or work directory (slurm: runnerDir, workDir) and the provider has no default", l.Spec.Pool)}
	}
	// The runner directory is on the shared filesystem the login node
	// sees too: its version is read here, once per directory.
	if filepath.IsAbs(pn.Command[0]) {
		pn.RunnerVersion = p.dirs.Version(ctx, filepath.Dir(pn.Command[0]))
	}
	b, err := json.Marshal(pn)
	if err != nil {
		return "", fmt.Errorf("encoding plan: %w", err)
	}
	return provider.Plan(b), nil
}

// jobName is the batch job's name of a plan's runner.
func (p *Provider) jobName(token, runner string) string {
	return p.o.NamePrefix + token + "." + runner
}

func (p *Provider) jitFile(name string) string { return filepath.Join(p.o.JITDir, name+".jit") }

// Launch implements provider.Provider: one sbatch per runner (for a run-as
// account, also the two commands that write its registration as the
// account), and nothing else. A runner of a pool whose run-as accounts all
// have a live runner waits: a retryable ErrCapacity ("NoFreeAccount"),
// after one squeue that looks for accounts freed since the last listing.
// With regs nil (a replay after a crash) it runs one squeue and returns
// the jobs skiff's record holds for the plan; a runner without a job gets
// a retryable ErrCapacity ("not launched"), and a replay that finds none is
// a permanent ErrInvalid.
func (p *Provider) Launch(ctx context.Context, pl provider.Plan, regs []provider.Registration) (provider.Result, error) {
	var pn plan
	if err := provider.BeginLaunch(ctx, pl, &pn, "Slurm", regs, func() (bool, int) { return pn.Token != "", len(pn.Runners) }); err != nil {
		return provider.Result{}, err
	}
	p.mu.Lock()
	for _, a := range pn.RunAs {
		p.accounts[a] = true
	}
	p.mu.Unlock()
	if regs == nil {
		return p.replay(ctx, pn)
	}
	res := provider.Result{Runners: make([]provider.Launched, len(pn.Runners))}
	for i, r := range pn.Runners {
		in, err := p.submit(ctx, pn, r, regs[i])
		if err == nil {
			res.Runners[i].Instance = in
			continue
		}
		res.Runners[i].Err = err
		if provider.Permanent(err) || errors.Is(err, provider.ErrQuota) {
			// The same answer awaits every other runner of the plan.
			for j := i + 1; j < len(pn.Runners); j++ {
				res.Runners[j].Err = err
			}
			break
		}
	}
	return res, res.Err()
}

func (p *Provider) replay(ctx context.Context, pn plan) (provider.Result, error) {
	// A record without a job id is a submit the crash interrupted: its
	// job, if sbatch took it, is found by name among its account's newer jobs.
	for _, r := range pn.Runners {
		p.mu.Lock()
		rec := p.records[p.jobName(pn.Token, r.Name)]
		pending := rec != nil && rec.ID == "" && !p.submitting[rec.Name]
		p.mu.Unlock()
		if pending {
			if _, _, err := p.resolve(ctx, rec); err != nil {
				return provider.Result{}, err
			}
		}
	}
	seen, err := p.observe(ctx)
	if err != nil {
		return provider.Result{}, err
	}
	res := provider.Result{Runners: make([]provider.Launched, len(pn.Runners))}
	found := 0
	for i, r := range pn.Runners {
		if s, ok := seen[p.jobName(pn.Token, r.Name)]; ok {
			res.Runners[i].Instance = p.instance(s.job, s.rec)
			found++
		} else {
			res.Runners[i].Err = &provider.Error{Kind: provider.ErrCapacity, Code: "NotLaunched", Message: "this runner was not launched"}
		}
	}
	if found == 0 {
		return provider.Result{}, &provider.Error{Kind: provider.ErrInvalid, Code: "UnknownPlan", Final: true,
			Message: "Slurm knows no job of this launch token (never submitted, or ended longer ago than its MinJobAge)"}
	}
	return res, nil
}

// takeAccount records the intent to submit job name as one of the plan's
// free run-as accounts ("" for runAs: shared), or fails with a retryable
// ErrCapacity when every account has a live runner.
func (p *Provider) takeAccount(ctx context.Context, pn plan, name string, tags map[string]string) (*record, error) {
	rec := &record{Name: name, Pool: pn.Pool, Partition: pn.Partition, Tags: tags, Written: p.o.Now().UTC()}
	for attempt := 0; ; attempt++ {
		p.mu.Lock()
		ok := len(pn.RunAs) == 0
		if !ok {
			rec.Account, ok = p.freeAccount(pn.RunAs)
		}
		if ok {
			if old := p.records[name]; old != nil {
				p.dropRecord(old)
			}
			p.addRecord(rec)
			p.submitting[name] = true
			err := p.saveRecord(rec)
			if err != nil {
				p.dropRecord(rec)
				delete(p.submitting, name)
			}
			p.mu.Unlock()
			if err != nil {
				return nil, &provider.Error{Kind: provider.ErrTransient, Code: "RecordFile", Message: err.Error()}
			}
			return rec, nil
		}
		p.mu.Unlock()
		if attempt > 0 {
			return nil, &provider.Error{Kind: provider.ErrCapacity, Code: "NoFreeAccount",
				Message: fmt.Sprintf("every run-as account of pool %s (%s) has a live runner", pn.Pool, strings.Join(pn.RunAs, ", "))}
		}
		// The last listing may be older than the runners that ended since.
		if _, err := p.observe(ctx); err != nil {
			return nil, err
		}
	}
}

// freeAccount is the first of accounts with no live or unresolved job of
// skiff's and none of a runner's own (p.mu held).
func (p *Provider) freeAccount(accounts []string) (string, bool) {
	busy := map[string]bool{}
	for _, r := range p.records {
		if !r.Ended {
			busy[r.Account] = true
		}
	}
	for _, a := range accounts {
		if !busy[a] && !p.foreign[a] {
			return a, true
		}
	}
	return "", false
}

// submit writes the runner's JIT file and submits its batch job.
func (p *Provider) submit(ctx context.Context, pn plan, r provider.RunnerRequest, reg provider.Registration) (provider.Instance, error) {
	p.mu.Lock()
	failCap := p.failCap
	p.mu.Unlock()
	if failCap {
		return provider.Instance{}, &provider.Error{Kind: provider.ErrCapacity, Code: "NoCapacity", Message: "capacity refused for a test"}
	}
	if reg.Mode != provider.ModeJIT || reg.JITConfig == "" {
		return provider.Instance{}, &provider.Error{Kind: provider.ErrInvalid, Code: "NotJIT", Final: true,
			Message: "the Slurm provider runs just-in-time registered runners only"}
	}
	name := p.jobName(pn.Token, r.Name)
	tags := p.tags(pn, r)
	rec, err := p.takeAccount(ctx, pn, name, tags)
	if err != nil {
		return provider.Instance{}, err
	}
	defer func() {
		p.mu.Lock()
		delete(p.submitting, name)
		p.mu.Unlock()
	}()
	forget := func() {
		p.mu.Lock()
		p.dropRecord(rec)
		p.mu.Unlock()
	}
	jit, err := p.writeJIT(ctx, rec.Account, name, reg.JITConfig)
	if err != nil {
		forget()
		return provider.Instance{}, err
	}
	script := p.script(pn, name, jit, rec.Account)
	// The pool's options first: where an option repeats, sbatch takes the
	// last, so the options skiff owns (the job's name, environment and
	// output) always hold.
	args := append(pn.Args[:len(pn.Args):len(pn.Args)], "--parsable", "--job-name="+name, "--export=NONE",
		"--output="+p.output(rec.Account, name), "--chdir=/")
	out, err := p.run(ctx, rec.Account, "sbatch", args, []byte(script))
	if err != nil {
		err = classify("submitting the runner's batch job", err)
		if errors.Is(err, provider.ErrTransient) {
			// The controller may have taken the job and lost the answer
			// (a timeout, a restart): one squeue by name tells, so that
			// the caller's retry does not submit it twice.
			if j, ok, lerr := p.resolve(ctx, rec); lerr == nil && ok {
				p.o.Logger.Warn("sbatch failed, but Slurm has the job", "instance_id", j.ID, "job_name", name, "err", err)
				return p.instance(j, rec), nil
			}
		}
		forget()
		if rec.Account == "" {
			_ = os.Remove(jit)
		}
		return provider.Instance{}, err
	}
	// --parsable prints "jobid" or "jobid;cluster".
	id, _, _ := strings.Cut(strings.TrimSpace(string(out)), ";")
	if !jobIDForm.MatchString(id) {
		forget()
		return provider.Instance{}, &provider.Error{Kind: provider.ErrTransient, Code: "UnreadableAnswer",
			Message: fmt.Sprintf("sbatch answered %q, not a job id", strings.TrimSpace(string(out)))}
	}
	p.mu.Lock()
	rec.ID = id
	p.byID[id] = rec
	if err := p.saveRecord(rec); err != nil {
		// The job is submitted and known in memory; a restart before the
		// next save resolves it by name.
		p.o.Logger.Warn("recording a submitted job", "instance_id", id, "job_name", name, "err", err)
	}
	p.mu.Unlock()
	p.o.Logger.Info("submitted a runner's batch job", "instance_id", id, "job_name", name, "pool", pn.Pool,
		"job_id", r.JobID, "runner_name", r.Name, "run_as", p.user(rec.Account), "registration", reg)
	j := job{ID: id, User: p.user(rec.Account), State: "PENDING", Partition: pn.Partition, Submitted: p.o.Now().UTC()}
	return p.instance(j, rec), nil
}

// writeJIT writes a runner's registration where its job reads it, and
// returns the path: as the run-as account, in the account's own 0700
// directory (JITDir/<account>, made by the operator: skiff checks its
// owner and mode), replacing the account's previous file; or, for
// runAs: shared, as the daemon's own file in JITDir.
func (p *Provider) writeJIT(ctx context.Context, account, name, jit string) (string, error) {
	if account == "" {
		path := p.jitFile(name)
		if err := createPrivate(path, []byte(jit)); err != nil {
			return "", &provider.Error{Kind: provider.ErrTransient, Code: "JITFile", Message: "writing the registration file: " + err.Error()}
		}
		return path, nil
	}
	dir := filepath.Join(p.o.JITDir, account)
	if err := accountDir(dir, account); err != nil {
		return "", &provider.Error{Kind: provider.ErrInvalid, Code: "NoAccountDir", Final: true, Message: err.Error(),
			Detail: fmt.Sprintf("as root: install -d -o %s -m 0700 %s (see docs/slurm.md#run-as-accounts)", account, dir)}
	}
	path := filepath.Join(dir, RegistrationFile)
	// install replaces whatever the account's previous runner left there
	// (a symbolic link included) with an empty file of mode 0600; dd then
	// fills it from standard input without creating another.
	if _, err := p.run(ctx, account, "install", []string{"-m", "0600", "/dev/null", path}, nil); err != nil {
		return "", classifyRunAs("creating the registration file as "+account, err)
	}
	if _, err := p.run(ctx, account, "dd", []string{"of=" + path, "conv=nocreat", "status=none"}, []byte(jit)); err != nil {
		return "", classifyRunAs("writing the registration file as "+account, err)
	}
	return path, nil
}

// accountDir checks that dir is a directory of account's own, mode 0700.
func accountDir(dir, account string) error {
	u, err := user.Lookup(account)
	if err != nil {
		return fmt.Errorf("looking up run-as account %s: %w", account, err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("the registration directory of run-as account %s: %w", account, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || strconv.FormatUint(uint64(st.Uid), 10) != u.Uid || fi.Mode().Perm() != 0o700 {
		return fmt.Errorf("%s is not a directory of run-as account %s's own with mode 0700 (mode %v)", dir, account, fi.Mode())
	}
	return nil
}

// classifyRunAs is classify for a command run through sudo: a rule that
// does not allow it is a final ErrInvalid naming the rule to grant.
func classifyRunAs(what string, err error) error {
	var ee *ExitError
	if errors.As(err, &ee) && (strings.Contains(ee.Stderr, "a password is required") || strings.Contains(ee.Stderr, "not allowed") ||
		strings.Contains(ee.Stderr, "unknown user") || strings.Contains(ee.Stderr, "may not run")) {
		return &provider.Error{Kind: provider.ErrInvalid, Code: "RunAsNotAllowed", Final: true, Message: what + ": " + slurmMessage(ee.Stderr),
			Detail: "grant skiff's user the sudoers rule of docs/slurm.md#run-as-accounts for this account"}
	}
	return classify(what, err)
}

func (p *Provider) output(account, name string) string {
	if p.o.LogDir == "" {
		return "/dev/null"
	}
	if account != "" {
		return filepath.Join(p.o.LogDir, account, name+".out")
	}
	return filepath.Join(p.o.LogDir, name+".out")
}

func (p *Provider) tags(pn plan, r provider.RunnerRequest) map[string]string {
	tags := map[string]string{}
	tags[names.TagManaged] = names.ManagedValue
	tags[names.TagPool] = pn.Pool
	tags[names.TagLaunchToken] = pn.Token
	tags[names.TagRunnerName] = r.Name
	tags[names.TagJobID] = strconv.FormatInt(r.JobID, 10)
	tags[names.TagRunID] = strconv.FormatInt(r.RunID, 10)
	if r.Repository != "" {
		tags[names.TagRepository] = r.Repository
	}
	if r.Owner != "" {
		tags[names.TagOwner] = r.Owner
	}
	if pn.RunnerVersion != "" {
		tags[names.TagRunnerVersion] = pn.RunnerVersion
	}
	return tags
}

// createPrivate creates a file of mode 0600 that did not exist, with b (a
// leftover of the same name, from a launch that crashed, is removed first;
// a link planted at the path is never followed). The job reads and deletes
// it; unlike the records (internal/privatefile), it is not kept across a
// power loss.
func createPrivate(path string, b []byte) error {
	_ = os.Remove(path)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		_ = os.Remove(path)
		return err
	}
	if err := f.Close(); err != nil {
		_ = os.Remove(path)
		return err
	}
	return nil
}

// run runs one command, as account through Sudo (or as the daemon's own
// user for ""), bounded by CommandTimeout, and counts it by its name.
func (p *Provider) run(ctx context.Context, account, name string, args []string, stdin []byte) ([]byte, error) {
	p.mu.Lock()
	p.calls[name]++
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, p.o.CommandTimeout)
	defer cancel()
	if account != "" {
		full := make([]string, 0, len(p.o.Sudo)+1+len(args))
		full = append(full, p.o.Sudo[1:]...)
		full = append(full, account, name)
		name, args = p.o.Sudo[0], append(full, args...)
	}
	// A command killed at the timeout is an *ExitError too, with what it
	// said until then (sbatch's "sleeping and retrying" at a submit limit).
	return p.o.Commander.Run(ctx, name, args, stdin)
}

// Calls returns how many times each Slurm command ran (for benchmarks and
// tests), and resets the counts.
func (p *Provider) Calls() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.calls
	p.calls = map[string]int{}
	return out
}

// FailCapacity makes every later submit find no capacity (tests).
func (p *Provider) FailCapacity() {
	p.mu.Lock()
	p.failCap = true
	p.mu.Unlock()
}
