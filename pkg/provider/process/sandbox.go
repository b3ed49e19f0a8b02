package process

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"
)

// The sandbox. A runner of a pool that does not opt out (process.sandbox:
// none) runs in a bubblewrap (bwrap) sandbox of its own:
//
//	skiff ── bwrap (the monitor: skiff's child, the runner's pid in its
//	          │     record; exits with the runner command's exit code)
//	          └─ bwrap init: pid 1 of the runner's pid namespace, leader of
//	               │         its session and process group (the group the
//	               │         provider signals)
//	               └─ the runner command (pid 2) and everything it starts
//
// Mounts: the host's file system read-only; over it a fresh /dev (no
// devices but null, zero, random, tty and the NVIDIA GPUs), the sandbox's
// own /proc, empty private /tmp, /var/tmp and /dev/shm; empty directories
// over skiff's data directory, its log directory, the home directories
// and Options.Hide; then the runner's work directory, writable, at its own
// path, and the directories of the runner command and of the files its
// arguments name read-only where a hidden path covered them. An Actions runner install (a directory with
// bin/Runner.Listener) is seen at its path as a directory of the runner's
// own: each of its entries bound read-only, and what the runner writes
// there (the registration the JIT configuration holds, _diag, _work,
// run-helper.sh) kept in the work directory, never shared by two runners.
//
// Namespaces: user (no capabilities, no further user namespaces), pid,
// ipc, uts and cgroup; the network is the host's (the runner talks to
// GitHub). A new session, so the runner has no controlling terminal to
// push input into.
//
// The runner command's end ends the sandbox: its init dies when the
// provider kills the runner's group, and the kernel kills every process
// left in a pid namespace whose init dies, whatever group or session it
// moved to. No parent-death signal: a sandbox outlives a kill -9 of skiff
// and is adopted like any runner.

// sandboxSkip are the entries of an Actions runner install that the
// runner writes itself: they are not bound into a runner's own view of it.
var sandboxSkip = []string{".runner", ".credentials", ".credentials_rsaparams", "_diag", "_work", "run-helper.sh"}

// sandbox is what a provider needs to start runners in bwrap.
type sandbox struct {
	bwrap   string   // bwrap's path
	hide    []string // absolute paths not shown, parents before children
	cmdDir  string   // the runner command's directory
	argDirs []string // the directories of the files its arguments name
	install bool     // cmdDir is an Actions runner install
	gpus    []string // the host's NVIDIA device nodes
	// weaken, when set, rewrites the arguments (tests plant a weakening).
	weaken func([]string) []string
}

// newSandbox finds bwrap (path, else on PATH) and lays out what a runner
// of command cmd with arguments args sees; hide lists the paths it must
// not see.
func newSandbox(path, cmd string, args, hide []string) (*sandbox, error) {
	if path == "" {
		path = "bwrap"
	}
	bw, err := exec.LookPath(path)
	if err != nil {
		return nil, fmt.Errorf("bubblewrap (bwrap) is not installed here (apt-get install bubblewrap): %w", err)
	}
	s := &sandbox{bwrap: bw, cmdDir: filepath.Dir(cmd)}
	for _, a := range args {
		if fi, err := os.Stat(a); err == nil && filepath.IsAbs(a) && !fi.IsDir() {
			s.argDirs = append(s.argDirs, filepath.Dir(a))
		}
	}
	if fi, err := os.Stat(filepath.Join(s.cmdDir, "bin", "Runner.Listener")); err == nil && !fi.IsDir() {
		s.install = true
	}
	home, _ := os.UserHomeDir()
	// The shadow files: a runner of skiff run as root is root (without
	// capabilities) in its sandbox, and would read them.
	for _, h := range append([]string{"/home", "/root", home, "/etc/shadow", "/etc/gshadow"}, hide...) {
		if h == "" {
			continue
		}
		abs, err := filepath.Abs(h)
		if err != nil {
			continue
		}
		if _, err := os.Stat(abs); err != nil {
			continue // nothing there to hide, and no mount point for bwrap
		}
		s.hide = append(s.hide, abs)
	}
	sort.Slice(s.hide, func(i, j int) bool { return len(s.hide[i]) < len(s.hide[j]) })
	s.hide = slices.Compact(s.hide)
	s.gpus, _ = filepath.Glob("/dev/nvidia*")
	return s, nil
}

// under reports whether path is dir or inside it.
func under(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, strings.TrimSuffix(dir, "/")+"/")
}

