package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDemo runs a small `skiff demo`: the whole pipeline against the GitHub
// simulator with stand-in runners; it fails when an invariant does.
func TestDemo(t *testing.T) {
	t.Parallel()
	standin := filepath.Join(t.TempDir(), "skiff-standin")
	if out, err := exec.Command("go", "build", "-o", standin, "github.com/skiffci/skiff/cmd/skiff-standin").CombinedOutput(); err != nil {
		t.Fatalf("building the stand-in: %v\n%s", err, out)
	}
	var out bytes.Buffer
	dir := filepath.Join(t.TempDir(), "demo")
	err := demo(&out, standin, "../../examples/pools.yaml", dir, 12, 0, 200*time.Millisecond, 4*time.Minute)
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	for _, want := range []string{"jobs completed          12", "metrics records         12 written", "invariants: no job lost", ": ok"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
	if report, err := os.ReadFile(filepath.Join(dir, "report.html")); err != nil || !strings.Contains(string(report), "<p>12 jobs ·") {
		t.Errorf("the usage report does not cover the 12 jobs (%v)", err)
	}
}
