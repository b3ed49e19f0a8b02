// DynamoDB key design
//
// The store is one DynamoDB table with string keys pk (partition) and sk
// (sort), on-demand billing, one sparse secondary index (live-pool, the runner
// ledger's: see the package doc) and otherwise reads by key, and
// TTL on the number attribute expires_at (epoch seconds). The sort key names
// the item kind, so that later kinds can live under the same partition (a
// job's metrics record as JOB#<id> / METRICS, say) without a migration.
//
//	kind      pk                 sk         attributes
//	job       JOB#<job id>       JOB        status, status_rank, run_id, attempt,
//	                                        repository, owner, installation_id,
//	                                        labels, pool, workflow_name, job_name,
//	                                        branch, queued_at, started_at,
//	                                        completed_at, runner_name, runner_id,
//	                                        conclusion, updated_at, expires_at
//	run       RUN#<run id>       RUN        attempt, event, workflow_name,
//	                                        repository, updated_at, expires_at
//
// Attribute types: ids, attempts, status_rank and lease_until are numbers;
// labels is a list of strings (order kept); timestamps are strings in UTC
// with a fixed width (2006-01-02T15:04:05.000000000Z), so that they read well
// in the console and sort as they compare; status is GitHub's name of the
// status, status_rank its position in the lifecycle (1 waiting … 4
// completed), which the conditions compare. A job field the events have not
// told yet is absent, never written as a zero value.
//
// RecordJob merges with conditional UpdateItems, never a transaction: first an
// advance (condition: absent, or live with a lower status_rank) that sets the
// status and every field the event knows; when that condition fails, a fill
// (condition: live with the same or a higher status_rank) that sets only
// missing fields, with if_not_exists. An expired record is replaced whole by
// a conditional PutItem. updated_at and expires_at only ever move forward:
// when a write lowered one (its event was older), a conditional raise puts
// the previous value back.
//
// A lifecycle event that names a runner (RecordLifecycle, in
// lifecycle_dynamo.go) is one TransactWriteItems: the job's advance, with
// the further condition that neither updated_at nor expires_at is later
// than the event's (so both move forward without keepNewest's read of the
// old values), and the runner's advance in the ledger (RUNNER#<name>,
// see the package doc). When DynamoDB cancels it, nothing was written, and the
// advance/fill above and the ledger's advance/fill record the event one
// item at a time. This is the webhook's hot path: one call for every
// in-order event on one of skiff's runners.
//
// Runs are one conditional PutItem that replaces a record of the same or an
// older attempt.
//
// TTL: DynamoDB deletes expired items lazily (typically within days), so an
// item whose expires_at is at or before the current second is treated as
// absent by every read and every condition. expires_at is rounded up to the
// next whole second, so a record never expires early; Job.ExpiresAt and
// Run.ExpiresAt read back at that precision. A record written without
// ExpiresAt has no expires_at and never expires.

package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skiffci/skiff/internal/ctxsleep"
	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/store/expiry"
)

// DynamoAPI is the part of the DynamoDB client that Dynamo calls, with the
// SDK's signatures; *dynamodb.Client implements it.
type DynamoAPI interface {
	getItem
	putItem
	updateItem
	deleteItem
	transactWriteItems
}

// DynamoTableAPI is the part of the DynamoDB client that CreateTable calls;
// *dynamodb.Client implements it.
type DynamoTableAPI interface {
	createTable
	describeTable
}

var (
	_ DynamoAPI      = (*dynamodb.Client)(nil)
	_ DynamoTableAPI = (*dynamodb.Client)(nil)
	_ store.Store    = (*Dynamo)(nil)
)

// Attribute names of the table.
const (
	attrPK         = "pk"
	attrSK         = "sk"
	attrExpires    = "expires_at" // the table's TTL attribute
	attrState      = "state"
	attrLeaseUntil = "lease_until"
	attrStatus     = "status"
	attrRank       = "status_rank"
	attrAttempt    = "attempt"
	attrUpdatedAt  = "updated_at"

	// timeLayout is fixed-width UTC, so that stored timestamps sort as they compare.
	timeLayout = "2006-01-02T15:04:05.000000000Z"
)

// recordJobTries bounds RecordJob's retries. A retry is needed only when an
// expired record is revived by another writer between two of our calls, so
// three is generous.
const recordJobTries = 3

