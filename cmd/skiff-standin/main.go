// Command skiff-standin stands in for the GitHub Actions runner in local
// mode, the demo and tests: started the way the boot script starts run.sh —
// its just-in-time configuration in ACTIONS_RUNNER_INPUT_JITCONFIG, never on
// the command line — it connects to the GitHub simulator (pkg/github/ghsim)
// as that runner, waits for its one job, "runs" it for a while, reports it
// complete, disconnects and exits 0. It never prints its configuration.
//
// Environment:
//
//	ACTIONS_RUNNER_INPUT_JITCONFIG  the encoded JIT configuration (required), as for run.sh
//	SKIFF_STANDIN_URL               the simulator's root URL (default: read from the configuration)
//	SKIFF_STANDIN_DURATION          how long the job runs (default 2s)
//	SKIFF_STANDIN_CONCLUSION        success (default) or failure
//	SKIFF_STANDIN_IDLE              how long to wait for a job before giving up and exiting 0
//	                                (default 10m: an idle runner powers off, as skiff's instances do)
//	SKIFF_STANDIN_CRASH=1           exit 3 in the middle of the job, reporting nothing
//	SKIFF_STANDIN_HANG=1            never finish the job (until a signal); =hard also ignores SIGTERM
//	SKIFF_STANDIN_WORK              real work per job, by the job's name: name=CPU:MiB;...  (* for any
//	                                other job), e.g. compile=0.8:256;test=0.05:16 burns 0.8 s of CPU
//	                                time and holds 256 MiB (touched) while a compile job runs; the
//	                                job ends when both its duration and its CPU burn are over
//	SKIFF_STANDIN_VERSION           the runner version it connects as (default: none, never refused)
//	ACTIONS_RUNNER_RETURN_VERSION_DEPRECATED_EXIT_CODE=1
//	                                as the real runner (2.333.0 and later): exit 7 when GitHub
//	                                refuses the runner's version
//
// Exit status: 0 after the job (or an idle timeout), 1 on a failure or a
// signal, 2 on bad configuration, 3 for SKIFF_STANDIN_CRASH. When the
// simulator refuses the version (below the minimum, or deprecated), it
// prints the real runner's line ("An error occurred: Runner version vX is
// deprecated and cannot receive messages.") and exits as the real runner
// does: 7 with ACTIONS_RUNNER_RETURN_VERSION_DEPRECATED_EXIT_CODE=1, else 0
// ("no retry needed"), which is what makes a replacement loop.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	// Refuses to compile with a Go older than the patched one.
	_ "github.com/skiffci/skiff/internal/gotoolchain"
	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/runnerversion"
)

// EnvJITConfig is the runner's own variable for its JIT configuration
// (run.sh reads it as the --jitconfig input).
const EnvJITConfig = "ACTIONS_RUNNER_INPUT_JITCONFIG"

// Config is the stand-in's configuration, read from the environment once.
type Config struct {
	JITConfig  string
	URL        string
	Duration   time.Duration
	Conclusion string
	Idle       time.Duration
	Crash      bool
	Hang       string // "", "1" or "hard"
	// Work is the real work of a job, by its name ("*": any other).
	Work map[string]Work
	// Version is the runner version it connects as ("": not checked).
	Version string
	// DeprecatedExit: exit ExitVersionDeprecated when the version is refused.
	DeprecatedExit bool
}

// Work is what a job does while it runs: burn CPU seconds of CPU time
// and hold MiB of memory.
type Work struct {
	CPUSeconds float64
	MiB        int
}

// parseWork reads SKIFF_STANDIN_WORK: name=CPU:MiB entries split by ';'.
func parseWork(v string) (map[string]Work, error) {
	out := map[string]Work{}
	for _, e := range strings.Split(v, ";") {
		if strings.TrimSpace(e) == "" {
			continue
		}
		name, spec, ok := strings.Cut(e, "=")
		cpu, mib, ok2 := strings.Cut(spec, ":")
		c, err1 := strconv.ParseFloat(cpu, 64)
		m, err2 := strconv.Atoi(mib)
		if !ok || !ok2 || name == "" || err1 != nil || err2 != nil || c < 0 || m < 0 || c > 3600 || m > 1<<20 {
			return nil, fmt.Errorf("SKIFF_STANDIN_WORK: %q is not name=CPU-seconds:MiB", e)
		}
		out[strings.TrimSpace(name)] = Work{CPUSeconds: c, MiB: m}
	}
	return out, nil
}

