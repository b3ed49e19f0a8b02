// Package podman starts a Podman service of its own — its Docker-compatible
// API on a socket in a temporary directory, with a containers.conf and
// storage there too — and builds images into it from Go packages without a
// registry. The container provider's tests, skiff local's kill -9 test on
// the container backend and `skiff-demo --provider container` use it.
//
// The configuration is what these machines need: the runc runtime (crun
// refuses a hybrid cgroup layout), cgroupfs as the cgroup manager (no
// systemd session), vfs storage, and nofile/nproc default ulimits no higher
// than the host's hard limits.
package podman

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/moby/moby/client"
)

// Service is a Podman service Start started.
type Service struct {
	// Dir holds the service's socket, configuration and storage.
	Dir string
	// Socket is the path of the service's Docker-compatible API socket
	// (DOCKER_HOST=unix://Socket).
	Socket string
	// Env is this process's environment with the service's configuration:
	// a podman command run with it sees the service's storage.
	Env []string
	// Client talks to the service.
	Client *client.Client
	cmd    *exec.Cmd
	exited chan struct{} // closed once the service process has ended
}

// ErrMissing is returned by Start when Podman or runc is not installed (or
// the OS is not Linux): the caller may skip, saying how to get them.
var ErrMissing = fmt.Errorf("podman with runc is needed (apt-get install -y podman runc)")

// Start starts a Podman service with storage and configuration in a new
// temporary directory; Stop ends it and removes what it made. It waits for
// the service to answer until ctx ends (a first start on a loaded machine
// migrates its fresh storage in seconds): the caller chooses the bound, a
// command a minute, a test its binary's -timeout. A service that exits
// before it answers fails at once, with its output.
func Start(ctx context.Context) (*Service, error) {
	if runtime.GOOS != "linux" {
		return nil, fmt.Errorf("%w: podman's service runs on Linux only", ErrMissing)
	}
	podman, err := exec.LookPath("podman")
	if err != nil {
		return nil, fmt.Errorf("%w: podman is not installed", ErrMissing)
	}
	if _, err := exec.LookPath("runc"); err != nil {
		return nil, fmt.Errorf("%w: runc is not installed", ErrMissing)
	}
	dir, err := os.MkdirTemp("", "skiff-podman-")
	if err != nil {
		return nil, fmt.Errorf("creating the service's directory: %w", err)
	}
	s := &Service{Dir: dir, Socket: filepath.Join(dir, "podman.sock")}
	conf := filepath.Join(dir, "containers.conf")
	storage := filepath.Join(dir, "storage.conf")
	files := map[string]string{
		conf: fmt.Sprintf(`[containers]
default_ulimits = ["nofile=20000:20000", "nproc=4096:4096"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "%[1]s/events.log"
tmp_dir = "%[1]s/tmp"
volume_path = "%[1]s/volumes"
[network]
network_config_dir = "%[1]s/networks"
`, dir),
		storage: fmt.Sprintf("[storage]\ndriver = \"vfs\"\ngraphroot = \"%[1]s/graph\"\nrunroot = \"%[1]s/run\"\n", dir),
	}
	for p, body := range files {
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			s.Stop()
			return nil, fmt.Errorf("writing the service's configuration: %w", err)
		}
	}
	s.Env = append(os.Environ(), "CONTAINERS_CONF="+conf, "CONTAINERS_STORAGE_CONF="+storage)
	s.cmd = exec.Command(podman, "system", "service", "--time=0", "unix://"+s.Socket)
	s.cmd.Env = s.Env
	var logs bytes.Buffer // read only once the process has ended (Stop waits for it)
	s.cmd.Stdout, s.cmd.Stderr = &logs, &logs
	if err := s.cmd.Start(); err != nil {
		s.Stop()
		return nil, fmt.Errorf("starting podman system service: %w", err)
	}
	s.exited = make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(s.exited) }()
	s.Client, err = client.New(client.WithHost("unix://" + s.Socket))
	if err != nil {
		s.Stop()
		return nil, fmt.Errorf("creating the engine's client: %w", err)
	}
	for {
		if _, err := s.Client.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err == nil {
			return s, nil
		}
		select {
		case <-ctx.Done():
			s.Stop()
			return nil, fmt.Errorf("podman's service did not answer on %s before %v: %s", s.Socket, context.Cause(ctx), logs.String())
		case <-s.exited:
			s.Stop()
			return nil, fmt.Errorf("podman's service exited before it answered on %s (%v): %s", s.Socket, s.cmd.ProcessState, logs.String())
		case <-time.After(50 * time.Millisecond): // polling the service's socket
		}
	}
}

