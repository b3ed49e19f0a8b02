// Package testenv finds the emulators and fixtures that integration tests use,
// and decides whether a missing one skips the test or fails it.
//
// Locally a missing emulator skips the test with a message saying how to get it.
// Under `make test` (SKIFF_REQUIRE_EMULATORS=1, set by the Makefile) and in CI
// (CI=true) it fails the test, so a missing install step cannot pass as green.
package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// Required reports whether missing emulators must fail tests instead of skipping them.
func Required() bool {
	return os.Getenv("SKIFF_REQUIRE_EMULATORS") == "1" || os.Getenv("CI") == "true"
}

// Missing skips or fails t, explaining what is missing and how to install it.
func Missing(t testing.TB, what, how string) {
	t.Helper()
	if Required() {
		t.Fatalf("%s is required here but missing: %s", what, how)
	}
	t.Skipf("%s not found; %s (make test installs it)", what, how)
}

// Root is the repository root: the directory holding go.mod.
func Root(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("locating the repository root: runtime.Caller failed")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// LookTool finds an executable on PATH or in the Go install directory
// ($GOBIN, else $GOPATH/bin), where `go install` puts the emulators.
func LookTool(t testing.TB, name, how string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	dirs := []string{os.Getenv("GOBIN")}
	if gp, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		for _, d := range filepath.SplitList(string(trimNL(gp))) {
			dirs = append(dirs, filepath.Join(d, "bin"))
		}
	}
	for _, d := range dirs {
		if d == "" {
			continue
		}
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p
		}
	}
	Missing(t, name, how)
	return ""
}

// NodeModule returns the path of an installed npm package directory under
// node_modules at the repository root, or skips/fails when `npm ci` has not run.
func NodeModule(t testing.TB, pkg string) string {
	t.Helper()
	dir := filepath.Join(Root(t), "node_modules", filepath.FromSlash(pkg))
	if _, err := os.Stat(dir); err != nil {
		Missing(t, "npm package "+pkg, "run `npm ci` at the repository root")
	}
	return dir
}

func trimNL(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}
