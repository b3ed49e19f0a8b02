package process_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/provider/process"
)

// A runner install's layout, as the Actions runner uses it: run.sh copies
// its helper into the install, the listener writes the registration it
// got from its JIT configuration (.runner) and its logs (_diag) into its
// root. Each check that fails exits with its own code.
const (
	installRun = `#!/bin/sh
DIR=$(cd "$(dirname "$0")" && pwd)
cp -f "$DIR/run-helper.sh.template" "$DIR/run-helper.sh" || exit 20
exec "$DIR/bin/Runner.Listener"
`
	installListener = `#!/bin/sh
root=$(cd "$(dirname "$0")/.." && pwd)
[ ! -e "$root/.runner" ] || exit 10
[ -f "$root/run-helper.sh" ] || exit 11
printf '%s' "$ACTIONS_RUNNER_INPUT_JITCONFIG" > "$root/.runner" || exit 12
mkdir -p "$root/_diag" && echo log > "$root/_diag/Runner.log" || exit 13
if echo x >> "$root/bin/Runner.Listener" 2>/dev/null; then exit 14; fi
[ "$(cat "$root/.runner")" = "$ACTIONS_RUNNER_INPUT_JITCONFIG" ] || exit 15
`
)

// TestRunnerInstallInTheSandbox: runners of one Actions runner install,
// sandboxed, each see the install at its path as their own: they write
// their registration, logs and helper there without seeing another's or
// an old one (exit 10 would say they did), cannot change the install's
// files (14), and leave the install on the host as it was.
func TestRunnerInstallInTheSandbox(t *testing.T) {
	t.Parallel()
	if err := process.CheckSandbox(""); err != nil {
		testenv.Missing(t, "a working bubblewrap", fmt.Sprintf("apt-get install bubblewrap (%v)", err))
	}
	install := filepath.Join(t.TempDir(), "actions-runner")
	files := map[string]string{"run.sh": installRun, "bin/Runner.Listener": installListener, "run-helper.sh.template": "#!/bin/sh\n",
		// What a classic configuration left: never a sandboxed runner's.
		".runner": "STALE", "run-helper.sh": "#!/bin/sh\n"}
	for name, content := range files {
		p := filepath.Join(install, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		testenv.WriteExecutable(t, p, []byte(content))
	}
	e := newProvider(t, process.Options{Command: []string{filepath.Join(install, "run.sh")}, DefaultLimit: 4})
	spec := pool.Spec{Shared: pool.Shared{Pool: "lab", Backend: pool.BackendProcess}, Process: &pool.Process{}}
	var ids []string
	for i := range 3 {
		n := strconv.Itoa(i)
		in := launchOne(t, e.p, spec, "tok-"+n, provider.Registration{Mode: provider.ModeJIT, JITConfig: "JIT-" + n, RunnerName: "r" + n})
		ids = append(ids, in.ID)
	}
	ctx, cancel := testenv.AwaitContext(t)
	defer cancel()
	for _, id := range ids {
		if code, err := e.p.Wait(ctx, id); err != nil || code != 0 {
			t.Errorf("runner %s: exit %d, %v; want 0", id, code, err)
		}
	}
	for name, content := range files {
		if b, err := os.ReadFile(filepath.Join(install, name)); err != nil || string(b) != content {
			t.Errorf("the install's %s after the runners: %q, %v; want it unchanged", name, b, err)
		}
	}
	if _, err := os.Stat(filepath.Join(install, "_diag")); !os.IsNotExist(err) {
		t.Errorf("a runner's logs landed in the install (%v)", err)
	}
}