// ImportStandinRunner imports as image the runner image of the tests and
// the demo: skiff's entrypoint (skiff-podhelper) around the stand-in
// runner, with more changes (ENV) when given.
func (s *Service) ImportStandinRunner(image string, changes ...string) error {
	return s.Import(image, map[string]string{
		"skiff-podhelper": "github.com/skiffci/skiff/cmd/skiff-podhelper",
		"skiff-standin":   "github.com/skiffci/skiff/cmd/skiff-standin",
	}, append([]string{`ENTRYPOINT ["/skiff-podhelper", "--", "/skiff-standin"]`}, changes...)...)
}

// Import builds the Go packages of bins (file name in the image's root →
// package path), statically, into a root filesystem with a runner user
// (1001) and its home, and imports it into the service's storage as image,
// with changes (Dockerfile instructions: its ENTRYPOINT, ENV). The packages
// are built from the current directory's module.
func (s *Service) Import(image string, bins map[string]string, changes ...string) error {
	rootfs, err := os.MkdirTemp(s.Dir, "rootfs-")
	if err != nil {
		return fmt.Errorf("creating the image's root: %w", err)
	}
	defer os.RemoveAll(rootfs)
	if err := os.Chmod(rootfs, 0o755); err != nil { // the image's /
		return err
	}
	for _, d := range []string{"home/runner", "tmp", "run", "etc", "proc", "sys", "dev"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			return err
		}
	}
	_ = os.Chmod(filepath.Join(rootfs, "tmp"), 0o1777)
	_ = os.Chmod(filepath.Join(rootfs, "home/runner"), 0o777)
	if err := os.WriteFile(filepath.Join(rootfs, "etc/passwd"), []byte("root:x:0:0::/root:/sbin/nologin\nrunner:x:1001:1001::/home/runner:/sbin/nologin\n"), 0o644); err != nil {
		return err
	}
	for name, pkg := range bins {
		build := exec.Command("go", "build", "-o", filepath.Join(rootfs, name), pkg)
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			return fmt.Errorf("building %s: %w: %s", pkg, err, out)
		}
	}
	tar := exec.Command("tar", "-C", rootfs, "-c", ".")
	args := []string{"import", "--change", "USER 1001"}
	for _, c := range changes {
		args = append(args, "--change", c)
	}
	imp := exec.Command("podman", append(args, "-", image)...)
	imp.Env = s.Env
	pipe, err := tar.StdoutPipe()
	if err != nil {
		return err
	}
	imp.Stdin = pipe
	if err := tar.Start(); err != nil {
		return fmt.Errorf("packing the image's root: %w", err)
	}
	out, err := imp.CombinedOutput()
	if werr := tar.Wait(); err == nil {
		err = werr
	}
	if err != nil {
		return fmt.Errorf("importing %s: %w: %s", image, err, out)
	}
	return nil
}

// Podman runs the podman command with args against the service's storage
// and returns its output.
func (s *Service) Podman(args ...string) (string, error) {
	cmd := exec.Command("podman", args...)
	cmd.Env = s.Env
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("podman %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// PID is the service process's id, 0 once stopped.
func (s *Service) PID() int {
	if s.exited == nil {
		return 0
	}
	select {
	case <-s.exited:
		return 0
	default:
		return s.cmd.Process.Pid
	}
}

// Stop ends the service, removes what it left (containers, its storage's
// mounts) and its directory.
func (s *Service) Stop() {
	if s.Client != nil {
		_ = s.Client.Close()
	}
	if s.exited != nil {
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
	cmd := exec.Command("podman", "system", "reset", "--force")
	cmd.Env = s.Env
	_ = cmd.Run()
	_ = exec.Command("umount", "-R", filepath.Join(s.Dir, "graph")).Run()
	_ = os.RemoveAll(s.Dir)
}
