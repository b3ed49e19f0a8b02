package slurm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"

	"github.com/skiffci/skiff/pkg/provider"
)

// Commander runs one Slurm client command (sbatch, squeue, sacct, scancel)
// and returns its standard output. A command that fails returns an
// *ExitError with its standard error; a command that cannot start (not
// installed) returns the start error.
type Commander interface {
	Run(ctx context.Context, name string, args []string, stdin []byte) ([]byte, error)
}

// ExitError is a Slurm command that ran and failed.
type ExitError struct {
	Command string
	Code    int
	Stderr  string
}

// Error renders the command and what it said.
func (e *ExitError) Error() string {
	return fmt.Sprintf("%s exited %d: %s", e.Command, e.Code, strings.TrimSpace(e.Stderr))
}

// Exec runs the commands on this machine, with Env added to this process's
// environment (say SLURM_CONF=...) and Dir as their working directory.
type Exec struct {
	Env []string
	Dir string
}

// Run implements Commander.
func (x Exec) Run(ctx context.Context, name string, args []string, stdin []byte) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	if len(x.Env) > 0 {
		cmd.Env = append(cmd.Environ(), x.Env...)
	}
	cmd.Dir = x.Dir
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return stdout.Bytes(), &ExitError{Command: name, Code: ee.ExitCode(), Stderr: stderr.String()}
	}
	if err != nil {
		return nil, err
	}
	return stdout.Bytes(), nil
}

// The messages of Slurm's commands that classify a failure (slurm_strerror
// texts, as sbatch and squeue print them after "error: ").
var (
	invalidMessages = []string{
		"Invalid partition name specified",
		"Invalid account or account/partition combination specified",
		"Invalid qos specification",
		"Invalid generic resource (gres) specification",
		"Invalid feature specification",
		"Requested reservation is invalid",
		"Access denied to requested reservation",
		"Requested node configuration is not available",
		"Requested time limit is invalid",
		"Memory required by task is not available",
		"Invalid user id",
		"Invalid group id",
		"User's group not permitted to use this partition",
		"Access/permission denied",
		"Job rejected by job_submit plugin",
		"unrecognized option",
		"invalid option",
		"invalid partition specified",
	}
	quotaMessages = []string{
		"Job violates accounting/QOS policy",
		"job submit limit",
		"MaxSubmitJobs",
		"temporarily unable to accept job",
		"Too many jobs",
	}
	capacityMessages = []string{
		"Required partition not available (inactive or drain)",
		"Partition in standby mode",
		"Nodes required for job are DOWN, DRAINED or reserved",
	}
	transientMessages = []string{
		"Unable to contact slurm controller",
		"Socket timed out on send/recv operation",
		"Connection refused",
		"Zero Bytes were transmitted or received",
		"Slurm backup controller in standby mode",
		"Communication connection failure",
		"slurm_load_jobs error",
		"Protocol authentication error",
	}
)

// classify turns a command's failure into a provider error of one of the
// neutral kinds, keeping Slurm's message: an invalid partition, account,
// QOS, reservation, gres or size is a final ErrInvalid; a submit limit is
// ErrQuota (wait); an unavailable partition is ErrCapacity; a controller
// that does not answer, a timeout and anything unrecognised are
// ErrTransient. A missing command is a final ErrInvalid (the operator
// installs Slurm's clients).
func classify(what string, err error) error {
	if err == nil {
		return nil
	}
	var ee *ExitError
	if !errors.As(err, &ee) {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return &provider.Error{Kind: provider.ErrTransient, Code: "Timeout", Message: what + ": " + err.Error()}
		}
		if errors.Is(err, exec.ErrNotFound) {
			return &provider.Error{Kind: provider.ErrInvalid, Code: "NoSlurmClient", Final: true, Message: what + ": " + err.Error(),
				Detail: "install Slurm's client commands (sbatch, squeue, sacct, scancel) on the login node skiff runs on"}
		}
		return &provider.Error{Kind: provider.ErrTransient, Code: "CommandFailed", Message: what + ": " + err.Error()}
	}
	msg := slurmMessage(ee.Stderr)
	has := func(list []string) bool {
		for _, m := range list {
			if strings.Contains(strings.ToLower(ee.Stderr), strings.ToLower(m)) {
				return true
			}
		}
		return false
	}
	switch {
	case has(transientMessages):
		return &provider.Error{Kind: provider.ErrTransient, Code: "ControllerUnavailable", Message: what + ": " + msg}
	case has(quotaMessages):
		return &provider.Error{Kind: provider.ErrQuota, Code: "SubmitLimit", Message: what + ": " + msg,
			Detail: "the site's submit limit (QOS MaxSubmitJobs, MaxJobCount) is reached; jobs wait until runners end"}
	case has(capacityMessages):
		return &provider.Error{Kind: provider.ErrCapacity, Code: "PartitionUnavailable", Message: what + ": " + msg}
	case has(invalidMessages):
		return &provider.Error{Kind: provider.ErrInvalid, Code: "InvalidRequest", Final: true, Message: what + ": " + msg,
			Detail: "check the pool's slurm section (partition, account, qos, reservation, gres, sizes) against the site's configuration"}
	}
	return &provider.Error{Kind: provider.ErrTransient, Code: "CommandFailed", Message: what + ": " + msg}
}

// slurmMessage is what a failed command said, in one line: its error
// lines without the command's prefix.
func slurmMessage(stderr string) string {
	var out []string
	for _, l := range strings.Split(stderr, "\n") {
		l = strings.TrimSpace(l)
		if l == "" {
			continue
		}
		if _, rest, ok := strings.Cut(l, "error: "); ok {
			l = rest
		}
		out = append(out, l)
	}
	if len(out) == 0 {
		return "failed without a message"
	}
	return strings.Join(out, "; ")
}
