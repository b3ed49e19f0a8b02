package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skiffci/skiff/pkg/launch"
)

// Attributes of a runner's ledger record that the webhook's writes touch
// (see the key design in ledger.go).
const (
	runnerStateRank = "state_rank"
	runnerBusyJob   = "busy_job"
)

// runnerItemKey is the key of a runner's ledger record.
func runnerItemKey(name string) map[string]types.AttributeValue {
	return itemKey("RUNNER#"+name, "RUNNER")
}

// runnerStepAttr names the time attribute a step sets.
func runnerStepAttr(to launch.State) (string, bool) {
	switch to {
	case launch.StateRegistered:
		return "registered_at", true
	case launch.StateJobStarted:
		return "started_at", true
	case launch.StateJobCompleted:
		return "completed_at", true
	}
	return "", false
}

// runnerFills are the SET clauses that fill the step's time and the busy
// job where the record lacks them.
func runnerFills(e *expr, to launch.State, timeAttr string, at time.Time, job int64) []string {
	n := e.name(timeAttr)
	out := []string{fmt.Sprintf("%s = if_not_exists(%s, %s)", n, n, e.value(str(at.UTC().Format(timeLayout))))}
	if to != launch.StateRegistered && job != 0 {
		b := e.name(runnerBusyJob)
		out = append(out, fmt.Sprintf("%s = if_not_exists(%s, %s)", b, b, e.value(numI(job))))
	}
	return out
}

// runnerAdvance is the update that moves a live runner record of a lower
// state_rank forward to to: the state, its rank and the fills.
func runnerAdvance(e *expr, to launch.State, timeAttr string, at time.Time, job int64, now time.Time) (update, cond string) {
	sets := append(runnerFills(e, to, timeAttr, at, job),
		e.name(attrState)+" = "+e.value(str(to.String())), e.name(runnerStateRank)+" = "+e.value(numI(int64(to))))
	cond = fmt.Sprintf("%s < %s AND %s", e.name(runnerStateRank), e.value(numI(int64(to))), e.live(now))
	return "SET " + strings.Join(sets, ", "), cond
}

// Advance moves the named runner's ledger record forward, with the rules
// of Ledger.Advance: first a forward move (condition: a live record of a
// lower state_rank) that sets the state and fills the step's time and the
// busy job; when that fails, a fill of the missing ones only (condition:
// the record exists and has not expired). ErrNotFound: no such runner.
// It lets the Dynamo store serve as the webhook's runner port, and is what
// RecordLifecycle falls back to when its one-call path does not apply.
func (d *Dynamo) Advance(ctx context.Context, name string, to launch.State, at time.Time, job int64) error {
	timeAttr, ok := runnerStepAttr(to)
	if !ok {
		return errInvalidAdvance
	}
	now := d.now()
	e := newExpr()
	update, cond := runnerAdvance(e, to, timeAttr, at, job, now)
	_, err := d.api.UpdateItem(ctx, e.update(d.table, runnerItemKey(name), update, cond))
	if err == nil {
		return nil
	}
	if !isConditionFailed(err) {
		return fmt.Errorf("advancing runner %s to %s: %w", name, to, err)
	}
	e = newExpr()
	cond = fmt.Sprintf("attribute_exists(%s) AND %s", e.name(attrPK), e.live(now))
	_, err = d.api.UpdateItem(ctx, e.update(d.table, runnerItemKey(name), "SET "+strings.Join(runnerFills(e, to, timeAttr, at, job), ", "), cond))
	if isConditionFailed(err) {
		return fmt.Errorf("advancing runner %s to %s: %w", name, to, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("filling runner %s's %s: %w", name, to, err)
	}
	return nil
}
