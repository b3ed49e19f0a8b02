package ledger

import (
	"context"
	"time"
)

// Interruptions records EC2's spot interruption warnings in the runner
// ledger. Memory and LedgerDynamo implement it. It is apart from
// Ledger so that the ledger's other implementations need not change; a
// warning only fills Runner.InterruptedAt and moves no state (the
// instance runs on for two minutes, and its end arrives as a state change).
type Interruptions interface {
	// MarkInterrupted records the warning for the runner on the instance,
	// once: a repeated or late warning keeps the first time, also on an
	// ended runner. ErrNotFound: the instance is not a skiff runner's (or
	// its record has expired).
	MarkInterrupted(ctx context.Context, instanceID string, at time.Time) error
}

var _ Interruptions = (*Memory)(nil)

// MarkInterrupted implements Interruptions.
func (m *Memory) MarkInterrupted(ctx context.Context, instanceID string, at time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.writes++
	name, ok := m.instances[instanceID]
	if !ok {
		return ErrNotFound
	}
	r, ok := m.get(name)
	if !ok {
		return ErrNotFound
	}
	if r.InterruptedAt.IsZero() {
		r.InterruptedAt = at
	}
	return nil
}
