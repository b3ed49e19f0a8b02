package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/store/expiry"

	"github.com/skiffci/skiff/pkg/store"
)

// LedgerDynamoAPI is the part of the DynamoDB client LedgerDynamo calls,
// with the SDK's signatures; *dynamodb.Client implements it.
type LedgerDynamoAPI interface {
	getItem
	updateItem
	query
	transactWriteItems
}

var (
	_ LedgerDynamoAPI = (*dynamodb.Client)(nil)
	_ ledger.Ledger   = (*LedgerDynamo)(nil)
)

// Attribute names and keys of ledger items (see the package doc for the key design).
const (
	attrStateRank    = "state_rank"
	attrLivePool     = "live_pool"
	attrInstanceID   = "instance_id"
	attrInstanceType = "type"
	attrZone         = "zone"
	attrSpot         = "spot"
	attrStartKind    = "start_kind"
	attrBusyJob      = "busy_job"
	attrRunner       = "runner"
	attrJobID        = "job_id"
	attrRunID        = "run_id"
	attrReservedAt   = "reserved_at"
	attrLaunchedAt   = "launched_at"
	attrRegistered   = "registered_at"
	attrStartedAt    = "started_at"
	attrCompletedAt  = "completed_at"
	attrEndedAt      = "ended_at"

	skRunner   = "RUNNER"
	skInstance = "INSTANCE"

	// LivePoolIndex is the sparse global secondary index over live_pool:
	// only live runner records carry the attribute, so a query lists a
	// pool's live runners and nothing else. Its projection is ALL, so
	// LiveRunners needs no second read.
	LivePoolIndex = "live-pool"
)

// ledgerTries bounds the optimistic loops (Reserve losing the count to
// another reservation, End racing a launch report). Each lost round means
// another writer made progress, so a handful is plenty; when it runs out,
// Reserve reports what it got and End fails (its caller retries).
const ledgerTries = 5

// maxTransactItems is DynamoDB's limit on the items of one TransactWriteItems.
const maxTransactItems = 100

// LedgerDynamo is the runner ledger in the store's DynamoDB table (see the
// key design in the package doc): reservations and ends are TransactWriteItems
// of the records and the pool's count, advances are conditional
// UpdateItems. It needs DynamoDB transactions (moto emulates them;
// dynalite does not). Its zero value is not usable: call NewLedgerDynamo.
type LedgerDynamo struct {
	api   LedgerDynamoAPI
	table string
	now   func() time.Time
	ttl   time.Duration
}

// NewLedgerDynamo returns the ledger over the table (created by
// CreateTable, which adds the live-pool index). Of the options only
// WithClock applies: the clock decides which ended records have expired.
func NewLedgerDynamo(api LedgerDynamoAPI, table string, opts ...DynamoOption) *LedgerDynamo {
	d := &Dynamo{now: time.Now}
	for _, o := range opts {
		o(d)
	}
	return &LedgerDynamo{api: api, table: table, now: d.now, ttl: ledger.DefaultRunnerTTL}
}

func runnerKey(name string) map[string]types.AttributeValue {
	return itemKey("RUNNER#"+name, skRunner)
}

func instanceKey(id string) map[string]types.AttributeValue {
	return itemKey("INSTANCE#"+id, skInstance)
}

// ledgerIndex is what CreateTable adds for the ledger: the live_pool
// attribute and the sparse live-pool index.
func ledgerIndex() (types.AttributeDefinition, types.GlobalSecondaryIndex) {
	return types.AttributeDefinition{AttributeName: aws.String(attrLivePool), AttributeType: types.ScalarAttributeTypeS},
		types.GlobalSecondaryIndex{
			IndexName:  aws.String(LivePoolIndex),
			KeySchema:  []types.KeySchemaElement{{AttributeName: aws.String(attrLivePool), KeyType: types.KeyTypeHash}},
			Projection: &types.Projection{ProjectionType: types.ProjectionTypeAll},
		}
}

