package local_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skiffci/skiff/internal/local"
	"github.com/skiffci/skiff/pkg/names"
)

// TestDeployment: a data directory's deployment id is kept in it: derived
// from its path the first time (two directories, two ids), given once and
// then required to stay, never silently changed.
func TestDeployment(t *testing.T) {
	t.Parallel()
	a, b := t.TempDir(), t.TempDir()
	idA, err := local.Deployment(a, "")
	if err != nil {
		t.Fatal(err)
	}
	idB, err := local.Deployment(b, "")
	if err != nil {
		t.Fatal(err)
	}
	if !names.ValidDeployment(idA) || !strings.HasPrefix(idA, "local-") || idA == idB {
		t.Errorf("derived ids %q and %q: want two valid local- ids", idA, idB)
	}
	if again, err := local.Deployment(a, ""); err != nil || again != idA {
		t.Errorf("read again: %q, %v; want the kept %q", again, err, idA)
	}
	if _, err := local.Deployment(a, "other"); err == nil || !strings.Contains(err.Error(), idA) {
		t.Errorf("another id for a kept directory: %v, want an error naming %q", err, idA)
	}
	given := filepath.Join(t.TempDir(), "given")
	if err := mkdir(given); err != nil {
		t.Fatal(err)
	}
	if id, err := local.Deployment(given, "ci-runners"); err != nil || id != "ci-runners" {
		t.Errorf("given id: %q, %v", id, err)
	}
	if id, err := local.Deployment(given, ""); err != nil || id != "ci-runners" {
		t.Errorf("given id read back: %q, %v", id, err)
	}
	if _, err := local.Deployment(t.TempDir(), "9 lives"); err == nil {
		t.Error("an id unusable in a tag was accepted")
	}
	if got := local.SlurmNamePrefix("ci-runners"); got != "skiff.ci-runners." {
		t.Errorf("Slurm name prefix %q", got)
	}
}

func mkdir(path string) error { return os.MkdirAll(path, 0o700) }
