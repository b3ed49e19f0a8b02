// Package slurm is the compute provider of skiff on an HPC login node: each
// runner is one Slurm batch job, submitted with sbatch by the daemon's own
// (unprivileged) user, listed with squeue, and cancelled with scancel.
//
// A runner's batch job:
//
//	sbatch ──► PENDING (Slurm's reason) ──► RUNNING ──► COMPLETING ──► COMPLETED, FAILED, TIMEOUT, …
//	  pending                                  running     stopping       terminated
//	  (the pool's waiting room,                    ▲
//	   not a failed boot)             scancel ─────┘ (Terminate; idempotent)
//
// The job's name is the launch token and the runner's name
// (NamePrefix + token + "." + runner), so that a replay after a crash finds
// the job it submitted with one squeue, instead of submitting again. The
// job's comment carries skiff's tags. The batch script creates a fresh
// work directory under the pool's work root, starts the runner there, and
// removes the directory when the runner ends (or the job is cancelled).
//
// The runner's JIT configuration never appears in the batch script, on a
// command line, or in the job's environment: the controller stores job
// scripts and environments, and scontrol and sacct show them. It is a file
// of mode 0600 in JITDir (mode 0700, the daemon's user's, on the shared
// filesystem), whose path the script holds; the job reads it and deletes it
// before the runner starts. A file whose job ended without reading it (a
// job cancelled while pending) is removed by the next List that sees the
// job ended or gone.
//
// Listing takes one squeue for all of skiff's jobs (the daemon's user's,
// filtered by name prefix): Slurm 22.05's squeue --json ignores every
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
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provider"
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

