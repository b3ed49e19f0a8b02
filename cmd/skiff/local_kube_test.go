package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skiffci/skiff/internal/testenv"
)

// TestLocalKubernetesFlags: skiff local --provider kubernetes refuses to
// start, naming what is missing, when a pool has no kubernetes: section
// and no --kube-namespace and --kube-image stand in for one, and when only
// one of those two is given. Nothing is started or written.
func TestLocalKubernetesFlags(t *testing.T) {
	dir := t.TempDir()
	pools := filepath.Join(dir, "pools.yaml")
	if err := os.WriteFile(pools, []byte(testenv.CPUPools), 0o600); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(dir, "app.pem")
	if err := os.WriteFile(key, []byte("a key the refusal comes before"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SKIFF_WEBHOOK_SECRET", "s")
	for _, tc := range []struct {
		name  string
		flags []string
		want  string
	}{
		{"no section, no flags", nil, `pool "cpu" has no kubernetes: section: give it one, or --kube-namespace and --kube-image`},
		{"a namespace without an image", []string{"--kube-namespace", "runners"}, "--kube-namespace and --kube-image go together"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := filepath.Join(t.TempDir(), "data")
			args := append([]string{"local", "-f", pools, "--data-dir", data, "--app-id", "77", "--app-key-file", key,
				"--allow", "acme", "--provider", "kubernetes", "--kubeconfig", filepath.Join(dir, "none")}, tc.flags...)
			var out, errb bytes.Buffer
			if code := run(args, &out, &errb); code != exitUsage || !strings.Contains(errb.String(), tc.want) {
				t.Errorf("exit %d, stderr %q; want %d saying %q", code, errb.String(), exitUsage, tc.want)
			}
			if _, err := os.Stat(data); !os.IsNotExist(err) {
				t.Errorf("the data directory was created: %v", err)
			}
		})
	}
}