// Dynamo is a Store over one DynamoDB table (see the key design above). The
// Store methods use only single-item conditional writes, so they run on
// DynamoDB and on emulators without transactions (dynalite);
// RecordLifecycle needs TransactWriteItems (DynamoDB, moto). Its zero value is not usable: call NewDynamo.
type Dynamo struct {
	api   DynamoAPI
	table string
	now   func() time.Time
}

// DynamoOption configures a Dynamo.
type DynamoOption func(*Dynamo)

// WithClock sets the clock Dynamo reads to decide whether a record has
// expired when nothing else tells it the time (Job, Run, RecordJob,
// RecordRun). The default is time.Now.
func WithClock(now func() time.Time) DynamoOption {
	return func(d *Dynamo) { d.now = now }
}

// NewDynamo returns a Store over the table, which must have the key schema
// that CreateTable creates.
func NewDynamo(api DynamoAPI, table string, opts ...DynamoOption) *Dynamo {
	d := &Dynamo{api: api, table: table, now: time.Now}
	for _, o := range opts {
		o(d)
	}
	return d
}

// createTableWait bounds how long CreateTable waits for the table to become
// active when its context has no deadline: DynamoDB usually takes seconds,
// emulators milliseconds.
const createTableWait = 2 * time.Minute

// CreateTable creates the store's table (keys pk and sk, on-demand billing,
// the runner ledger's live-pool index) and waits until it is active, as
// long as ctx allows. A table that already exists is not an error. It does
// not enable TTL on expires_at: the deployment does that (and DynamoDB
// emulators lack UpdateTimeToLive); Dynamo treats expired items as absent
// either way.
func CreateTable(ctx context.Context, api DynamoTableAPI, table string) error {
	livePool, liveIndex := ledgerIndex() // the runner ledger's sparse index (ledger_dynamo.go)
	_, err := api.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:   aws.String(table),
		BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String(attrPK), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String(attrSK), AttributeType: types.ScalarAttributeTypeS},
			livePool,
		},
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String(attrPK), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String(attrSK), KeyType: types.KeyTypeRange},
		},
		GlobalSecondaryIndexes: []types.GlobalSecondaryIndex{liveIndex},
	})
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return fmt.Errorf("creating table %s: %w", table, err)
	}
	w := dynamodb.NewTableExistsWaiter(api, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay = 20 * time.Millisecond
		o.MaxDelay = 2 * time.Second
	})
	if err := w.Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)}, ctxsleep.Bound(ctx, createTableWait)); err != nil {
		return fmt.Errorf("waiting for table %s: %w", table, err)
	}
	return nil
}

// RecordJob implements Store.
func (d *Dynamo) RecordJob(ctx context.Context, j store.JobRecord) (bool, error) {
	if err := store.ValidateJob(j); err != nil {
		return false, err
	}
	now := d.now()
	attrs := jobAttrs(j)
	for range recordJobTries {
		advanced, ok, err := d.recordJobOnce(ctx, j, attrs, now)
		if err != nil {
			return false, fmt.Errorf("recording job %d: %w", j.ID, err)
		}
		if ok {
			return advanced, nil
		}
	}
	return false, fmt.Errorf("recording job %d: record changed under %d tries", j.ID, recordJobTries)
}

