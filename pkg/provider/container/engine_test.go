package container_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/moby/moby/client"

	"github.com/skiffci/skiff/internal/podman"
	"github.com/skiffci/skiff/internal/testenv"
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

// shared is the engine of this test binary, started by the first test
// that needs it (needEngine) and stopped by TestMain.
var shared struct {
	once sync.Once
	e    *engine
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.e != nil {
		shared.e.Stop()
	}
	os.Exit(code)
}

// needEngine returns the shared engine, starting it on first use and
// waiting for it as long as the test binary's -timeout allows. Without
// Podman it skips (fails under SKIFF_REQUIRE_EMULATORS) saying how to get
// one; an engine that failed to start fails every test that needs it.
func needEngine(tb testing.TB) *engine {
	tb.Helper()
	shared.once.Do(func() {
		ctx, cancel := testenv.AwaitContext(tb)
		defer cancel()
		shared.e, shared.err = startEngine(ctx)
	})
	switch {
	case shared.err == nil:
		return shared.e
	case errors.Is(shared.err, podman.ErrMissing) && os.Getenv("SKIFF_REQUIRE_EMULATORS") == "":
		tb.Skip("the container provider's tests need Podman with runc (apt-get install -y podman runc): " + shared.err.Error())
	default:
		tb.Fatalf("starting the tests' Podman service: %v", shared.err)
	}
	return nil
}

func startEngine(ctx context.Context) (*engine, error) {
	s, err := podman.Start(ctx)
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
