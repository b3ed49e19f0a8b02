package gotoolchain_test

import (
	"bufio"
	"bytes"
	"go/version"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/skiffci/skiff/internal/gotoolchain"
	"github.com/skiffci/skiff/internal/testenv"
)

// guardIdent is the identifier old.go names: the words a user sees.
const guardIdent = "skiff_needs_Go_1_27_3_or_later__install_it_or_set_GOTOOLCHAIN_go1_27_3"

// TestGoLine: go.mod's go line is Required, so the go command refuses an
// older toolchain, patch level included.
func TestGoLine(t *testing.T) {
	t.Parallel()
	f, err := os.Open(filepath.Join(testenv.Root(t), "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var line string
	for s := bufio.NewScanner(f); s.Scan(); {
		if v, ok := strings.CutPrefix(s.Text(), "go "); ok {
			line = "go" + strings.TrimSpace(v)
		}
	}
	if line != gotoolchain.Required {
		t.Errorf("go.mod's go line is %q, want %s", line, gotoolchain.Required)
	}
	if !strings.Contains(guardIdent, strings.ReplaceAll(strings.TrimPrefix(gotoolchain.Required, "go"), ".", "_")) {
		t.Errorf("old.go's message %s names another Go than %s", guardIdent, gotoolchain.Required)
	}
}

// TestThisBuild: the test binary itself was built with a patched Go (the
// runtime knows the patch level, which build tags do not).
func TestThisBuild(t *testing.T) {
	t.Parallel()
	v := runtime.Version()
	if !version.IsValid(v) {
		t.Skipf("runtime.Version %q is a development build: no release to compare", v)
	}
	if version.Compare(v, gotoolchain.Required) < 0 {
		t.Errorf("built with %s; skiff needs %s or later", v, gotoolchain.Required)
	}
}

// TestOlderGoFails builds with the machine's own Go (GOTOOLCHAIN=local)
// where it is older than Required: the module must refuse it with the go
// line's message, and the guard package alone, in a module whose go line
// the old Go accepts, must stop on old.go's identifier. A control build of
// the same module without old.go must succeed, so that the failure is the
// guard's.
func TestOlderGoFails(t *testing.T) {
	t.Parallel()
	goBin, localVersion := oldestGo(t)
	if goBin == "" || version.Compare(localVersion, gotoolchain.Required) >= 0 {
		t.Skipf("the oldest Go on PATH is %q, not older than %s: nothing older to try", localVersion, gotoolchain.Required)
	}
	t.Logf("the machine's Go: %s (%s)", goBin, localVersion)
	root := testenv.Root(t)

	t.Run("go line", func(t *testing.T) {
		t.Parallel()
		out, err := goLocal(goBin, root, "build", "-o", os.DevNull, "./pkg/names")
		want := "go.mod requires go >= " + strings.TrimPrefix(gotoolchain.Required, "go")
		if err == nil || !strings.Contains(out, want) {
			t.Errorf("go build with %s: err %v, output %q; want a failure saying %q", localVersion, err, out, want)
		}
	})
	t.Run("compile guard", func(t *testing.T) {
		t.Parallel()
		out, err := buildGuard(t, goBin, localVersion, root, true)
		if err == nil || !strings.Contains(out, guardIdent) {
			t.Errorf("building the guard with %s: err %v, output %q; want a failure naming %s", localVersion, err, out, guardIdent)
		}
	})
	t.Run("control without old.go", func(t *testing.T) {
		t.Parallel()
		if out, err := buildGuard(t, goBin, localVersion, root, false); err != nil {
			t.Errorf("building the guard without old.go with %s: %v: %s", localVersion, err, bytes.TrimSpace([]byte(out)))
		}
	})
}

// goLocal runs goBin with args in dir, as the machine's own Go
// (GOTOOLCHAIN=local), and returns its output.
func goLocal(goBin, dir string, args ...string) (string, error) {
	cmd := exec.Command(goBin, args...)
	cmd.Dir = dir
	// go test sets GOROOT to its own toolchain's: each go finds its own.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOROOT=") && !strings.HasPrefix(kv, "GOTOOLDIR=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "GOTOOLCHAIN=local", "GOFLAGS=")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// oldestGo is the oldest go on PATH and its version: go test puts its own
// toolchain's bin first on PATH, the oldest is the machine's own ("" when
// none answers).
func oldestGo(t *testing.T) (goBin, localVersion string) {
	t.Helper()
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		p := filepath.Join(d, "go")
		if _, err := os.Stat(p); err != nil {
			continue
		}
		out, err := goLocal(p, t.TempDir(), "env", "GOVERSION")
		v := strings.TrimSpace(out)
		if err != nil || !version.IsValid(v) {
			continue
		}
		if goBin == "" || version.Compare(v, localVersion) < 0 {
			goBin, localVersion = p, v
		}
	}
	return goBin, localVersion
}

// buildGuard builds, with goBin (of localVersion), the guard package of
// root copied into a module of its own whose go line is the old Go's own
// release line; old.go is left out unless withOld.
func buildGuard(t *testing.T, goBin, localVersion, root string, withOld bool) (string, error) {
	t.Helper()
	dir := t.TempDir()
	mod := "module example.com/guard\n\ngo " + strings.TrimPrefix(version.Lang(localVersion), "go") + "\n"
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o644); err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(root, "internal", "gotoolchain", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || (!withOld && filepath.Base(f) == "old.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return goLocal(goBin, dir, "build", "./...")
}

// TestEveryBinaryImportsIt: every main package of the module depends on
// this package, so none compiles with an old Go.
func TestEveryBinaryImportsIt(t *testing.T) {
	t.Parallel()
	const self = "github.com/skiffci/skiff/internal/gotoolchain"
	cmd := exec.Command("go", "list", "-f", `{{if eq .Name "main"}}{{.ImportPath}}{{range .Deps}} {{.}}{{end}}{{end}}`, "./...")
	cmd.Dir = testenv.Root(t)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	mains := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		mains++
		if !slices.Contains(f[1:], self) {
			t.Errorf("%s does not import %s (directly or through pkg/names)", f[0], self)
		}
	}
	if mains < 5 {
		t.Errorf("found %d main packages; the listing is wrong", mains)
	}
}