// recordJobOnce tries advance, fill, then replace-if-expired. ok is false
// when the record changed between the calls so that none applied.
func (d *Dynamo) recordJobOnce(ctx context.Context, j store.JobRecord, attrs []attr, now time.Time) (advanced, ok bool, err error) {
	key := jobKey(j.ID)
	rank := numI(int64(j.Status))

	// Advance: absent, or live with a lower status.
	e := newExprFor(len(attrs) + 3)
	sets := make([]string, 0, len(attrs))
	for _, a := range attrs {
		sets = append(sets, e.name(a.name)+" = "+e.value(a.value))
	}
	cond := fmt.Sprintf("attribute_not_exists(%s) OR (%s < %s AND %s)",
		e.name(attrPK), e.name(attrRank), e.value(rank), e.live(now))
	out, err := d.api.UpdateItem(ctx, e.updateReturning(d.table, key, "SET "+strings.Join(sets, ", "), cond, types.ReturnValueUpdatedOld))
	if err == nil {
		return true, true, d.keepNewest(ctx, key, attrs, out.Attributes)
	}
	if !isConditionFailed(err) {
		return false, false, fmt.Errorf("advancing: %w", err)
	}

	// Fill: live with the same or a later status; only missing fields.
	e = newExprFor(len(attrs) + 3)
	sets = sets[:0]
	for _, a := range attrs {
		if a.name == attrStatus {
			continue
		}
		n, v := e.name(a.name), e.value(a.value)
		switch a.name {
		case attrUpdatedAt, attrExpires:
			sets = append(sets, n+" = "+v) // lowered back by keepNewest if older
		default:
			sets = append(sets, fmt.Sprintf("%s = if_not_exists(%s, %s)", n, n, v))
		}
	}
	cond = fmt.Sprintf("attribute_exists(%s) AND %s >= %s AND %s",
		e.name(attrPK), e.name(attrRank), e.value(rank), e.live(now))
	out, err = d.api.UpdateItem(ctx, e.updateReturning(d.table, key, "SET "+strings.Join(sets, ", "), cond, types.ReturnValueUpdatedOld))
	if err == nil {
		return false, true, d.keepNewest(ctx, key, attrs, out.Attributes)
	}
	if !isConditionFailed(err) {
		return false, false, fmt.Errorf("filling: %w", err)
	}

	// Neither applied: the record is expired (or was revived or deleted in
	// between). Replace an expired one whole, as if it were absent.
	e = newExpr()
	cond = fmt.Sprintf("attribute_not_exists(%s) OR NOT %s", e.name(attrPK), e.live(now))
	item := jobKey(j.ID)
	for _, a := range attrs {
		item[a.name] = a.value
	}
	written, err := conditionalPut(ctx, d.api, e.put(d.table, item, cond))
	if err != nil {
		return false, false, fmt.Errorf("replacing expired record: %w", err)
	}
	return written, written, nil
}

// keepNewest puts back updated_at and expires_at where the write that
// returned old replaced a later value with an earlier one, so that both only
// move forward, as in Memory. Each raise is conditional on the value still
// being lower, so concurrent writers converge on the latest value.
func (d *Dynamo) keepNewest(ctx context.Context, key map[string]types.AttributeValue, written []attr, old map[string]types.AttributeValue) error {
	for _, a := range written {
		if a.name != attrUpdatedAt && a.name != attrExpires {
			continue
		}
		prev, ok := old[a.name]
		if !ok || !greater(prev, a.value) {
			continue
		}
		e := newExpr()
		n, v := e.name(a.name), e.value(prev)
		_, err := d.api.UpdateItem(ctx, e.update(d.table, key, fmt.Sprintf("SET %s = %s", n, v), fmt.Sprintf("%s < %s", n, v)))
		if err != nil && !isConditionFailed(err) {
			return fmt.Errorf("restoring %s: %w", a.name, err)
		}
	}
	return nil
}

// Job implements Store.
func (d *Dynamo) Job(ctx context.Context, id int64) (store.JobRecord, error) {
	item, err := getLive(ctx, d.api, d.table, jobKey(id), d.now())
	if err != nil {
		return store.JobRecord{}, fmt.Errorf("reading job %d: %w", id, err)
	}
	j, err := decodeJob(id, item)
	if err != nil {
		return store.JobRecord{}, fmt.Errorf("decoding job %d: %w", id, err)
	}
	return j, nil
}

// RecordRun implements Store.
func (d *Dynamo) RecordRun(ctx context.Context, r store.RunRecord) error {
	if r.ID <= 0 {
		return errors.New("recording run: id is required")
	}
	item := runKey(r.ID)
	item[attrAttempt] = numI(int64(r.Attempt)) // always written: the conditions compare it
	putStr(item, "event", r.Event)
	putStr(item, "workflow_name", r.WorkflowName)
	putStr(item, "repository", r.Repository)
	putStr(item, "head_repository", r.HeadRepository)
	putStr(item, "actor", r.Actor)
	if r.FromFork {
		item["from_fork"] = &types.AttributeValueMemberBOOL{Value: true}
	}
	putTime(item, attrUpdatedAt, r.UpdatedAt)
	if !r.ExpiresAt.IsZero() {
		item[attrExpires] = numI(expiry.Ceil(r.ExpiresAt))
	}
	e := newExpr()
	cond := fmt.Sprintf("attribute_not_exists(%s) OR %s <= %s OR NOT %s",
		e.name(attrPK), e.name(attrAttempt), e.value(item[attrAttempt]), e.live(d.now()))
	// Not written: a later attempt is already recorded.
	if _, err := conditionalPut(ctx, d.api, e.put(d.table, item, cond)); err != nil {
		return fmt.Errorf("recording run %d: %w", r.ID, err)
	}
	return nil
}

