package testenv

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// WriteExecutable writes an executable (mode 0755, its directory made as
// needed) that the test, or a process it starts, runs soon after.
//
// Tests run in parallel, and a process another goroutine forks while the
// file is open for writing inherits the descriptor until it execs: an exec
// of the file in that moment fails with ETXTBSY, "text file busy"
// (golang/go#22315). WriteExecutable holds syscall.ForkLock for reading
// while the file is open; os/exec forks holding it for writing, and on
// Linux returns only once the child has exec'd (and so closed the
// close-on-exec descriptors it inherited), so no child can hold the file.
func WriteExecutable(t testing.TB, path string, content []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	syscall.ForkLock.RLock()
	err := os.WriteFile(path, content, 0o755)
	syscall.ForkLock.RUnlock()
	if err != nil {
		t.Fatal(err)
	}
}
