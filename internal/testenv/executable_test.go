package testenv

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// TestWriteExecutableWhileForking writes and at once runs scripts while
// other goroutines fork processes without pause, as parallel tests do: no
// run may fail with "text file busy".
func TestWriteExecutableWhileForking(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for ctx.Err() == nil {
				_ = exec.Command("true").Run()
			}
		})
	}
	defer wg.Wait()
	defer cancel()
	dir := t.TempDir()
	for i := range 300 {
		path := filepath.Join(dir, fmt.Sprintf("s%d", i))
		WriteExecutable(t, path, []byte("#!/bin/sh\nexit 0\n"))
		if err := exec.Command(path).Run(); err != nil {
			t.Fatalf("running script %d just written: %v", i, err)
		}
	}
}
