package podman_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skiffci/skiff/internal/podman"
	"github.com/skiffci/skiff/internal/testenv"
)

// fakePodman puts on PATH a podman whose `system service` runs script and
// a runc that is never run: Start's wait, without a real service.
func fakePodman(t *testing.T, script string) {
	t.Helper()
	bin := t.TempDir()
	testenv.WriteExecutable(t, filepath.Join(bin, "podman"), []byte("#!/bin/sh\n[ \"$1 $2\" = \"system service\" ] || exit 0\n"+script+"\n"))
	testenv.WriteExecutable(t, filepath.Join(bin, "runc"), []byte("#!/bin/sh\nexit 1\n"))
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
}

// TestStartServiceExits: a service that ends before it answers fails the
// start at once, with its output, instead of waiting for the caller's bound.
func TestStartServiceExits(t *testing.T) {
	fakePodman(t, "echo 'cannot migrate the storage' >&2; exit 3")
	ctx, cancel := testenv.AwaitContext(t)
	defer cancel()
	_, err := podman.Start(ctx)
	if err == nil || !strings.Contains(err.Error(), "exited before it answered") || !strings.Contains(err.Error(), "cannot migrate the storage") {
		t.Fatalf("Start = %v; want the service's exit, with its output", err)
	}
}

// TestStartBoundedByContext: the caller's context bounds the wait for a
// service that never answers, and what Start started is ended.
func TestStartBoundedByContext(t *testing.T) {
	// The service writes its pid beside the file and renames it into
	// place: the shell's `>` makes the file before it writes the pid, and
	// a cancel in between once left the test an empty pid to look for.
	pidFile := filepath.Join(t.TempDir(), "pid")
	fakePodman(t, "echo $$ > "+pidFile+".new && mv "+pidFile+".new "+pidFile+"; exec sleep 600")
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	started := make(chan error, 1)
	go func() {
		_, err := podman.Start(ctx)
		started <- err
	}()
	testenv.Await(t, "the fake service to start", 10*time.Millisecond, func() bool { _, err := os.Stat(pidFile); return err == nil }, nil)
	cancel(errors.New("the test's bound"))
	err := <-started
	if err == nil || !strings.Contains(err.Error(), "did not answer") || !strings.Contains(err.Error(), "the test's bound") {
		t.Fatalf("Start = %v; want no answer before the context's end", err)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("the fake service's pid file holds %q: %v", b, err)
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
		t.Errorf("the service process %d is still running after the failed start", pid)
	}
}