// workFor is the work of a job named name.
func (c Config) workFor(name string) Work {
	if w, ok := c.Work[name]; ok {
		return w
	}
	return c.Work["*"]
}

// Exit statuses.
const (
	exitOK     = 0
	exitFailed = 1
	exitConfig = 2
	exitCrash  = 3
	// ExitVersionDeprecated is the real runner's exit code for a version
	// GitHub refuses, when EnvDeprecatedExitCode is 1.
	ExitVersionDeprecated = 7
)

// EnvDeprecatedExitCode turns on the runner's exit code 7 for a deprecated version.
const EnvDeprecatedExitCode = "ACTIONS_RUNNER_RETURN_VERSION_DEPRECATED_EXIT_CODE"

// LoadConfig reads the configuration from getenv and validates it, naming
// each bad variable.
func LoadConfig(getenv func(string) string) (Config, error) {
	c := Config{JITConfig: getenv(EnvJITConfig), URL: getenv("SKIFF_STANDIN_URL"), Duration: 2 * time.Second,
		Conclusion: "success", Idle: 10 * time.Minute, Crash: getenv("SKIFF_STANDIN_CRASH") == "1",
		Hang: getenv("SKIFF_STANDIN_HANG"), Version: getenv("SKIFF_STANDIN_VERSION"),
		DeprecatedExit: getenv(EnvDeprecatedExitCode) == "1"}
	var errs []error
	dur := func(name string, dst *time.Duration) {
		if v := getenv(name); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				errs = append(errs, fmt.Errorf("%s: %q is not a non-negative duration", name, v))
				return
			}
			*dst = d
		}
	}
	dur("SKIFF_STANDIN_DURATION", &c.Duration)
	dur("SKIFF_STANDIN_IDLE", &c.Idle)
	if v := getenv("SKIFF_STANDIN_CONCLUSION"); v != "" {
		c.Conclusion = v
	}
	if c.Conclusion != "success" && c.Conclusion != "failure" {
		errs = append(errs, fmt.Errorf("SKIFF_STANDIN_CONCLUSION: %q is neither success nor failure", c.Conclusion))
	}
	if v := getenv("SKIFF_STANDIN_WORK"); v != "" {
		w, err := parseWork(v)
		if err != nil {
			errs = append(errs, err)
		}
		c.Work = w
	}
	if c.Version != "" {
		if _, err := runnerversion.Parse(c.Version); err != nil {
			errs = append(errs, fmt.Errorf("SKIFF_STANDIN_VERSION: %w", err))
		}
	}
	if c.Hang != "" && c.Hang != "1" && c.Hang != "hard" {
		errs = append(errs, fmt.Errorf("SKIFF_STANDIN_HANG: %q is neither 1 nor hard", c.Hang))
	}
	switch {
	case c.JITConfig == "":
		errs = append(errs, fmt.Errorf("%s is required", EnvJITConfig))
	case c.URL == "":
		u, err := ghsim.BrokerURL(c.JITConfig)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w (or set SKIFF_STANDIN_URL)", EnvJITConfig, err))
		}
		c.URL = u
	default:
		if u, err := url.Parse(c.URL); err != nil || u.Scheme == "" || u.Host == "" {
			errs = append(errs, fmt.Errorf("SKIFF_STANDIN_URL: %q is not an absolute URL", c.URL))
		}
	}
	return c, errors.Join(errs...)
}

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	cfg, err := LoadConfig(os.Getenv)
	// The runner's configuration is a secret: keep it out of anything this
	// process starts or dumps, as the boot script unsets it.
	_ = os.Unsetenv(EnvJITConfig)
	if err != nil {
		log.Error("invalid configuration", "err", err)
		os.Exit(exitConfig)
	}
	signals := []os.Signal{os.Interrupt, syscall.SIGTERM}
	if cfg.Hang == "hard" {
		signal.Ignore(syscall.SIGTERM) // a runner that only SIGKILL ends
		signals = signals[:1]
	}
	ctx, stop := signal.NotifyContext(context.Background(), signals...)
	code := Run(ctx, cfg, http.DefaultClient, log)
	stop()
	os.Exit(code)
}

