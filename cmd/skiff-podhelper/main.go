// Command skiff-podhelper is the entrypoint of skiff's runner image on
// Kubernetes. It runs the runner with its just-in-time configuration, and
// when the runner exits it writes what the container used as the
// container's termination message, which the provider reads from the Pod's
// status (package podusage): peak memory and CPU time from the container's
// cgroup, and the GPUs' peaks from nvidia-smi where one is present
// (sampled every SKIFF_GPU_SAMPLE while the runner runs).
//
//	skiff-podhelper [RUNNER [ARGS...]]     (default RUNNER: /home/runner/run.sh)
//
// The configuration is read from the file named by SKIFF_JITCONFIG_FILE
// (the Secret the provider mounts) and handed to the runner in
// ACTIONS_RUNNER_INPUT_JITCONFIG, run.sh's variable for --jitconfig: never
// on a command line, never printed. The helper's own variables are not
// passed on. SIGTERM and SIGINT go to the runner, which cancels its job.
// The helper exits with the runner's status (128+signal when a signal
// ended it); 2 when it cannot start it.
//
// With SKIFF_PODHELPER_HOLD=1 the helper runs no runner: it waits for
// SIGTERM or SIGINT and exits 0. The provider's image pre-pull (a
// DaemonSet per pool) runs the runner image so, to keep it on every node
// its runners may use.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	// Refuses to compile with a Go older than the patched one.
	_ "github.com/skiffci/skiff/internal/gotoolchain"
	"github.com/skiffci/skiff/pkg/provider/podusage"
)

const (
	envJITFile   = "SKIFF_JITCONFIG_FILE"
	envJITConfig = "ACTIONS_RUNNER_INPUT_JITCONFIG"
	envMessage   = "SKIFF_TERMINATION_LOG"
	envCgroup    = "SKIFF_CGROUP_ROOT"
	envGPUSample = "SKIFF_GPU_SAMPLE"
	envHold      = "SKIFF_PODHELPER_HOLD"
	defaultRun   = "/home/runner/run.sh"
)

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	if os.Getenv(envHold) == "1" {
		return hold()
	}
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		args = []string{defaultRun}
	}
	msgFile := getenv(envMessage, "/dev/termination-log")
	fail := func(format string, a ...any) int {
		err := fmt.Sprintf(format, a...)
		fmt.Fprintln(os.Stderr, "skiff-podhelper:", err)
		_ = os.WriteFile(msgFile, podusage.Encode(podusage.Usage{ExitCode: 2, Error: err}), 0o644)
		return 2
	}
	file := os.Getenv(envJITFile)
	if file == "" {
		return fail("%s is not set: the pod has no registration", envJITFile)
	}
	jit, err := os.ReadFile(file)
	if err != nil {
		return fail("reading the registration: %v", err)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.Env = append(environ(), envJITConfig+"="+strings.TrimSpace(string(jit)))
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	if err := cmd.Start(); err != nil {
		return fail("starting the runner: %v", err)
	}
	ctx, stop := context.WithCancel(context.Background())
	gpus := make(chan []podusage.GPU, 1)
	go func() { gpus <- sampleGPUs(ctx) }()
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()
	werr := cmd.Wait()
	stop()
	u := podusage.Usage{ExitCode: exitCode(cmd, werr)}
	u.GPUs = <-gpus
	var merr error
	u.PeakMemoryBytes, u.CPUSeconds, merr = podusage.ReadCgroup(getenv(envCgroup, "/sys/fs/cgroup"))
	if merr != nil {
		u.Error = merr.Error()
	}
	if err := os.WriteFile(msgFile, podusage.Encode(u), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "skiff-podhelper: writing the termination message:", err)
	}
	return u.ExitCode
}

// hold waits for SIGTERM or SIGINT, running nothing: the pre-pull's
// container, which keeps the image on its node.
func hold() int {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	fmt.Println("skiff-podhelper: holding the image; SIGTERM ends it")
	<-sigs
	return 0
}

// environ is the helper's environment without its own variables.
func environ() []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k != envJITFile && k != envJITConfig && k != envMessage && k != envCgroup && k != envGPUSample && k != envHold {
			out = append(out, kv)
		}
	}
	return out
}

func exitCode(cmd *exec.Cmd, err error) int {
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return 2
	}
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return cmd.ProcessState.ExitCode()
}

// sampleGPUs samples nvidia-smi until ctx ends and returns each GPU's
// peaks; nil without nvidia-smi. The samples are the measurement, not a
// wait: a GPU's memory is free again once the job's processes exit.
func sampleGPUs(ctx context.Context) []podusage.GPU {
	smi, err := exec.LookPath("nvidia-smi")
	if err != nil {
		return nil
	}
	every, err := time.ParseDuration(getenv(envGPUSample, "5s"))
	if err != nil || every <= 0 {
		every = 5 * time.Second
	}
	var peaks []podusage.GPU
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		out, err := exec.Command(smi, "--query-gpu=index,memory.used,utilization.gpu", "--format=csv,noheader,nounits").Output()
		if err == nil {
			if s, err := podusage.ParseNvidiaSMI(out); err == nil {
				peaks = podusage.MaxGPUs(peaks, s)
			}
		}
		select {
		case <-ctx.Done():
			return peaks
		case <-tick.C:
		}
	}
}

func getenv(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