// Options configures a Provider.
type Options struct {
	// Commander runs the Slurm commands (default Exec{}).
	Commander Commander
	// User is whose jobs are listed (default: this process's user).
	User string
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
	// LogDir, when set, receives each job's output as LogDir/<job name>.out;
	// otherwise it is discarded.
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
	o Options

	mu      sync.Mutex
	failCap bool
	calls   map[string]int
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
// It creates JITDir (0700) and refuses one that others can read.
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
	provider.FillDefaults(&o.DefaultLifetime, &o.Logger, &o.Now)
	if err := os.MkdirAll(o.JITDir, 0o700); err != nil {
		return nil, fmt.Errorf("slurm provider: creating JITDir: %w", err)
	}
	fi, err := os.Stat(o.JITDir)
	if err != nil {
		return nil, fmt.Errorf("slurm provider: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("slurm provider: JITDir %s has mode %v: others could read runners' registrations (want 0700)", o.JITDir, fi.Mode().Perm())
	}
	return &Provider{o: o, calls: map[string]int{}}, nil
}

var (
	envName   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	safeName  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
	jobIDForm = regexp.MustCompile(`^[0-9]+$`)
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
	Command []string          `json:"command"`
	WorkDir string            `json:"workDir"`
	Runners []provider.Runner `json:"runners"`
}

// RunScript is the runner's start script in a slurm: section's runnerDir.
const RunScript = "run.sh"

// Plan implements provider.Provider: the launch spec's slurm: section
// (pool.Slurm.Request with the job's sizes) gives the sbatch options, its
// runnerDir and workDir the runner; a spec without a section takes the
// cluster's defaults and the provider's Command and WorkDir. Runner names
// must be Slurm-safe ([A-Za-z0-9._-]), as skiff's are.
func (p *Provider) Plan(_ context.Context, l provider.Launch) (provider.Plan, error) {
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
	if sh.MaxLifetime <= 0 {
		sh.MaxLifetime = p.o.DefaultLifetime
	}
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
	if len(pn.Command) == 0 || pn.WorkDir == "" {
		return "", &provider.Error{Kind: provider.ErrInvalid, Code: "NoRunner", Final: true,
			Message: fmt.Sprintf("pool %s names no runner install or work directory (slurm: runnerDir, workDir) and the provider has no default", l.Spec.Pool)}
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

// Launch implements provider.Provider: one sbatch per runner, and nothing
// else. With regs nil (a replay after a crash) it runs one squeue and
// returns the jobs it finds by name; a runner without a job gets a
// retryable ErrCapacity ("not launched"), and a replay that finds none is a
// permanent ErrInvalid.
func (p *Provider) Launch(ctx context.Context, pl provider.Plan, regs []provider.Registration) (provider.Result, error) {
	var pn plan
	if err := json.Unmarshal([]byte(pl), &pn); err != nil || pn.Token == "" || len(pn.Runners) == 0 {
		return provider.Result{}, &provider.Error{Kind: provider.ErrInvalid, Code: "UnreadablePlan", Message: "the plan is not a Slurm provider's plan", Final: true}
	}
	if regs != nil && len(regs) != len(pn.Runners) {
		return provider.Result{}, provider.Errorf(provider.ErrInvalid, "launching: %d registrations for %d runners", len(regs), len(pn.Runners))
	}
	if regs == nil {
		return p.replay(ctx, pn)
	}
	res := provider.Result{Runners: make([]provider.Launched, len(pn.Runners))}
	var firstErr error
	launched := 0
	for i, r := range pn.Runners {
		in, err := p.submit(ctx, pn, r, regs[i])
		if err == nil {
			res.Runners[i].Instance = in
			launched++
			continue
		}
		res.Runners[i].Err = err
		if firstErr == nil {
			firstErr = err
		}
		if provider.Permanent(err) || errors.Is(err, provider.ErrQuota) {
			// The same answer awaits every other runner of the plan.
			for j := i + 1; j < len(pn.Runners); j++ {
				res.Runners[j].Err = err
			}
			break
		}
	}
	if launched == 0 {
		return res, firstErr
	}
	return res, nil
}

func (p *Provider) replay(ctx context.Context, pn plan) (provider.Result, error) {
	jobs, err := p.squeue(ctx)
	if err != nil {
		return provider.Result{}, err
	}
	byName := map[string]job{}
	for _, j := range jobs {
		// The newest job of a name wins (a name is submitted once; the
		// newest is what a second submit made, should one have happened).
		if old, ok := byName[j.Name]; !ok || j.ID > old.ID {
			byName[j.Name] = j
		}
	}
	res := provider.Result{Runners: make([]provider.Launched, len(pn.Runners))}
	found := 0
	for i, r := range pn.Runners {
		if j, ok := byName[p.jobName(pn.Token, r.Name)]; ok {
			res.Runners[i].Instance = p.instance(j)
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

// submit writes the runner's JIT file and submits its batch job.
func (p *Provider) submit(ctx context.Context, pn plan, r provider.Runner, reg provider.Registration) (provider.Instance, error) {
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
	jit := p.jitFile(name)
	if err := writePrivate(jit, []byte(reg.JITConfig)); err != nil {
		return provider.Instance{}, &provider.Error{Kind: provider.ErrTransient, Code: "JITFile", Message: "writing the registration file: " + err.Error()}
	}
	tags := p.tags(pn, r)
	script := p.script(pn, name, jit)
	// The pool's options first: where an option repeats, sbatch takes the
	// last, so the options skiff owns (its tags in --comment, the job's
	// name, environment and output) always hold.
	args := append(pn.Args[:len(pn.Args):len(pn.Args)], "--parsable", "--job-name="+name, "--comment="+encodeTags(tags), "--export=NONE",
		"--output="+p.output(name), "--chdir=/")
	out, err := p.run(ctx, "sbatch", args, []byte(script))
	if err != nil {
		err = classify("submitting the runner's batch job", err)
		if errors.Is(err, provider.ErrTransient) {
			// The controller may have taken the job and lost the answer
			// (a timeout, a restart): one squeue by name tells, so that
			// the caller's retry does not submit it twice.
			if jobs, lerr := p.squeue(ctx); lerr == nil {
				for _, j := range jobs {
					if j.Name == name {
						p.o.Logger.Warn("sbatch failed, but Slurm has the job", "instance_id", j.ID, "job_name", name, "err", err)
						return p.instance(j), nil
					}
				}
			}
		}
		_ = os.Remove(jit)
		return provider.Instance{}, err
	}
	// --parsable prints "jobid" or "jobid;cluster".
	id, _, _ := strings.Cut(strings.TrimSpace(string(out)), ";")
	if !jobIDForm.MatchString(id) {
		return provider.Instance{}, &provider.Error{Kind: provider.ErrTransient, Code: "UnreadableAnswer",
			Message: fmt.Sprintf("sbatch answered %q, not a job id", strings.TrimSpace(string(out)))}
	}
	p.o.Logger.Info("submitted a runner's batch job", "instance_id", id, "job_name", name, "pool", pn.Pool,
		"job_id", r.JobID, "runner_name", r.Name, "registration", reg)
	return p.instance(job{ID: id, Name: name, State: "PENDING", Partition: pn.Partition, Tags: tags,
		Submitted: p.o.Now().UTC()}), nil
}

func (p *Provider) output(name string) string {
	if p.o.LogDir == "" {
		return "/dev/null"
	}
	return filepath.Join(p.o.LogDir, name+".out")
}

func (p *Provider) tags(pn plan, r provider.Runner) map[string]string {
	tags := map[string]string{}
	tags[names.TagManaged] = names.ManagedValue
	tags[names.TagPool] = pn.Pool
	tags[names.TagFleetToken] = pn.Token
	tags[names.TagRunnerName] = r.Name
	tags[names.TagJobID] = strconv.FormatInt(r.JobID, 10)
	tags[names.TagRunID] = strconv.FormatInt(r.RunID, 10)
	if r.Repository != "" {
		tags[names.TagRepository] = r.Repository
	}
	if r.Owner != "" {
		tags[names.TagOwner] = r.Owner
	}
	return tags
}

// encodeTags renders tags for the job's comment (no spaces, no '|').
func encodeTags(tags map[string]string) string {
	v := url.Values{}
	for k, x := range tags {
		v.Set(k, x)
	}
	return v.Encode()
}

func decodeTags(s string) map[string]string {
	v, err := url.ParseQuery(s)
	if err != nil {
		return map[string]string{}
	}
	out := make(map[string]string, len(v))
	for k := range v {
		out[k] = v.Get(k)
	}
	return out
}

// writePrivate writes a file of mode 0600 that did not exist (a leftover of
// the same name, from a launch that crashed, is replaced).
func writePrivate(path string, b []byte) error {
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

// run runs one Slurm command, bounded by CommandTimeout, and counts it.
func (p *Provider) run(ctx context.Context, name string, args []string, stdin []byte) ([]byte, error) {
	p.mu.Lock()
	p.calls[name]++
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, p.o.CommandTimeout)
	defer cancel()
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