// Run implements Store.
func (d *Dynamo) Run(ctx context.Context, id int64) (store.RunRecord, error) {
	item, err := getLive(ctx, d.api, d.table, runKey(id), d.now())
	if err != nil {
		return store.RunRecord{}, fmt.Errorf("reading run %d: %w", id, err)
	}
	r := store.RunRecord{ID: id}
	dec := decoder{item: item}
	r.Attempt = int(dec.int("attempt"))
	r.Event = dec.str("event")
	r.WorkflowName = dec.str("workflow_name")
	r.Repository = dec.str("repository")
	r.HeadRepository = dec.str("head_repository")
	r.Actor = dec.str("actor")
	if b, ok := item["from_fork"].(*types.AttributeValueMemberBOOL); ok {
		r.FromFork = b.Value
	}
	r.UpdatedAt = dec.time(attrUpdatedAt)
	r.ExpiresAt = dec.epoch(attrExpires)
	if dec.err != nil {
		return store.RunRecord{}, fmt.Errorf("decoding run %d: %w", id, dec.err)
	}
	return r, nil
}

// queryItems runs a Query over all its pages and returns their items.
func queryItems(ctx context.Context, api query, in *dynamodb.QueryInput) ([]map[string]types.AttributeValue, error) {
	var items []map[string]types.AttributeValue
	for pages := dynamodb.NewQueryPaginator(api, in); pages.HasMorePages(); {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		items = append(items, page.Items...)
	}
	return items, nil
}

// getLive reads an item of table with a strongly consistent read,
// returning ErrNotFound for an absent one or one expired by now.
func getLive(ctx context.Context, api getItem, table string, key map[string]types.AttributeValue, now time.Time) (map[string]types.AttributeValue, error) {
	out, err := api.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(table),
		Key:            key,
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, err
	}
	if len(out.Item) == 0 || expired(out.Item, now) {
		return nil, store.ErrNotFound
	}
	return out.Item, nil
}

// jobAttrs lists the attributes an event writes: its status and every field
// it knows, never a zero value, always in the same order (the order of the
// Job fields), so that requests are reproducible.
func jobAttrs(j store.JobRecord) []attr {
	out := make([]attr, 0, maxJobAttrs)
	put := func(name string, v types.AttributeValue) { out = append(out, attr{name, v}) }
	putS := func(name, v string) {
		if v != "" {
			put(name, str(v))
		}
	}
	putN := func(name string, v int64) {
		if v != 0 {
			put(name, numI(v))
		}
	}
	putT := func(name string, t time.Time) {
		if !t.IsZero() {
			put(name, str(t.UTC().Format(timeLayout)))
		}
	}
	put(attrStatus, str(j.Status.String()))
	put(attrRank, numI(int64(j.Status)))
	putN("run_id", j.RunID)
	putN(attrAttempt, int64(j.Attempt))
	putS("repository", j.Repository)
	putS("owner", j.Owner)
	putN("installation_id", j.InstallationID)
	if len(j.Labels) > 0 {
		l := make([]types.AttributeValue, len(j.Labels))
		for i, s := range j.Labels {
			l[i] = str(s)
		}
		put("labels", &types.AttributeValueMemberL{Value: l})
	}
	putS("pool", j.Pool)
	putS("workflow_name", j.WorkflowName)
	putS("job_name", j.JobName)
	putS("branch", j.Branch)
	putT("queued_at", j.QueuedAt)
	putT("started_at", j.StartedAt)
	putT("completed_at", j.CompletedAt)
	putS("runner_name", j.RunnerName)
	putN("runner_id", j.RunnerID)
	putS("conclusion", j.Conclusion)
	putT(attrUpdatedAt, j.UpdatedAt)
	if !j.ExpiresAt.IsZero() {
		put(attrExpires, numI(expiry.Ceil(j.ExpiresAt)))
	}
	return out
}

