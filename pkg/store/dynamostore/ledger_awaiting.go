package dynamostore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/skiffci/skiff/pkg/provisioning"
	"github.com/skiffci/skiff/pkg/store"
)

// awaitingPool is the live-pool index partition that lists a pool's
// awaiting runners. No pool's name can take it: a pool's name is letters,
// digits and dashes.
func awaitingPool(pool string) string { return "awaiting#" + pool }

// EndAwaiting implements store.Ledger: End, whose transaction moves
// live_pool to the pool's awaiting partition instead of removing it. A
// runner ended before gets the attribute with one UpdateItem (condition:
// ended and not expired).
func (d *LedgerDynamo) EndAwaiting(ctx context.Context, name string, at time.Time, reason string) (bool, error) {
	return d.end(ctx, name, at, reason, true)
}

// markAwaiting puts an ended runner on its pool's awaiting list.
func (d *LedgerDynamo) markAwaiting(ctx context.Context, r provisioning.Runner) error {
	e := newExpr()
	set := fmt.Sprintf("SET %s = %s", e.name(attrLivePool), e.value(str(awaitingPool(r.Pool))))
	cond := fmt.Sprintf("%s = %s AND %s", e.name(attrStateRank), e.value(numI(int64(provisioning.StateTerminated))), e.live(d.now()))
	_, err := d.api.UpdateItem(ctx, e.update(d.table, runnerKey(r.Name), set, cond))
	if isConditionFailed(err) {
		return fmt.Errorf("listing runner %s as awaiting: %w", r.Name, store.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("listing runner %s as awaiting: %w", r.Name, err)
	}
	return nil
}

// Awaiting implements store.Ledger, sorted by name, from the live-pool
// index's awaiting partition of the pool (eventually consistent, like
// LiveRunners: a runner ended or settled a moment ago may be missing or
// still listed).
func (d *LedgerDynamo) Awaiting(ctx context.Context, pool string) ([]provisioning.Runner, error) {
	var out []provisioning.Runner
	e := newExpr()
	in := &dynamodb.QueryInput{
		TableName: aws.String(d.table), IndexName: aws.String(LivePoolIndex),
		KeyConditionExpression:   aws.String(e.name(attrLivePool) + " = " + e.value(str(awaitingPool(pool)))),
		ExpressionAttributeNames: e.names, ExpressionAttributeValues: e.values,
	}
	now := d.now()
	for {
		res, err := d.api.Query(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("listing the awaiting runners of pool %s: %w", pool, err)
		}
		for _, item := range res.Items {
			if expired(item, now) {
				continue // TTL deletes it in its own time
			}
			r, err := decodeRunner(item)
			if err != nil {
				return nil, fmt.Errorf("decoding an awaiting runner of pool %s: %w", pool, err)
			}
			if r.State == provisioning.StateTerminated {
				out = append(out, r)
			}
		}
		if len(res.LastEvaluatedKey) == 0 {
			break
		}
		in.ExclusiveStartKey = res.LastEvaluatedKey
	}
	slices.SortFunc(out, func(a, b provisioning.Runner) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Settle implements store.Ledger: one UpdateItem removes live_pool from
// an ended record (condition: terminated, so a live record's stays).
func (d *LedgerDynamo) Settle(ctx context.Context, name string) error {
	e := newExpr()
	cond := fmt.Sprintf("%s = %s", e.name(attrStateRank), e.value(numI(int64(provisioning.StateTerminated))))
	_, err := d.api.UpdateItem(ctx, e.update(d.table, runnerKey(name), "REMOVE "+e.name(attrLivePool), cond))
	if err != nil && !isConditionFailed(err) {
		return fmt.Errorf("settling runner %s: %w", name, err)
	}
	return nil
}