// Reserve implements Ledger. It reads the pool's count, tries to reserve
// as many runners as fit in one transaction (the new records, conditional
// on none existing, and the count, conditional on staying within max), and
// on a lost race drops the runners that already exist and tries again with
// a fresh count, at most ledgerTries times.
func (d *LedgerDynamo) Reserve(ctx context.Context, pool string, max int, runners []ledger.Runner) (int, error) {
	if err := ledger.ValidateRunners(pool, runners); err != nil {
		return 0, err
	}
	reserved := 0
	todo := runners
	for try := 0; len(todo) > 0 && try < ledgerTries; try++ {
		have, err := d.Live(ctx, pool)
		if err != nil {
			return reserved, fmt.Errorf("reserving runners of pool %s: %w", pool, err)
		}
		k := min(max-have, len(todo), maxTransactItems-1)
		if k <= 0 {
			break
		}
		batch := todo[:k]
		failed, err := d.reserveOnce(ctx, pool, max, batch)
		if err != nil {
			return reserved, fmt.Errorf("reserving runners of pool %s: %w", pool, err)
		}
		if failed == nil { // committed
			reserved += k
			todo = todo[k:]
			try = -1 // progress: a fresh budget for the rest
			continue
		}
		// Cancelled: drop the runners whose records exist (a retried
		// reservation); a failed count or a conflict is retried as is.
		var keep []ledger.Runner
		for i, r := range batch {
			if !failed.item(i) {
				keep = append(keep, r)
			}
		}
		todo = append(keep, todo[k:]...)
	}
	return reserved, nil
}

// reserveOnce runs one reservation transaction. A nil failure is a commit.
func (d *LedgerDynamo) reserveOnce(ctx context.Context, pool string, max int, batch []ledger.Runner) (*txFailure, error) {
	now := d.now()
	items := make([]types.TransactWriteItem, 0, len(batch)+1)
	for _, r := range batch {
		e := newExpr()
		cond := fmt.Sprintf("attribute_not_exists(%s) OR NOT %s", e.name(attrPK), e.live(now))
		items = append(items, types.TransactWriteItem{Put: &types.Put{
			TableName: aws.String(d.table), Item: reservedItem(r), ConditionExpression: aws.String(cond),
			ExpressionAttributeNames: e.names, ExpressionAttributeValues: e.values,
		}})
	}
	e := newExpr()
	c := e.name(attrCount)
	items = append(items, types.TransactWriteItem{Update: &types.Update{
		TableName: aws.String(d.table), Key: counterKey(pool),
		UpdateExpression:         aws.String(fmt.Sprintf("ADD %s %s", c, e.value(numI(int64(len(batch)))))),
		ConditionExpression:      aws.String(fmt.Sprintf("attribute_not_exists(%s) OR %s <= %s", c, c, e.value(numI(int64(max-len(batch)))))),
		ExpressionAttributeNames: e.names, ExpressionAttributeValues: e.values,
	}})
	return d.transact(ctx, items)
}

// reservedItem is a new runner record in state reserved.
func reservedItem(r ledger.Runner) map[string]types.AttributeValue {
	item := runnerKey(r.Name)
	item[attrPool] = str(r.Pool)
	item[attrLivePool] = str(r.Pool)
	item[attrJobID] = numI(r.JobID)
	putInt(item, attrRunID, r.RunID)
	putInt(item, attrAttempt, int64(r.Attempt))
	putStr(item, attrToken, r.Token)
	item[attrState] = str(ledger.StateReserved.String())
	item[attrStateRank] = numI(int64(ledger.StateReserved))
	putTime(item, attrReservedAt, r.ReservedAt)
	return item
}

