package container_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
)

// engine is a Podman service the tests started on a socket of their own,
// with a containers.conf, storage and networks in a temporary directory,
// and the test image built into it.
type engine struct {
	dir    string
	sock   string
	env    []string
	client *client.Client
	cmd    *exec.Cmd
}

// testImage is the image the tests build: the stand-in of testdata/runner.
const testImage = "localhost/skiff-container-test:1"

// shared is the engine of this test binary (TestMain starts it).
var shared *engine

// skipReason is why the engine could not start, for the tests to skip or fail with.
var skipReason string

func TestMain(m *testing.M) {
	e, err := startEngine()
	if err != nil {
		skipReason = err.Error()
	} else {
		shared = e
	}
	code := m.Run()
	if e != nil {
		e.stop()
	}
	os.Exit(code)
}

// needEngine returns the shared engine, or skips (fails under
// SKIFF_REQUIRE_EMULATORS) saying how to get one.
func needEngine(t *testing.T) *engine {
	t.Helper()
	if shared != nil {
		return shared
	}
	msg := "the container provider's tests need Podman with runc (apt-get install -y podman runc): " + skipReason
	if os.Getenv("SKIFF_REQUIRE_EMULATORS") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return nil
}

func startEngine() (*engine, error) {
	if runtime.GOOS != "linux" {
		return nil, fmt.Errorf("podman's service runs on Linux only")
	}
	podman, err := exec.LookPath("podman")
	if err != nil {
		return nil, fmt.Errorf("podman is not installed")
	}
	if _, err := exec.LookPath("runc"); err != nil {
		return nil, fmt.Errorf("runc is not installed")
	}
	dir, err := os.MkdirTemp("", "skiff-podman-")
	if err != nil {
		return nil, err
	}
	e := &engine{dir: dir, sock: filepath.Join(dir, "podman.sock")}
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
			return nil, err
		}
	}
	e.env = append(os.Environ(), "CONTAINERS_CONF="+conf, "CONTAINERS_STORAGE_CONF="+storage)
	if err := e.buildImage(podman); err != nil {
		e.stop()
		return nil, err
	}
	e.cmd = exec.Command(podman, "system", "service", "--time=0", "unix://"+e.sock)
	e.cmd.Env = e.env
	var logs bytes.Buffer
	e.cmd.Stdout, e.cmd.Stderr = &logs, &logs
	if err := e.cmd.Start(); err != nil {
		e.stop()
		return nil, fmt.Errorf("starting podman system service: %w", err)
	}
	e.client, err = client.New(client.WithHost("unix://"+e.sock), client.WithAPIVersionNegotiation())
	if err != nil {
		e.stop()
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		if _, err := e.client.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err == nil {
			return e, nil
		}
		select {
		case <-ctx.Done():
			e.stop()
			return nil, fmt.Errorf("podman's service did not answer on %s: %s", e.sock, logs.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// buildImage builds the stand-in and imports a root filesystem holding it.
func (e *engine) buildImage(podman string) error {
	return e.importImage(podman, testImage, map[string]string{"runner": "./testdata/runner"}, `ENTRYPOINT ["/runner"]`)
}

// importImage builds the Go packages (file name in the root → package),
// statically, into a root filesystem with a runner user's home and imports
// it as image with the change (its entrypoint).
func (e *engine) importImage(podman, image string, bins map[string]string, entrypoint string) error {
	rootfs, err := os.MkdirTemp(e.dir, "rootfs-")
	if err != nil {
		return err
	}
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
			return fmt.Errorf("building %s: %v: %s", pkg, err, out)
		}
	}
	tar := exec.Command("tar", "-C", rootfs, "-c", ".")
	imp := exec.Command(podman, "import", "--change", entrypoint, "--change", "USER 1001", "-", image)
	imp.Env = e.env
	pipe, err := tar.StdoutPipe()
	if err != nil {
		return err
	}
	imp.Stdin = pipe
	if err := tar.Start(); err != nil {
		return err
	}
	out, err := imp.CombinedOutput()
	if werr := tar.Wait(); err == nil {
		err = werr
	}
	if err != nil {
		return fmt.Errorf("importing %s: %v: %s", image, err, out)
	}
	return nil
}

func (e *engine) stop() {
	if e.client != nil {
		_ = e.client.Close()
	}
	if e.cmd != nil && e.cmd.Process != nil {
		_ = e.cmd.Process.Kill()
		_ = e.cmd.Wait()
	}
	// Tear down what the engine left (containers of a failed test, its
	// storage's mounts) before removing its directory.
	cmd := exec.Command("podman", "system", "reset", "--force")
	cmd.Env = e.env
	_ = cmd.Run()
	_ = exec.Command("umount", "-R", filepath.Join(e.dir, "graph")).Run()
	_ = os.RemoveAll(e.dir)
}

// podman runs the podman command against the test's storage.
func (e *engine) podman(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("podman", args...)
	cmd.Env = e.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("podman %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// labelImage builds, from the test image, an image whose labels are the
// test image's and labels (podman build: one LABEL layer, nothing run).
func (e *engine) labelImage(t *testing.T, image string, labels map[string]string) {
	t.Helper()
	dir := t.TempDir()
	file := "FROM " + testImage + "\n"
	for k, v := range labels {
		file += fmt.Sprintf("LABEL %s=%q\n", k, v)
	}
	if err := os.WriteFile(filepath.Join(dir, "Containerfile"), []byte(file), 0o644); err != nil {
		t.Fatal(err)
	}
	e.podman(t, "build", "--pull=never", "-q", "-t", image, dir)
}
