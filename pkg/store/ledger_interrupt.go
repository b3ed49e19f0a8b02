package store

import (
	"context"
	"fmt"
	"time"
)

// Interruptions records EC2's spot interruption warnings in the runner
// ledger. LedgerMemory and LedgerDynamo implement it. It is apart from
// Ledger so that the ledger's other implementations need not change; a
// warning only fills launch.Runner.InterruptedAt and moves no state (the
// instance runs on for two minutes, and its end arrives as a state change).
type Interruptions interface {
	// MarkInterrupted records the warning for the runner on the instance,
	// once: a repeated or late warning keeps the first time, also on an
	// ended runner. ErrNotFound: the instance is not a skiff runner's (or
	// its record has expired).
	MarkInterrupted(ctx context.Context, instanceID string, at time.Time) error
}

var (
	_ Interruptions = (*LedgerMemory)(nil)
	_ Interruptions = (*LedgerDynamo)(nil)
)

// attrInterruptedAt is the runner record's spot warning time.
const attrInterruptedAt = "interrupted_at"

// MarkInterrupted implements Interruptions.
func (m *LedgerMemory) MarkInterrupted(ctx context.Context, instanceID string, at time.Time) error {
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

// MarkInterrupted implements Interruptions: the instance pointer names the
// runner, whose interrupted_at is set if absent (condition: the record
// exists and has not expired).
func (d *LedgerDynamo) MarkInterrupted(ctx context.Context, instanceID string, at time.Time) error {
	name, err := d.runnerOf(ctx, instanceID)
	if err != nil {
		return fmt.Errorf("marking instance %s interrupted: %w", instanceID, err)
	}
	e := newExpr()
	n := e.name(attrInterruptedAt)
	set := fmt.Sprintf("SET %s = if_not_exists(%s, %s)", n, n, e.value(str(at.UTC().Format(timeLayout))))
	cond := fmt.Sprintf("attribute_exists(%s) AND %s", e.name(attrPK), e.live(d.now()))
	_, err = d.api.UpdateItem(ctx, e.update(d.table, runnerKey(name), set, cond))
	if isConditionFailed(err) {
		return fmt.Errorf("marking runner %s interrupted: %w", name, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("marking runner %s interrupted: %w", name, err)
	}
	return nil
}