// Run is the stand-in's life: connect, wait for the job, run it, complete,
// disconnect. It returns the process's exit status. A canceled ctx (a
// signal) disconnects, which fails a job in progress, and returns 1.
func Run(ctx context.Context, cfg Config, hc *http.Client, log *slog.Logger) int {
	r, err := connect(ctx, &client{hc: hc, base: strings.TrimRight(cfg.URL, "/")}, cfg.JITConfig, cfg.Version, log)
	var se *statusError
	if errors.As(err, &se) && se.status == http.StatusForbidden && (se.reason == "deprecated" || se.reason == "below_minimum") {
		// The real runner's words and exit: code 7 only when asked for.
		fmt.Fprintf(os.Stdout, "An error occurred: Runner version v%s is deprecated and cannot receive messages.\n", cfg.Version)
		fmt.Fprintln(os.Stdout, "Runner listener exit with terminated error, stop the service, no retry needed.")
		log.Error("the runner's version was refused", "version", cfg.Version, "reason", se.reason)
		if cfg.DeprecatedExit {
			return ExitVersionDeprecated
		}
		return exitOK
	}
	if err != nil {
		log.Error("connecting to the simulator", "err", err)
		return exitFailed
	}
	job, code, ok := r.waitForJob(ctx, cfg.Idle)
	if !ok {
		return code
	}
	r.log = r.log.With("job_id", job.ID, "run_id", job.RunID, "repository", job.Repository)
	r.log.Info("running job", "job_name", job.Name, "duration", cfg.Duration.String())
	if code, ok := r.runJob(ctx, cfg, job.Name); !ok {
		return code
	}
	return r.complete(ctx, job.ID, cfg.Conclusion)
}

// runner is one connected stand-in: its session with the simulator.
type runner struct {
	c    *client
	path string // the simulator's path of this runner
	log  *slog.Logger
}

// connect opens the runner's session with its JIT configuration.
func connect(ctx context.Context, c *client, jitConfig, version string, log *slog.Logger) (*runner, error) {
	var sess ghsim.RunnerSession
	body, _ := json.Marshal(map[string]string{"encoded_jit_config": jitConfig, "runner_version": version})
	if err := c.do(ctx, "POST", "/_sim/runner/connect", body, http.StatusCreated, &sess); err != nil {
		return nil, err
	}
	c.session = sess.Session
	log = log.With("runner_id", sess.RunnerID, "runner_name", sess.RunnerName)
	log.Info("connected; listening for jobs")
	return &runner{c: c, path: "/_sim/runner/" + strconv.FormatInt(sess.RunnerID, 10), log: log}, nil
}

// disconnect ends the session, even when ctx is canceled.
func (r *runner) disconnect(ctx context.Context) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := r.c.do(dctx, "POST", r.path+"/disconnect", nil, http.StatusNoContent, nil); err != nil {
		r.log.Warn("disconnecting", "err", err)
	}
}

// waitForJob long-polls for the runner's one job for up to idle. Without a
// job (ok false) it has disconnected and code is the exit status.
func (r *runner) waitForJob(ctx context.Context, idle time.Duration) (job ghsim.RunnerJob, code int, ok bool) {
	deadline := time.Now().Add(idle)
	for job.ID == 0 {
		left := time.Until(deadline)
		if left <= 0 {
			r.log.Info("no job came; exiting", "idle", idle.String())
			r.disconnect(ctx)
			return job, exitOK, false
		}
		wait := min(left, ghsim.DefaultRunnerPoll)
		err := r.c.do(ctx, "GET", r.path+"/job?wait="+wait.String(), nil, http.StatusOK, &job)
		switch {
		case ctx.Err() != nil:
			r.disconnect(ctx)
			return job, exitFailed, false
		case errors.Is(err, errNoContent):
		case err != nil:
			r.log.Error("waiting for a job", "err", err)
			r.disconnect(ctx)
			return job, exitFailed, false
		}
	}
	return job, exitOK, true
}

