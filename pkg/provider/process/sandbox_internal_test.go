package process

import (
	"os"
	"testing"

	"github.com/skiffci/skiff/internal/testenv"
)

// TestSandboxBindsGPUs: the host's NVIDIA device nodes are bound into the
// sandbox, usable, where /dev holds no other device. This machine has no
// GPU: another character device of the host (/dev/fuse, which bwrap's own
// /dev lacks) stands in for one.
func TestSandboxBindsGPUs(t *testing.T) {
	t.Parallel()
	if err := CheckSandbox(""); err != nil {
		testenv.Missing(t, "a working bubblewrap", "apt-get install bubblewrap ("+err.Error()+")")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("no /dev/fuse to stand in for a GPU: %v", err)
	}
	s, err := newSandbox("", "/bin/sh", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		gpus []string
		want string // what reading the node gives inside
	}{
		{"bound", []string{"/dev/fuse"}, "ok"},
		{"not bound", nil, "missing"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := *s
			s.gpus = tc.gpus
			cmd, r, w, err := s.command(t.TempDir(), []string{"/bin/sh", "-c", `[ -c /dev/fuse ] && { exec 3<>/dev/fuse; } 2>/dev/null && echo ok || echo missing`})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			out, err := cmd.Output()
			w.Close()
			if err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			if got := string(out); got != tc.want+"\n" {
				t.Errorf("reading the device inside the sandbox: %q, want %q", got, tc.want)
			}
		})
	}
}
