package container_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/moby/moby/client"

	"github.com/skiffci/skiff/internal/podman"
)

// engine is the Podman service the tests started (internal/podman), with
// the test image built into it.
type engine struct {
	*podman.Service
	env    []string
	client *client.Client
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
		e.Stop()
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
	s, err := podman.Start()
	if err != nil {
		return nil, err
	}
	e := &engine{Service: s, env: s.Env, client: s.Client}
	if err := e.Import(testImage, map[string]string{"runner": "./testdata/runner"}, `ENTRYPOINT ["/runner"]`); err != nil {
		s.Stop()
		return nil, err
	}
	return e, nil
}

// podman runs the podman command against the test's storage.
func (e *engine) podman(t *testing.T, args ...string) string {
	t.Helper()
	out, err := e.Podman(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
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
