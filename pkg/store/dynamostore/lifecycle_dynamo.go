package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skiffci/skiff/pkg/ledger"

	"github.com/skiffci/skiff/pkg/store"
)

// runnerStepAttr names the time attribute a step sets.
func runnerStepAttr(to ledger.State) (string, bool) {
	switch to {
	case ledger.StateRegistered:
		return attrRegistered, true
	case ledger.StateJobStarted:
		return attrStartedAt, true
	case ledger.StateJobCompleted:
		return attrCompletedAt, true
	}
	return "", false
}

// runnerFills are the SET clauses that fill the step's time and the busy
// job where the record lacks them.
func runnerFills(e *expr, to ledger.State, timeAttr string, at time.Time, job int64) []string {
	n := e.name(timeAttr)
	out := []string{fmt.Sprintf("%s = if_not_exists(%s, %s)", n, n, e.value(str(at.UTC().Format(timeLayout))))}
	if to != ledger.StateRegistered && job != 0 {
		b := e.name(attrBusyJob)
		out = append(out, fmt.Sprintf("%s = if_not_exists(%s, %s)", b, b, e.value(numI(job))))
	}
	return out
}

// runnerAdvance is the update that moves a live runner record of a lower
// state_rank forward to to: the state, its rank and the fills.
func runnerAdvance(e *expr, to ledger.State, timeAttr string, at time.Time, job int64, now time.Time) (update, cond string) {
	sets := append(runnerFills(e, to, timeAttr, at, job),
		e.name(attrState)+" = "+e.value(str(to.String())), e.name(attrStateRank)+" = "+e.value(numI(int64(to))))
	cond = fmt.Sprintf("%s < %s AND %s", e.name(attrStateRank), e.value(numI(int64(to))), e.live(now))
	return "SET " + strings.Join(sets, ", "), cond
}

// Advance moves the named runner's ledger record forward, with the rules
// of Ledger.Advance: first a forward move (condition: a live record of a
// lower state_rank) that sets the state and fills the step's time and the
// busy job; when that fails, a fill of the missing ones only (condition:
// the record exists and has not expired). ErrNotFound: no such runner.
// It lets the Dynamo store serve as the webhook's runner port, and is what
// RecordLifecycle falls back to when its one-call path does not apply.
func (d *Dynamo) Advance(ctx context.Context, name string, to ledger.State, at time.Time, job int64) error {
	return advanceRunner(ctx, d.api, d.table, d.now(), name, to, at, job)
}

var _ store.LifecycleRecorder = (*Dynamo)(nil)

// RecordLifecycle implements LifecycleRecorder. An event that names a
// runner is one TransactWriteItems of two updates: the job's advance
// (condition: absent, or live with a lower status_rank, and neither
// updated_at nor expires_at later than the event's, so that both only move
// forward without a read) and the runner's advance (condition: a live
// record of a lower state_rank). That is the path of every in-order event
// on one of skiff's runners: one call. When DynamoDB cancels it (a replay
// or a late event, a runner that is not skiff's or already further on, a
// concurrent writer), nothing was written, and the event is recorded by
// RecordJob and Advance, which merge it as for any late event. An event
// without a runner is RecordJob alone (one UpdateItem when it advances).
func (d *Dynamo) RecordLifecycle(ctx context.Context, j store.JobRecord, step store.RunnerStep) (bool, error) {
	if err := store.ValidateJob(j); err != nil {
		return false, err
	}
	if step.Runner == "" {
		return d.RecordJob(ctx, j)
	}
	timeAttr, ok := runnerStepAttr(step.To)
	if !ok || step.To == ledger.StateRegistered {
		return false, ledger.ErrInvalidAdvance
	}
	now := d.now()

	attrs := jobAttrs(j)
	je := newExprFor(len(attrs) + 3)
	sets := make([]string, 0, len(attrs))
	forward := ""
	for _, a := range attrs {
		n, v := je.name(a.name), je.value(a.value)
		sets = append(sets, n+" = "+v)
		if a.name == attrUpdatedAt || a.name == attrExpires {
			forward += fmt.Sprintf(" AND (attribute_not_exists(%s) OR %s <= %s)", n, n, v)
		}
	}
	jobCond := fmt.Sprintf("attribute_not_exists(%s) OR (%s < %s AND %s%s)",
		je.name(attrPK), je.name(attrRank), je.value(numI(int64(j.Status))), je.live(now), forward)

	re := newExpr()
	runnerUpdate, runnerCond := runnerAdvance(re, step.To, timeAttr, step.At, j.ID, now)

	_, err := d.api.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Update: &types.Update{
			TableName: aws.String(d.table), Key: jobKey(j.ID), UpdateExpression: aws.String("SET " + strings.Join(sets, ", ")),
			ConditionExpression: aws.String(jobCond), ExpressionAttributeNames: je.names, ExpressionAttributeValues: je.values,
		}},
		{Update: &types.Update{
			TableName: aws.String(d.table), Key: runnerKey(step.Runner), UpdateExpression: aws.String(runnerUpdate),
			ConditionExpression: aws.String(runnerCond), ExpressionAttributeNames: re.names, ExpressionAttributeValues: re.values,
		}},
	}})
	if err == nil {
		return true, nil
	}
	if !isTxCanceled(err) {
		return false, fmt.Errorf("recording job %d on runner %s: %w", j.ID, step.Runner, err)
	}
	advanced, err := d.RecordJob(ctx, j)
	if err != nil {
		return false, err
	}
	if err := d.Advance(ctx, step.Runner, step.To, step.At, j.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
		return advanced, err
	}
	return advanced, nil
}

// isTxCanceled reports whether DynamoDB refused a transaction without
// writing anything for a reason a separate write resolves: a condition
// failed, or another transaction was touching the same items.
func isTxCanceled(err error) bool {
	var canceled *types.TransactionCanceledException
	var conflict *types.TransactionConflictException
	return errors.As(err, &canceled) || errors.As(err, &conflict)
}