// maxJobAttrs is how many attributes jobAttrs can list.
const maxJobAttrs = 20

func decodeJob(id int64, item map[string]types.AttributeValue) (store.JobRecord, error) {
	dec := decoder{item: item}
	j := store.JobRecord{ID: id}
	j.Status = store.Status(dec.int(attrRank))
	if j.Status <= store.StatusUnknown || j.Status > store.StatusCompleted {
		return store.JobRecord{}, fmt.Errorf("status_rank %d is out of range", j.Status)
	}
	j.RunID = dec.int("run_id")
	j.Attempt = int(dec.int(attrAttempt))
	j.Repository = dec.str("repository")
	j.Owner = dec.str("owner")
	j.InstallationID = dec.int("installation_id")
	j.Labels = dec.strs("labels")
	j.Pool = dec.str("pool")
	j.WorkflowName = dec.str("workflow_name")
	j.JobName = dec.str("job_name")
	j.Branch = dec.str("branch")
	j.QueuedAt = dec.time("queued_at")
	j.StartedAt = dec.time("started_at")
	j.CompletedAt = dec.time("completed_at")
	j.RunnerName = dec.str("runner_name")
	j.RunnerID = dec.int("runner_id")
	j.Conclusion = dec.str("conclusion")
	j.UpdatedAt = dec.time(attrUpdatedAt)
	j.ExpiresAt = dec.epoch(attrExpires)
	return j, dec.err
}

type attr struct {
	name  string
	value types.AttributeValue
}

func jobKey(id int64) map[string]types.AttributeValue {
	return itemKey("JOB#"+strconv.FormatInt(id, 10), "JOB")
}

func runKey(id int64) map[string]types.AttributeValue {
	return itemKey("RUN#"+strconv.FormatInt(id, 10), "RUN")
}

func itemKey(pk, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: str(pk), attrSK: str(sk)}
}

func str(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }

func numI(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

func putStr(m map[string]types.AttributeValue, name, v string) {
	if v != "" {
		m[name] = str(v)
	}
}

func putInt(m map[string]types.AttributeValue, name string, v int64) {
	if v != 0 {
		m[name] = numI(v)
	}
}

func putTime(m map[string]types.AttributeValue, name string, t time.Time) {
	if !t.IsZero() {
		m[name] = str(t.UTC().Format(timeLayout))
	}
}

// expired reports whether the item's expires_at is at or before now's second.
func expired(item map[string]types.AttributeValue, now time.Time) bool {
	n, ok := item[attrExpires].(*types.AttributeValueMemberN)
	if !ok {
		return false
	}
	exp, err := strconv.ParseInt(n.Value, 10, 64)
	return err == nil && exp <= now.Unix()
}

// greater reports a > b for two numbers or two strings; other pairs are not ordered.
func greater(a, b types.AttributeValue) bool {
	switch a := a.(type) {
	case *types.AttributeValueMemberN:
		b, ok := b.(*types.AttributeValueMemberN)
		if !ok {
			return false
		}
		x, err1 := strconv.ParseInt(a.Value, 10, 64)
		y, err2 := strconv.ParseInt(b.Value, 10, 64)
		return err1 == nil && err2 == nil && x > y
	case *types.AttributeValueMemberS:
		b, ok := b.(*types.AttributeValueMemberS)
		return ok && a.Value > b.Value
	}
	return false
}

func isConditionFailed(err error) bool {
	var ccf *types.ConditionalCheckFailedException
	return errors.As(err, &ccf)
}

// conditionalPut runs a PutItem whose failed condition means that the item
// is not to be written (it already holds as much or more), not an error:
// written is false then, and err nil.
func conditionalPut(ctx context.Context, api putItem, in *dynamodb.PutItemInput) (written bool, err error) {
	_, err = api.PutItem(ctx, in)
	if isConditionFailed(err) {
		return false, nil
	}
	return err == nil, err
}

// expr collects the placeholders of one request's expressions.
type expr struct {
	names  map[string]string
	values map[string]types.AttributeValue
	byName map[string]string
}

func newExpr() *expr {
	return &expr{names: map[string]string{}, values: map[string]types.AttributeValue{}, byName: map[string]string{}}
}

// newExprFor is newExpr with room for n names and n values, for the long
// expressions of a job's record (growing the maps one by one costs the
// webhook more than the rest of the expression).
func newExprFor(n int) *expr {
	return &expr{names: make(map[string]string, n), values: make(map[string]types.AttributeValue, n), byName: make(map[string]string, n)}
}

// put is a PutItemInput writing item to table when cond holds.
func (e *expr) put(table string, item map[string]types.AttributeValue, cond string) *dynamodb.PutItemInput {
	return &dynamodb.PutItemInput{
		TableName: aws.String(table), Item: item, ConditionExpression: aws.String(cond),
		ExpressionAttributeNames: e.names, ExpressionAttributeValues: e.values,
	}
}

// update is an UpdateItemInput applying update to the item at key when cond holds.
func (e *expr) update(table string, key map[string]types.AttributeValue, update, cond string) *dynamodb.UpdateItemInput {
	return &dynamodb.UpdateItemInput{
		TableName: aws.String(table), Key: key, UpdateExpression: aws.String(update), ConditionExpression: aws.String(cond),
		ExpressionAttributeNames: e.names, ExpressionAttributeValues: e.values,
	}
}

// updateReturning is update that also returns the attributes ret names.
func (e *expr) updateReturning(table string, key map[string]types.AttributeValue, update, cond string, ret types.ReturnValue) *dynamodb.UpdateItemInput {
	in := e.update(table, key, update, cond)
	in.ReturnValues = ret
	return in
}

// name returns the placeholder of an attribute name (every name goes through
// one, since status is a reserved word).
func (e *expr) name(n string) string {
	if p, ok := e.byName[n]; ok {
		return p
	}
	p := "#n" + strconv.Itoa(len(e.byName))
	e.byName[n], e.names[p] = p, n
	return p
}

// value returns a new placeholder for v.
func (e *expr) value(v types.AttributeValue) string {
	p := ":v" + strconv.Itoa(len(e.values))
	e.values[p] = v
	return p
}

// live is the condition that the item has not expired at now.
func (e *expr) live(now time.Time) string {
	n := e.name(attrExpires)
	return fmt.Sprintf("(attribute_not_exists(%s) OR %s > %s)", n, n, e.value(numI(now.Unix())))
}

// decoder reads typed attributes of one item, keeping the first error.
type decoder struct {
	item map[string]types.AttributeValue
	err  error
}

func (d *decoder) fail(name, want string) {
	if d.err == nil {
		d.err = fmt.Errorf("attribute %s: want %s, have %T", name, want, d.item[name])
	}
}

func (d *decoder) str(name string) string {
	v, ok := d.item[name]
	if !ok {
		return ""
	}
	s, ok := v.(*types.AttributeValueMemberS)
	if !ok {
		d.fail(name, "string")
		return ""
	}
	return s.Value
}

func (d *decoder) int(name string) int64 {
	v, ok := d.item[name]
	if !ok {
		return 0
	}
	n, ok := v.(*types.AttributeValueMemberN)
	if !ok {
		d.fail(name, "number")
		return 0
	}
	i, err := strconv.ParseInt(n.Value, 10, 64)
	if err != nil && d.err == nil {
		d.err = fmt.Errorf("attribute %s: %w", name, err)
	}
	return i
}

func (d *decoder) time(name string) time.Time {
	s := d.str(name)
	if s == "" {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil && d.err == nil {
		d.err = fmt.Errorf("attribute %s: %w", name, err)
	}
	return t
}

func (d *decoder) epoch(name string) time.Time {
	if _, ok := d.item[name]; !ok {
		return time.Time{}
	}
	return time.Unix(d.int(name), 0).UTC()
}

func (d *decoder) strs(name string) []string {
	v, ok := d.item[name]
	if !ok {
		return nil
	}
	l, ok := v.(*types.AttributeValueMemberL)
	if !ok {
		d.fail(name, "list")
		return nil
	}
	out := make([]string, 0, len(l.Value))
	for _, e := range l.Value {
		s, ok := e.(*types.AttributeValueMemberS)
		if !ok {
			d.fail(name, "list of strings")
			return nil
		}
		out = append(out, s.Value)
	}
	return out
}
