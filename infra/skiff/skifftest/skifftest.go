// Package skifftest holds what the CDK app's tests share: stand-ins for
// what make build writes.
package skifftest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/skiffci/skiff/pkg/names"
)

// WriteFakeBuild writes a stand-in bootstrap for each function under dir,
// where make build writes them (dir/<function>/bootstrap), so the tests
// synthesize without a build. Each names its function: each function's
// code asset is its own.
func WriteFakeBuild(dir string) error {
	for _, fn := range []string{names.FunctionWebhook, names.FunctionScaleUp, names.FunctionEC2Events, names.FunctionScaleDown, names.FunctionSetup} {
		if err := os.MkdirAll(filepath.Join(dir, fn), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, fn, "bootstrap"), []byte("#!/bin/sh\n# "+fn+"\n"), 0o755); err != nil {
			return err
		}
	}
	return nil
}

// FakeBuild is WriteFakeBuild in a temporary directory of t's, which it
// returns.
func FakeBuild(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	if err := WriteFakeBuild(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}
