package testenv

import (
	"bytes"
	"context"
	"sync"
)

// SyncBuffer is a bytes.Buffer safe for concurrent writers: a log sink for
// tests whose code under test logs from several goroutines or processes.
// Its zero value is ready to use.
type SyncBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	changed chan struct{} // closed and replaced on every write
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.changed != nil {
		close(s.changed)
		s.changed = nil
	}
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// WaitCount waits until substr occurs at least n times in what was written,
// and reports whether it did before ctx ended. Output copied from another
// process arrives after the call that caused it has returned; this is the
// event to wait for, not a sleep.
func (s *SyncBuffer) WaitCount(ctx context.Context, substr string, n int) bool {
	for {
		s.mu.Lock()
		if bytes.Count(s.b.Bytes(), []byte(substr)) >= n {
			s.mu.Unlock()
			return true
		}
		if s.changed == nil {
			s.changed = make(chan struct{})
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}
