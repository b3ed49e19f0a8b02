package main

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/provider/podusage"
)

// TestHelper runs the built helper around a shell-script runner: the
// runner gets the configuration in its environment (not its arguments),
// the helper's own variables are not passed on, and the termination
// message holds the runner's exit status and the cgroup's figures.
func TestHelper(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	helper := buildHelper(t, dir)
	jit := filepath.Join(dir, "jitconfig")
	if err := os.WriteFile(jit, []byte("CANARYPOD\n"), 0o400); err != nil {
		t.Fatal(err)
	}
	cg := filepath.Join(dir, "cgroup")
	if err := os.MkdirAll(cg, 0o755); err != nil {
		t.Fatal(err)
	}
	_ = os.WriteFile(filepath.Join(cg, "cpu.stat"), []byte("usage_usec 2000000\n"), 0o644)
	_ = os.WriteFile(filepath.Join(cg, "memory.peak"), []byte("4096\n"), 0o644)
	seen := filepath.Join(dir, "seen")
	runner := filepath.Join(dir, "run.sh")
	script := "#!/bin/sh\n{ echo \"jit=$ACTIONS_RUNNER_INPUT_JITCONFIG\"; echo \"file=$SKIFF_JITCONFIG_FILE\"; echo \"args=$*\"; } > " + seen + "\nexit 7\n"
	testenv.WriteExecutable(t, runner, []byte(script))
	msg := filepath.Join(dir, "termination-log")
	cmd := exec.Command(helper, runner, "--once")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "SKIFF_JITCONFIG_FILE=" + jit, "SKIFF_TERMINATION_LOG=" + msg, "SKIFF_CGROUP_ROOT=" + cg}
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 7 {
		t.Fatalf("helper: %v (%s), want the runner's exit 7", err, out)
	}
	if strings.Contains(string(out), "CANARYPOD") {
		t.Error("the configuration was printed")
	}
	b, _ := os.ReadFile(seen)
	if got := string(b); got != "jit=CANARYPOD\nfile=\nargs=--once\n" {
		t.Errorf("the runner saw %q", got)
	}
	m, _ := os.ReadFile(msg)
	u, err := podusage.Decode(string(m))
	if err != nil || u.ExitCode != 7 || u.PeakMemoryBytes != 4096 || u.CPUSeconds != 2 || u.Error != "" {
		t.Errorf("termination message %s: %+v %v", m, u, err)
	}

	// Without its file the helper says so in the message and exits 2.
	cmd = exec.Command(helper, runner)
	cmd.Env = []string{"SKIFF_TERMINATION_LOG=" + msg}
	if err := cmd.Run(); err == nil || cmd.ProcessState.ExitCode() != 2 {
		t.Errorf("no configuration: %v, want exit 2", err)
	}
	m, _ = os.ReadFile(msg)
	if u, err := podusage.Decode(string(m)); err != nil || !strings.Contains(u.Error, "SKIFF_JITCONFIG_FILE") {
		t.Errorf("message %s, want the missing variable named", m)
	}
}

// TestHold: with SKIFF_PODHELPER_HOLD=1 the helper runs no runner (the
// pre-pull's container) and exits 0 on SIGTERM.
func TestHold(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	helper := buildHelper(t, dir)
	ran := filepath.Join(dir, "ran")
	runner := filepath.Join(dir, "run.sh")
	testenv.WriteExecutable(t, runner, []byte("#!/bin/sh\ntouch "+ran+"\n"))
	cmd := exec.Command(helper, runner)
	cmd.Env = []string{"SKIFF_PODHELPER_HOLD=1", "SKIFF_TERMINATION_LOG=" + filepath.Join(dir, "msg")}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The helper says it holds once its signal handler is in place: a
	// SIGTERM before that would kill it with the signal, not exit 0.
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.Contains(line, "holding") {
		t.Fatalf("the helper said %q (%v), want that it holds", line, err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, out)
	if err := cmd.Wait(); err != nil {
		t.Errorf("holding helper after SIGTERM: %v, want exit 0", err)
	}
	if _, err := os.Stat(ran); err == nil {
		t.Error("the holding helper ran the runner")
	}
}

// buildHelper builds the helper into dir and returns its path.
func buildHelper(t *testing.T, dir string) string {
	t.Helper()
	helper := filepath.Join(dir, "skiff-podhelper")
	if b, err := exec.Command("go", "build", "-o", helper, ".").CombinedOutput(); err != nil {
		t.Fatalf("building: %v\n%s", err, b)
	}
	return helper
}
