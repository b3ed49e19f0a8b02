package dynamostore

import (
	"context"
	"fmt"
	"time"

	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/store"
)

var _ ledger.Interruptions = (*LedgerDynamo)(nil)

// attrInterruptedAt is the runner record's spot warning time.
const attrInterruptedAt = "interrupted_at"

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
		return fmt.Errorf("marking runner %s interrupted: %w", name, store.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("marking runner %s interrupted: %w", name, err)
	}
	return nil
}
