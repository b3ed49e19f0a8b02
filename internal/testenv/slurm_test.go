package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// TestMariaDBOwnTmpdir installs MariaDB while a sweeper deletes "#sql*"
// files from $TMPDIR, as another cluster's MariaDB server does in its
// temporary directory when it starts. Left on the shared default, the
// install loses its temporary tables and fails, as it once did in CI.
func TestMariaDBOwnTmpdir(t *testing.T) {
	if _, err := exec.LookPath("mariadb-install-db"); err != nil {
		Missing(t, "mariadb-install-db", MariaDBInstall)
	}
	shared := t.TempDir()
	t.Setenv("TMPDIR", shared)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			names, _ := filepath.Glob(filepath.Join(shared, "#sql*"))
			for _, n := range names {
				_ = os.Remove(n)
			}
		}
	}()
	data, tmp, err := installMariaDB(t.TempDir())
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(data, "mysql", "user.frm")); err != nil {
		t.Errorf("no user table after install: %v", err)
	}
	if filepath.Dir(tmp) != filepath.Dir(data) {
		t.Errorf("temporary directory %s is not beside the data directory %s", tmp, data)
	}
}
