package store

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"
)

// SecurityEvent is a job skiff refuses that ran on one of skiff's runners:
// GitHub gave it a runner launched for another job (pkg/webhook detects it
// from the job's in_progress or completed event). One per job attempt.
type SecurityEvent struct {
	JobID      int64
	RunID      int64
	Attempt    int
	Repository string // owner/name
	Runner     string // the skiff runner that ran it
	Pool       string // the runner's pool
	// Reason is the admission decision's short reason (forbidden,
	// installation, out_of_scope, public_repository, fork_pull_request),
	// Detail its words.
	Reason, Detail string
	At             time.Time // when skiff learnt it
	ExpiresAt      time.Time // zero: kept
}

// SecurityEvents keeps the security events. RecordSecurityEvent stores an
// event once per job attempt: it returns true when this call recorded it,
// false (and changes nothing) when the attempt's event is recorded already
// (a replayed delivery, or the completed event after the in_progress one).
// SecurityEvents lists the events recorded at or after since, oldest
// first; expired ones are left out.
type SecurityEvents interface {
	RecordSecurityEvent(ctx context.Context, e SecurityEvent) (bool, error)
	SecurityEvents(ctx context.Context, since time.Time) ([]SecurityEvent, error)
}

// ValidateSecurityEvent reports an event no adapter may write.
func ValidateSecurityEvent(e SecurityEvent) error {
	if e.JobID <= 0 {
		return errors.New("recording security event: job id is required")
	}
	if e.Runner == "" || e.Reason == "" {
		return errors.New("recording security event: runner and reason are required")
	}
	return nil
}

// SortSecurityEvents orders events oldest first, then by job and attempt:
// the order SecurityEvents returns.
func SortSecurityEvents(es []SecurityEvent) {
	slices.SortFunc(es, func(a, b SecurityEvent) int {
		if c := a.At.Compare(b.At); c != 0 {
			return c
		}
		if a.JobID != b.JobID {
			return compare(a.JobID, b.JobID)
		}
		return compare(int64(a.Attempt), int64(b.Attempt))
	})
}

func compare(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// DiscardSecurityEvents records nothing and lists nothing; each event it
// is given counts as new. For processes that keep no store of them.
var DiscardSecurityEvents SecurityEvents = discardSecurityEvents{}

type discardSecurityEvents struct{}

func (discardSecurityEvents) RecordSecurityEvent(context.Context, SecurityEvent) (bool, error) {
	return true, nil
}

func (discardSecurityEvents) SecurityEvents(context.Context, time.Time) ([]SecurityEvent, error) {
	return nil, nil
}

// SecurityMemory is an in-memory SecurityEvents.
type SecurityMemory struct {
	mu  sync.Mutex
	m   map[[2]int64]SecurityEvent
	now func() time.Time
}

var _ SecurityEvents = (*SecurityMemory)(nil)

// NewSecurityMemory returns an empty SecurityMemory on the clock now (nil:
// time.Now).
func NewSecurityMemory(now func() time.Time) *SecurityMemory {
	if now == nil {
		now = time.Now
	}
	return &SecurityMemory{m: map[[2]int64]SecurityEvent{}, now: now}
}

// RecordSecurityEvent implements SecurityEvents.
func (s *SecurityMemory) RecordSecurityEvent(ctx context.Context, e SecurityEvent) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if err := ValidateSecurityEvent(e); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := [2]int64{e.JobID, int64(e.Attempt)}
	if old, ok := s.m[k]; ok && !gone(old.ExpiresAt, s.now()) {
		return false, nil
	}
	s.m[k] = e
	return true, nil
}

// SecurityEvents implements SecurityEvents.
func (s *SecurityMemory) SecurityEvents(ctx context.Context, since time.Time) ([]SecurityEvent, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []SecurityEvent
	for _, e := range s.m {
		if !e.At.Before(since) && !gone(e.ExpiresAt, s.now()) {
			out = append(out, e)
		}
	}
	SortSecurityEvents(out)
	return out, nil
}
