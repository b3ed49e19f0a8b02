package dynamostore

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/store"
)

// awaitingPool is the live-pool index partition that lists a pool's
// awaiting runners. No pool's name can take it: a pool's name is letters,
// digits and dashes.
func awaitingPool(pool string) string { return "awaiting#" + pool }

// EndAwaiting implements ledger.Ledger: End, whose transaction moves
// live_pool to the pool's awaiting partition instead of removing it. A
// runner ended before gets the attribute with one UpdateItem (condition:
// ended and not expired).
func (d *LedgerDynamo) EndAwaiting(ctx context.Context, name string, at time.Time, reason string) (bool, error) {
	return d.end(ctx, name, at, reason, true)
}

// markAwaiting puts an ended runner on its pool's awaiting list.
func (d *LedgerDynamo) markAwaiting(ctx context.Context, r ledger.Runner) error {
	e := newExpr()
	set := fmt.Sprintf("SET %s = %s", e.name(attrLivePool), e.value(str(awaitingPool(r.Pool))))
	cond := fmt.Sprintf("%s = %s AND %s", e.name(attrStateRank), e.value(numI(int64(ledger.StateTerminated))), e.live(d.now()))
	_, err := d.api.UpdateItem(ctx, e.update(d.table, runnerKey(r.Name), set, cond))
	if isConditionFailed(err) {
		return fmt.Errorf("listing runner %s as awaiting: %w", r.Name, store.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("listing runner %s as awaiting: %w", r.Name, err)
	}
	return nil
}

// Awaiting implements ledger.Ledger, sorted by name, from the live-pool
// index's awaiting partition of the pool (eventually consistent, like
// LiveRunners: a runner ended or taken off its awaiting list a moment ago may be missing or
// still listed).
func (d *LedgerDynamo) Awaiting(ctx context.Context, pool string) ([]ledger.Runner, error) {
	now := d.now()
	out, err := d.indexed(ctx, awaitingPool(pool), func(r ledger.Runner, item map[string]types.AttributeValue) bool {
		return r.State == ledger.StateTerminated && !expired(item, now) // TTL deletes an expired one in its own time
	})
	if err != nil {
		return nil, fmt.Errorf("listing the awaiting runners of pool %s: %w", pool, err)
	}
	return out, nil
}

// StopAwaiting implements ledger.Ledger: one UpdateItem removes live_pool from
// an ended record (condition: terminated, so a live record's stays).
func (d *LedgerDynamo) StopAwaiting(ctx context.Context, name string) error {
	e := newExpr()
	cond := fmt.Sprintf("%s = %s", e.name(attrStateRank), e.value(numI(int64(ledger.StateTerminated))))
	_, err := d.api.UpdateItem(ctx, e.update(d.table, runnerKey(name), "REMOVE "+e.name(attrLivePool), cond))
	if err != nil && !isConditionFailed(err) {
		return fmt.Errorf("taking runner %s off its awaiting list: %w", name, err)
	}
	return nil
}
