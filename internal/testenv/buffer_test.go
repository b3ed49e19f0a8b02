package testenv

import (
	"context"
	"os/exec"
	"strings"
	"testing"
)

func TestSyncBufferWaitCount(t *testing.T) {
	var b SyncBuffer
	done := make(chan bool)
	go func() { done <- b.WaitCount(context.Background(), "END", 2) }()
	_, _ = b.Write([]byte("END one\n"))
	_, _ = b.Write([]byte("END two\n"))
	if !<-done {
		t.Error("WaitCount gave up although the second END arrived")
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if b.WaitCount(ended, "END", 3) {
		t.Error("WaitCount found a third END that was never written")
	}
}

func TestStartServerReportsAnEarlyExit(t *testing.T) {
	_, err := startServer(context.Background(), "fake", exec.Command("sh", "-c", "echo broken >&2"), nil)
	if err == nil || !strings.Contains(err.Error(), "fake exited before listening: broken") {
		t.Errorf("startServer = %v, want the early exit with its stderr", err)
	}
}