// Launched implements Ledger: one UpdateItem of the record (reserved →
// launched, with the instance facts it lacks; when the record is already
// past launched, a second one that fills the facts only), then one of the
// instance pointer. The pointer's update never touches expires_at, which
// End sets, so the two commute whichever comes first; a pointer written
// for an already ended runner gets the record's expiry here.
func (d *LedgerDynamo) Launched(ctx context.Context, name string, l ledger.LaunchReport) error {
	if l.InstanceID == "" {
		return errors.New("recording launch: instance id is required")
	}
	fills := func(e *expr) []string {
		var sets []string
		fill := func(attr string, v types.AttributeValue) {
			n := e.name(attr)
			sets = append(sets, fmt.Sprintf("%s = if_not_exists(%s, %s)", n, n, e.value(v)))
		}
		fill(attrInstanceID, str(l.InstanceID))
		if l.InstanceType != "" {
			fill(attrInstanceType, str(l.InstanceType))
		}
		if l.Zone != "" {
			fill(attrZone, str(l.Zone))
		}
		fill(attrSpot, &types.AttributeValueMemberBOOL{Value: l.Spot})
		if l.StartKind != "" {
			fill(attrStartKind, str(l.StartKind))
		}
		if !l.At.IsZero() {
			fill(attrLaunchedAt, str(l.At.UTC().Format(timeLayout)))
		}
		return sets
	}
	now := d.now()
	e := newExpr()
	sets := append(fills(e), e.name(attrState)+" = "+e.value(str(ledger.StateLaunched.String())),
		e.name(attrStateRank)+" = "+e.value(numI(int64(ledger.StateLaunched))))
	cond := fmt.Sprintf("%s < %s AND %s", e.name(attrStateRank), e.value(numI(int64(ledger.StateLaunched))), e.live(now))
	out, err := d.api.UpdateItem(ctx, e.updateReturning(d.table, runnerKey(name), "SET "+strings.Join(sets, ", "), cond, types.ReturnValueAllNew))
	if isConditionFailed(err) {
		e = newExpr()
		cond = fmt.Sprintf("attribute_exists(%s) AND %s", e.name(attrPK), e.live(now))
		out, err = d.api.UpdateItem(ctx, e.updateReturning(d.table, runnerKey(name), "SET "+strings.Join(fills(e), ", "), cond, types.ReturnValueAllNew))
		if isConditionFailed(err) {
			return fmt.Errorf("recording launch of runner %s: %w", name, store.ErrNotFound)
		}
	}
	if err != nil {
		return fmt.Errorf("recording launch of runner %s: %w", name, err)
	}
	rec, err := decodeRunner(out.Attributes)
	if err != nil {
		return fmt.Errorf("decoding runner %s: %w", name, err)
	}
	e = newExpr()
	set := fmt.Sprintf("SET %s = %s, %s = %s", e.name(attrRunner), e.value(str(name)), e.name(attrPool), e.value(str(rec.Pool)))
	if !rec.ExpiresAt.IsZero() {
		set += fmt.Sprintf(", %s = %s", e.name(attrExpires), e.value(numI(rec.ExpiresAt.Unix())))
	}
	if _, err := d.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(d.table), Key: instanceKey(l.InstanceID), UpdateExpression: aws.String(set),
		ExpressionAttributeNames: e.names, ExpressionAttributeValues: e.values,
	}); err != nil {
		return fmt.Errorf("recording instance %s of runner %s: %w", l.InstanceID, name, err)
	}
	return nil
}

// Advance implements Ledger: first a forward move (condition: a live
// record of a lower state_rank) that sets the state and fills the step's
// time and the busy job; when that condition fails, a fill of the missing
// ones only (condition: the record exists and has not expired). A forward
// report costs one write, a late or repeated one two.
func (d *LedgerDynamo) Advance(ctx context.Context, name string, to ledger.State, at time.Time, job int64) error {
	return advanceRunner(ctx, d.api, d.table, d.now(), name, to, at, job)
}

// runnerUpdater is the one call an advance makes.
type runnerUpdater interface {
	updateItem
}