// args are bwrap's arguments for a runner whose work directory is dir,
// up to the "--" before the command; infoFD is the descriptor bwrap
// writes the sandbox's init's pid to.
func (s *sandbox) args(dir string, infoFD int) ([]string, error) {
	a := []string{
		"--unshare-user", "--disable-userns", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
		"--cap-drop", "ALL", "--new-session",
		"--ro-bind", "/", "/",
		"--dev", "/dev", "--proc", "/proc",
		"--tmpfs", "/tmp", "--tmpfs", "/dev/shm",
	}
	private := []string{"/tmp", "/dev/shm"}
	if fi, err := os.Stat("/var/tmp"); err == nil && fi.IsDir() {
		a = append(a, "--tmpfs", "/var/tmp")
		private = append(private, "/var/tmp")
	}
	covered := func(p string) bool {
		for _, h := range append(private, s.hide...) {
			if under(p, h) {
				return true
			}
		}
		return false
	}
	for i, h := range s.hide {
		if slices.ContainsFunc(private, func(d string) bool { return under(h, d) }) ||
			slices.ContainsFunc(s.hide[:i], func(d string) bool { return under(h, d) }) {
			continue // inside an empty directory already
		}
		fi, err := os.Stat(h)
		switch {
		case err != nil:
			continue
		case fi.IsDir():
			a = append(a, "--tmpfs", h)
		default:
			a = append(a, "--ro-bind", "/dev/null", h)
		}
	}
	switch {
	case s.install:
		own := filepath.Join(dir, ".runner-install")
		if err := os.Mkdir(own, 0o700); err != nil {
			return nil, fmt.Errorf("creating the runner's view of its install: %w", err)
		}
		ents, err := os.ReadDir(s.cmdDir)
		if err != nil {
			return nil, fmt.Errorf("reading the runner install: %w", err)
		}
		a = append(a, "--bind", own, s.cmdDir)
		for _, e := range ents {
			if !slices.Contains(sandboxSkip, e.Name()) {
				p := filepath.Join(s.cmdDir, e.Name())
				a = append(a, "--ro-bind", p, p)
			}
		}
	case covered(s.cmdDir):
		a = append(a, "--ro-bind", s.cmdDir, s.cmdDir)
	}
	for _, d := range s.argDirs {
		if covered(d) && d != s.cmdDir {
			a = append(a, "--ro-bind", d, d)
		}
	}
	a = append(a, "--bind", dir, dir)
	for _, g := range s.gpus {
		a = append(a, "--dev-bind", g, g)
	}
	a = append(a, "--chdir", dir, "--info-fd", fmt.Sprint(infoFD))
	if s.weaken != nil {
		a = s.weaken(a)
	}
	return a, nil
}

// command builds the command that runs argv in the sandbox, in work
// directory dir, and the pipe bwrap writes the sandbox's init's pid to
// (read it with sandboxInit after the start; close both ends).
func (s *sandbox) command(dir string, argv []string) (*exec.Cmd, *os.File, *os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, nil, err
	}
	a, err := s.args(dir, 3) // ExtraFiles[0]
	if err != nil {
		r.Close()
		w.Close()
		return nil, nil, nil, err
	}
	cmd := exec.Command(s.bwrap, append(append(a, "--"), argv...)...)
	cmd.ExtraFiles = []*os.File{w}
	return cmd, r, w, nil
}

// sandboxInit reads the pid of the sandbox's init from bwrap's info
// pipe: bwrap writes it once the sandbox's namespaces exist, and closes
// the pipe (at once, with nothing, when it fails before that).
func sandboxInit(r io.Reader) (int, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return 0, fmt.Errorf("reading bwrap's info: %w", err)
	}
	var info struct {
		ChildPID int `json:"child-pid"`
	}
	if err := json.Unmarshal(b, &info); err != nil || info.ChildPID <= 0 {
		return 0, errors.New("bwrap did not start the sandbox (see the runner's log)")
	}
	return info.ChildPID, nil
}

// probe starts one sandbox as a runner's would be, around true, in a
// throwaway work directory under parent, and returns why it failed.
func (s *sandbox) probe(parent string) error {
	dir, err := os.MkdirTemp(parent, ".sandbox-probe-")
	if err != nil {
		return fmt.Errorf("creating the sandbox probe's directory: %w", err)
	}
	defer os.RemoveAll(dir)
	truePath, err := exec.LookPath("true")
	if err != nil {
		return fmt.Errorf("finding true for the sandbox probe: %w", err)
	}
	cmd, r, w, err := s.command(dir, []string{truePath})
	if err != nil {
		return err
	}
	defer r.Close()
	out, err := func() ([]byte, error) {
		defer w.Close()
		return cmd.CombinedOutput()
	}()
	if err != nil {
		return fmt.Errorf("bwrap cannot start a sandbox here (%v): %s", err, strings.TrimSpace(string(out)))
	}
	if init, err := sandboxInit(r); err == nil {
		waitOrphan(init, time.Minute) // adopted, should this process reap its orphans
	}
	return nil
}

// CheckSandbox reports whether this machine can start a runner's sandbox
// with bwrap (bwrap, else "bwrap" on PATH): nil when it can, else why not,
// in words for an operator.
func CheckSandbox(bwrap string) error {
	truePath, err := exec.LookPath("true")
	if err != nil {
		return err
	}
	s, err := newSandbox(bwrap, truePath, nil, nil)
	if err != nil {
		return err
	}
	return s.probe(os.TempDir())
}