// runJob does the job named name's work for cfg.Duration, or crashes or
// hangs as cfg says. When the job did not run to its end (ok false), code
// is the exit status.
func (r *runner) runJob(ctx context.Context, cfg Config, name string) (code int, ok bool) {
	work := cfg.workFor(name)
	held := hold(work.MiB)
	burnt := make(chan struct{})
	go burn(ctx, work.CPUSeconds, burnt)
	run := time.NewTimer(cfg.Duration)
	defer run.Stop()
	var done <-chan time.Time = run.C
	switch {
	case cfg.Crash:
		half := time.NewTimer(cfg.Duration / 2)
		defer half.Stop()
		select {
		case <-half.C:
			r.log.Error("crashing in the middle of the job (SKIFF_STANDIN_CRASH)")
			return exitCrash, false
		case <-ctx.Done():
			return exitFailed, false
		}
	case cfg.Hang != "":
		r.log.Warn("hanging: the job never finishes (SKIFF_STANDIN_HANG)")
		done = nil
	}
	if !waitOrStop(ctx, done) || !waitOrStop(ctx, burnt) {
		r.log.Warn("stopped in the middle of the job")
		r.disconnect(ctx)
		return exitFailed, false
	}
	runtime.KeepAlive(held)
	return exitOK, true
}

// waitOrStop waits for ch (forever when it is nil) and says whether it
// came before ctx was canceled.
func waitOrStop[T any](ctx context.Context, ch <-chan T) bool {
	select {
	case <-ch:
		return true
	case <-ctx.Done():
		return false
	}
}

// complete reports the job done with conclusion and disconnects; it
// returns the exit status.
func (r *runner) complete(ctx context.Context, jobID int64, conclusion string) int {
	defer r.disconnect(ctx)
	b, _ := json.Marshal(map[string]string{"conclusion": conclusion})
	err := r.c.do(ctx, "POST", fmt.Sprintf("%s/job/%d/complete", r.path, jobID), b, http.StatusNoContent, nil)
	var se *statusError
	switch {
	case errors.As(err, &se) && se.status == http.StatusConflict:
		r.log.Warn("the job ended before it completed here (cancelled)")
	case err != nil:
		r.log.Error("reporting the job complete", "err", err)
		return exitFailed
	default:
		r.log.Info("job completed", "conclusion", conclusion)
	}
	return exitOK
}

// hold allocates mib MiB and touches every page, so it is resident.
func hold(mib int) []byte {
	b := make([]byte, mib<<20)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	return b
}

// burn spends seconds of this process's CPU time (not wall time: on a busy
// machine it takes longer), then closes done; a canceled ctx stops it.
func burn(ctx context.Context, seconds float64, done chan<- struct{}) {
	defer close(done)
	var x [4096]byte
	for cpuTime() < seconds && ctx.Err() == nil {
		for i := range 1 << 20 {
			x[i%len(x)]++
		}
	}
	runtime.KeepAlive(&x)
}

// cpuTime is this process's CPU time so far, user and system.
func cpuTime() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// errNoContent: the simulator answered 204 (no job yet).
var errNoContent = errors.New("no content")

type statusError struct {
	status int
	msg    string
	reason string // the simulator's "reason" (a refused runner version)
}

func (e *statusError) Error() string { return fmt.Sprintf("status %d: %s", e.status, e.msg) }

type client struct {
	hc      *http.Client
	base    string
	session string
}

// do makes one call and decodes a want answer into out.
func (c *client) do(ctx context.Context, method, path string, body []byte, want int, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("building request: %w", err)
	}
	if c.session != "" {
		req.Header.Set("Authorization", "Bearer "+c.session)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("calling %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	switch {
	case resp.StatusCode == http.StatusNoContent && want != http.StatusNoContent:
		return errNoContent
	case resp.StatusCode != want:
		var m struct{ Message, Reason string }
		_ = json.Unmarshal(b, &m)
		return &statusError{status: resp.StatusCode, msg: m.Message, reason: m.Reason}
	case out != nil:
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("decoding %s %s: %w", method, path, err)
		}
	}
	return nil
}
