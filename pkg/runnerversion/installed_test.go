package runnerversion_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/runnerversion"
)

// listener writes a runner directory whose listener runs script.
func listener(t *testing.T, dir, script string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	testenv.WriteExecutable(t, filepath.Join(dir, runnerversion.ListenerPath), []byte("#!/bin/sh\n"+script+"\n"))
}

func TestInstalled(t *testing.T) {
	tests := []struct {
		name, script string // "" writes no listener
		want         string
		wantErr      error
	}{
		{"a runner", `[ "$1" = --version ] && echo 2.333.1`, "2.333.1", nil},
		{"a warning first", `echo "warn: no ICU" >&2; echo "Process terminated? no"; echo 2.330.0`, "2.330.0", nil},
		{"no listener", "", "", runnerversion.ErrNoListener},
		{"not a version", `echo hello`, "", nil},
		{"a failing listener", `exit 3`, "", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.script != "" {
				listener(t, dir, tc.script)
			}
			v, err := runnerversion.Installed(context.Background(), dir)
			switch {
			case tc.want != "" && (err != nil || v.String() != tc.want):
				t.Errorf("Installed = %v, %v; want %s", v, err, tc.want)
			case tc.want == "" && err == nil:
				t.Errorf("Installed = %v, want an error", v)
			case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
				t.Errorf("Installed error %v, want %v", err, tc.wantErr)
			}
		})
	}
}

// TestDirs: a directory's version is read once, and again when its
// listener changes.
func TestDirs(t *testing.T) {
	dir := t.TempDir()
	listener(t, dir, "echo 2.331.0")
	var d runnerversion.Dirs
	for range 3 {
		if v := d.Version(context.Background(), dir); v != "2.331.0" {
			t.Fatalf("Version = %q, want 2.331.0", v)
		}
	}
	if n := d.Reads(); n != 1 {
		t.Errorf("%d reads of an unchanged directory, want 1", n)
	}
	listener(t, dir, "echo 2.334.0")
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(filepath.Join(dir, runnerversion.ListenerPath), later, later); err != nil {
		t.Fatal(err)
	}
	if v := d.Version(context.Background(), dir); v != "2.334.0" || d.Reads() != 2 {
		t.Errorf("after an update: %q in %d reads, want 2.334.0 in 2", v, d.Reads())
	}
	if v := d.Version(context.Background(), t.TempDir()); v != "" {
		t.Errorf("a directory without a runner: %q, want none", v)
	}
}

// TestDirsReadApart: a slow listener holds up only its own directory's
// callers, and they share its one run.
func TestDirsReadApart(t *testing.T) {
	slow, fast := t.TempDir(), t.TempDir()
	marks := t.TempDir()
	started, release := filepath.Join(marks, "started"), filepath.Join(marks, "release")
	// The slow listener says it runs, then waits until the test has read
	// the fast directory.
	listener(t, slow, "touch "+started+"; while [ ! -e "+release+" ]; do sleep 0.01; done; echo 2.333.0")
	listener(t, fast, "echo 2.334.0")
	var d runnerversion.Dirs
	done := make(chan string, 2)
	for range 2 {
		go func() { done <- d.Version(context.Background(), slow) }()
	}
	testenv.Await(t, "the slow read to be under way", 10*time.Millisecond, func() bool {
		_, err := os.Stat(started)
		return err == nil
	}, nil)
	if v := d.Version(context.Background(), fast); v != "2.334.0" {
		t.Errorf("the fast directory: %q, want 2.334.0", v)
	}
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if v := <-done; v != "2.333.0" {
			t.Errorf("the slow directory: %q, want 2.333.0", v)
		}
	}
	if n := d.Reads(); n != 2 {
		t.Errorf("%d listener runs for two directories, want 2", n)
	}
}