// advanceRunner moves a runner's record forward (conditional on a lower
// state_rank and a live record), or fills the times it lacks; the one
// advance both LedgerDynamo and Dynamo's lifecycle fallback use.
func advanceRunner(ctx context.Context, api runnerUpdater, table string, now time.Time, name string, to ledger.State,
	at time.Time, job int64) error {
	timeAttr, ok := runnerStepAttr(to)
	if !ok {
		return ledger.ErrInvalidAdvance
	}
	e := newExpr()
	update, cond := runnerAdvance(e, to, timeAttr, at, job, now)
	_, err := api.UpdateItem(ctx, e.update(table, runnerKey(name), update, cond))
	if err == nil {
		return nil
	}
	if !isConditionFailed(err) {
		return fmt.Errorf("advancing runner %s to %s: %w", name, to, err)
	}
	e = newExpr()
	cond = fmt.Sprintf("attribute_exists(%s) AND %s", e.name(attrPK), e.live(now))
	_, err = api.UpdateItem(ctx, e.update(table, runnerKey(name), "SET "+strings.Join(runnerFills(e, to, timeAttr, at, job), ", "), cond))
	if isConditionFailed(err) {
		return fmt.Errorf("advancing runner %s to %s: %w", name, to, store.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("filling runner %s's %s: %w", name, to, err)
	}
	return nil
}

// End implements Ledger. It reads the record (for its pool and instance),
// then ends it in one transaction: the record set to terminated with the
// condition that it is still live and still has the instance it was read
// with, the pool's count decremented, and the instance pointer given the
// record's expiry. A record that another writer ended first fails the
// condition: End then rereads it and reports false.
func (d *LedgerDynamo) End(ctx context.Context, name string, at time.Time, reason string) (bool, error) {
	return d.end(ctx, name, at, reason, false)
}

// end is End, and with await EndAwaiting (ledger_awaiting.go).
func (d *LedgerDynamo) end(ctx context.Context, name string, at time.Time, reason string, await bool) (bool, error) {
	for range ledgerTries {
		r, err := d.Runner(ctx, name)
		if err != nil {
			return false, fmt.Errorf("ending runner %s: %w", name, err)
		}
		if !r.State.Live() {
			if await {
				return false, d.markAwaiting(ctx, r)
			}
			return false, nil
		}
		failed, err := d.endOnce(ctx, r, at, reason, await)
		if err != nil {
			return false, fmt.Errorf("ending runner %s: %w", name, err)
		}
		if failed == nil {
			return true, nil
		}
		// Ended by another writer, launched in between, or a conflict: read again.
	}
	return false, fmt.Errorf("ending runner %s: record changed under %d tries", name, ledgerTries)
}

// endOnce runs one end transaction; with await, live_pool moves to the
// pool's awaiting partition instead of going.
func (d *LedgerDynamo) endOnce(ctx context.Context, r ledger.Runner, at time.Time, reason string, await bool) (*txFailure, error) {
	expires := numI(expiry.Ceil(at.Add(d.ttl)))
	e := newExpr()
	set := []string{
		e.name(attrState) + " = " + e.value(str(ledger.StateTerminated.String())),
		e.name(attrStateRank) + " = " + e.value(numI(int64(ledger.StateTerminated))),
		e.name(attrEndedAt) + " = " + e.value(str(at.UTC().Format(timeLayout))),
		e.name(attrExpires) + " = " + e.value(expires),
	}
	if reason != "" {
		set = append(set, e.name(attrReason)+" = "+e.value(str(reason)))
	}
	update := "SET " + strings.Join(set, ", ") + " REMOVE " + e.name(attrLivePool)
	if await {
		update = "SET " + strings.Join(append(set, e.name(attrLivePool)+" = "+e.value(str(awaitingPool(r.Pool)))), ", ")
	}
	cond := fmt.Sprintf("%s < %s", e.name(attrStateRank), e.value(numI(int64(ledger.StateTerminated))))
	if r.InstanceID == "" {
		cond += fmt.Sprintf(" AND attribute_not_exists(%s)", e.name(attrInstanceID))
	} else {
		cond += fmt.Sprintf(" AND %s = %s", e.name(attrInstanceID), e.value(str(r.InstanceID)))
	}
	items := []types.TransactWriteItem{{Update: &types.Update{
		TableName: aws.String(d.table), Key: runnerKey(r.Name), UpdateExpression: aws.String(update),
		ConditionExpression: aws.String(cond), ExpressionAttributeNames: e.names, ExpressionAttributeValues: e.values,
	}}}
	// The count has no condition: the record's condition already makes
	// this the only end, and a guard that could cancel the end would leave
	// the runner counted for good.
	e = newExpr()
	items = append(items, types.TransactWriteItem{Update: &types.Update{
		TableName: aws.String(d.table), Key: counterKey(r.Pool),
		UpdateExpression:         aws.String(fmt.Sprintf("ADD %s %s", e.name(attrCount), e.value(numI(-1)))),
		ExpressionAttributeNames: e.names, ExpressionAttributeValues: e.values,
	}})
	if r.InstanceID != "" {
		e = newExpr()
		items = append(items, types.TransactWriteItem{Update: &types.Update{
			TableName: aws.String(d.table), Key: instanceKey(r.InstanceID),
			UpdateExpression:         aws.String(fmt.Sprintf("SET %s = %s", e.name(attrExpires), e.value(expires))),
			ExpressionAttributeNames: e.names, ExpressionAttributeValues: e.values,
		}})
	}
	return d.transact(ctx, items)
}

// EndInstance implements Ledger: the instance pointer names the runner.
func (d *LedgerDynamo) EndInstance(ctx context.Context, instanceID string, at time.Time, reason string) (bool, error) {
	name, err := d.runnerOf(ctx, instanceID)
	if err != nil {
		return false, fmt.Errorf("ending instance %s: %w", instanceID, err)
	}
	return d.End(ctx, name, at, reason)
}

// runnerOf reads the instance pointer: the runner's name, or ErrNotFound.
func (d *LedgerDynamo) runnerOf(ctx context.Context, instanceID string) (string, error) {
	item, err := getLive(ctx, d.api, d.table, instanceKey(instanceID), d.now())
	if err != nil {
		return "", err
	}
	dec := decoder{item: item}
	name := dec.str(attrRunner)
	if dec.err != nil {
		return "", fmt.Errorf("decoding instance %s: %w", instanceID, dec.err)
	}
	if name == "" {
		return "", store.ErrNotFound // only the expiry an end set: the launch report is still on its way
	}
	return name, nil
}

// Runner implements Ledger.
func (d *LedgerDynamo) Runner(ctx context.Context, name string) (ledger.Runner, error) {
	item, err := getLive(ctx, d.api, d.table, runnerKey(name), d.now())
	if err != nil {
		return ledger.Runner{}, fmt.Errorf("reading runner %s: %w", name, err)
	}
	r, err := decodeRunner(item)
	if err != nil {
		return ledger.Runner{}, fmt.Errorf("decoding runner %s: %w", name, err)
	}
	return r, nil
}

// RunnerByInstance implements Ledger.
func (d *LedgerDynamo) RunnerByInstance(ctx context.Context, instanceID string) (ledger.Runner, error) {
	name, err := d.runnerOf(ctx, instanceID)
	if err != nil {
		return ledger.Runner{}, fmt.Errorf("reading instance %s: %w", instanceID, err)
	}
	return d.Runner(ctx, name)
}

// LiveRunners implements Ledger, sorted by name, from the live-pool index.
// Like every global secondary index, it is eventually consistent: a
// runner reserved or ended a moment ago may be missing or still listed
// (Live, from the count, is exact).
func (d *LedgerDynamo) LiveRunners(ctx context.Context, pool string) ([]ledger.Runner, error) {
	out, err := d.indexed(ctx, pool, func(r ledger.Runner, _ map[string]types.AttributeValue) bool { return r.State.Live() })
	if err != nil {
		return nil, fmt.Errorf("listing live runners of pool %s: %w", pool, err)
	}
	return out, nil
}

// indexed lists, sorted by name, the runner records under the live-pool
// index's partition that keep accepts.
func (d *LedgerDynamo) indexed(ctx context.Context, partition string,
	keep func(ledger.Runner, map[string]types.AttributeValue) bool) ([]ledger.Runner, error) {
	var out []ledger.Runner
	e := newExpr()
	in := &dynamodb.QueryInput{
		TableName: aws.String(d.table), IndexName: aws.String(LivePoolIndex),
		KeyConditionExpression:   aws.String(e.name(attrLivePool) + " = " + e.value(str(partition))),
		ExpressionAttributeNames: e.names, ExpressionAttributeValues: e.values,
	}
	items, err := queryItems(ctx, d.api, in)
	if err != nil {
		return nil, err
	}
	for _, item := range items {
		r, err := decodeRunner(item)
		if err != nil {
			return nil, fmt.Errorf("decoding a runner record: %w", err)
		}
		if keep(r, item) {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b ledger.Runner) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Live implements Ledger: the pool's count, read strongly consistent.
func (d *LedgerDynamo) Live(ctx context.Context, pool string) (int, error) {
	out, err := d.api.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(d.table), Key: counterKey(pool), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return 0, fmt.Errorf("reading the live count of pool %s: %w", pool, err)
	}
	dec := decoder{item: out.Item}
	n := dec.int(attrCount)
	if dec.err != nil {
		return 0, fmt.Errorf("decoding the live count of pool %s: %w", pool, dec.err)
	}
	return int(n), nil
}

func decodeRunner(item map[string]types.AttributeValue) (ledger.Runner, error) {
	dec := decoder{item: item}
	r := ledger.Runner{Name: strings.TrimPrefix(dec.str(attrPK), "RUNNER#")}
	r.Pool = dec.str(attrPool)
	r.JobID = dec.int(attrJobID)
	r.RunID = dec.int(attrRunID)
	r.Attempt = int(dec.int(attrAttempt))
	r.Token = dec.str(attrToken)
	r.State = ledger.State(dec.int(attrStateRank))
	r.InstanceID = dec.str(attrInstanceID)
	r.InstanceType = dec.str(attrInstanceType)
	r.Zone = dec.str(attrZone)
	r.StartKind = dec.str(attrStartKind)
	if b, ok := item[attrSpot].(*types.AttributeValueMemberBOOL); ok {
		r.Spot = b.Value
	}
	r.BusyJob = dec.int(attrBusyJob)
	r.Reason = dec.str(attrReason)
	r.ReservedAt = dec.time(attrReservedAt)
	r.LaunchedAt = dec.time(attrLaunchedAt)
	r.RegisteredAt = dec.time(attrRegistered)
	r.StartedAt = dec.time(attrStartedAt)
	r.CompletedAt = dec.time(attrCompletedAt)
	r.EndedAt = dec.time(attrEndedAt)
	r.ExpiresAt = dec.epoch(attrExpires)
	r.InterruptedAt = dec.time(attrInterruptedAt)
	if dec.err == nil && (r.State <= ledger.StateUnknown || r.State > ledger.StateTerminated) {
		return ledger.Runner{}, fmt.Errorf("state_rank %d is out of range", r.State)
	}
	return r, dec.err
}

// transact runs a TransactWriteItems. It returns a nil failure when the
// transaction committed, the failure when DynamoDB cancelled it for a
// reason the caller resolves by reading and retrying (a condition failed,
// a conflicting transaction), and an error for anything else.
func (d *LedgerDynamo) transact(ctx context.Context, items []types.TransactWriteItem) (*txFailure, error) {
	_, err := d.api.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
	if err == nil {
		return nil, nil
	}
	f, ok := classifyTx(err, len(items))
	if !ok {
		return nil, err
	}
	return f, nil
}

// txFailure says why DynamoDB cancelled a transaction: which items'
// conditions failed, and whether another transaction conflicted.
type txFailure struct {
	conditionFailed []bool
	conflict        bool
}

// item reports whether item i's condition failed.
func (f *txFailure) item(i int) bool { return i < len(f.conditionFailed) && f.conditionFailed[i] }

// Cancellation reason codes of TransactionCanceledException that a retry
// can resolve.
const (
	reasonNone            = "None"
	reasonConditionFailed = "ConditionalCheckFailed"
	reasonConflict        = "TransactionConflict"
)

// classifyTx reads a TransactWriteItems error of n items: ok is false for
// an error that is not a cancellation a caller can resolve by retrying
// (throttling, validation, a size limit, a cancellation without reasons,
// any other error), which the caller returns as a failure.
func classifyTx(err error, n int) (*txFailure, bool) {
	var tce *types.TransactionCanceledException
	if !errors.As(err, &tce) {
		var tc *types.TransactionConflictException
		if errors.As(err, &tc) {
			return &txFailure{conflict: true}, true
		}
		return nil, false
	}
	if len(tce.CancellationReasons) != n {
		return nil, false
	}
	f := &txFailure{conditionFailed: make([]bool, n)}
	for i, r := range tce.CancellationReasons {
		switch aws.ToString(r.Code) {
		case reasonNone, "":
		case reasonConditionFailed:
			f.conditionFailed[i] = true
		case reasonConflict:
			f.conflict = true
		default:
			return nil, false
		}
	}
	return f, true
}
