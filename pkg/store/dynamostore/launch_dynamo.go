package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/store/expiry"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skiffci/skiff/pkg/store"
)

// LaunchDynamoAPI is the part of the DynamoDB client LaunchDynamo calls,
// with the SDK's signatures; *dynamodb.Client implements it.
type LaunchDynamoAPI interface {
	getItem
	putItem
	updateItem
	batchGetItem
	query
	transactWriteItems
}

var (
	_ LaunchDynamoAPI = (*dynamodb.Client)(nil)
	_ ledger.Launches = (*LaunchDynamo)(nil)
)

// Attribute names of launch items (see the package doc for the key design).
const (
	attrGen       = "gen"
	attrToken     = "token"
	attrPool      = "pool"
	attrPlan      = "plan"
	attrMembers   = "members"
	attrInstances = "instances"
	attrReason    = "reason"
	attrCreatedAt = "created_at"
	attrCount     = "count"

	skLaunch = "LAUNCH"
	// skLaunchRecord and the FLEET# partition keep the launch record's first
	// name: the state tables and IAM policies of deployments carry them.
	skLaunchRecord = "FLEET"
	skRunners      = "RUNNERS"

	// noInstance stands for "no instance" in a launch's instances list (an
	// empty string is not a value every DynamoDB emulator accepts).
	noInstance = "-"
)

// batchGetTries bounds the retries of BatchGetItem's unprocessed keys, which
// DynamoDB returns under throttling; the SDK already backs off per call.
const batchGetTries = 5

// LaunchDynamo is Launches over the store's DynamoDB table, with
// single-item conditional writes only. Its zero value is not usable: call
// NewLaunchDynamo.
type LaunchDynamo struct {
	api   LaunchDynamoAPI
	table string
}

// NewLaunchDynamo returns Launches over the table (created by CreateTable).
func NewLaunchDynamo(api LaunchDynamoAPI, table string) *LaunchDynamo {
	return &LaunchDynamo{api: api, table: table}
}

func claimKey(id int64) map[string]types.AttributeValue {
	return itemKey("JOB#"+strconv.FormatInt(id, 10), skLaunch)
}

func launchKey(token string) map[string]types.AttributeValue {
	return itemKey("FLEET#"+token, skLaunchRecord)
}

func counterKey(pool string) map[string]types.AttributeValue {
	return itemKey("POOL#"+pool, skRunners)
}

// LaunchClaims implements Launches.
func (d *LaunchDynamo) LaunchClaims(ctx context.Context, ids []int64, now time.Time) (map[int64]ledger.Claim, error) {
	out := map[int64]ledger.Claim{}
	seen := map[int64]bool{}
	var keys []map[string]types.AttributeValue
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			keys = append(keys, claimKey(id))
		}
	}
	for len(keys) > 0 {
		chunk := keys[:min(len(keys), 100)] // BatchGetItem's limit
		keys = keys[len(chunk):]
		pending := map[string]types.KeysAndAttributes{d.table: {Keys: chunk, ConsistentRead: aws.Bool(true)}}
		for try := 0; len(pending) > 0; try++ {
			if try == batchGetTries {
				return nil, fmt.Errorf("reading launch claims: keys left unprocessed after %d tries", batchGetTries)
			}
			res, err := d.api.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: pending})
			if err != nil {
				return nil, fmt.Errorf("reading launch claims: %w", err)
			}
			for _, item := range res.Responses[d.table] {
				if expired(item, now) {
					continue
				}
				c, err := decodeClaim(item)
				if err != nil {
					return nil, fmt.Errorf("decoding launch claim: %w", err)
				}
				out[c.JobID] = c
			}
			pending = res.UnprocessedKeys
		}
	}
	return out, nil
}

func decodeClaim(item map[string]types.AttributeValue) (ledger.Claim, error) {
	dec := decoder{item: item}
	pk := dec.str(attrPK)
	id, err := strconv.ParseInt(strings.TrimPrefix(pk, "JOB#"), 10, 64)
	if err != nil {
		return ledger.Claim{}, fmt.Errorf("key %q: %w", pk, err)
	}
	c := ledger.Claim{JobID: id}
	c.Attempt = int(dec.int(attrAttempt))
	c.Gen = int(dec.int(attrGen))
	c.Token = dec.str(attrToken)
	c.Pool = dec.str(attrPool)
	c.LeaseUntil = time.UnixMilli(dec.int(attrLeaseUntil)).UTC()
	c.UpdatedAt = dec.time(attrUpdatedAt)
	c.ExpiresAt = dec.epoch(attrExpires)
	return c, dec.err
}

// ClaimLaunch implements Launches.
func (d *LaunchDynamo) ClaimLaunch(ctx context.Context, c ledger.Claim, prevGen int, now time.Time) error {
	if err := ledger.ValidateClaim(c, prevGen); err != nil {
		return err
	}
	item := claimKey(c.JobID)
	item[attrAttempt] = numI(int64(c.Attempt))
	item[attrGen] = numI(int64(c.Gen))
	item[attrToken] = str(c.Token)
	putStr(item, attrPool, c.Pool)
	item[attrLeaseUntil] = numI(c.LeaseUntil.UnixMilli())
	putTime(item, attrUpdatedAt, c.UpdatedAt)
	if !c.ExpiresAt.IsZero() {
		item[attrExpires] = numI(expiry.Ceil(c.ExpiresAt))
	}
	e := newExpr()
	var cond string
	if prevGen == 0 {
		cond = fmt.Sprintf("attribute_not_exists(%s) OR NOT %s", e.name(attrPK), e.live(now))
	} else {
		cond = fmt.Sprintf("%s = %s AND %s", e.name(attrGen), e.value(numI(int64(prevGen))), e.live(now))
	}
	_, err := d.api.PutItem(ctx, e.put(d.table, item, cond))
	if isConditionFailed(err) {
		return fmt.Errorf("claiming launch of job %d: %w", c.JobID, store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("claiming launch of job %d: %w", c.JobID, err)
	}
	return nil
}

// PutLaunch implements Launches.
func (d *LaunchDynamo) PutLaunch(ctx context.Context, f ledger.Launch) error {
	if err := ledger.ValidateLaunch(f); err != nil {
		return err
	}
	item := launchKey(f.Token)
	item[attrState] = str(string(f.State))
	putStr(item, attrPool, f.Pool)
	putStr(item, attrPlan, f.Plan)
	members := make([]types.AttributeValue, len(f.Members))
	for i, m := range f.Members {
		members[i] = str(strconv.FormatInt(m.JobID, 10) + ":" + strconv.Itoa(m.Attempt))
	}
	item[attrMembers] = &types.AttributeValueMemberL{Value: members}
	if f.Instances != nil {
		item[attrInstances] = instanceList(f.Instances)
	}
	putStr(item, attrReason, f.Reason)
	putTime(item, attrCreatedAt, f.CreatedAt)
	if !f.ExpiresAt.IsZero() {
		item[attrExpires] = numI(expiry.Ceil(f.ExpiresAt))
	}
	e := newExpr()
	cond := fmt.Sprintf("attribute_not_exists(%s) OR NOT %s", e.name(attrPK), e.live(f.CreatedAt))
	put := e.put(d.table, item, cond)
	if len(f.Members) == 0 {
		_, err := d.api.PutItem(ctx, put)
		if isConditionFailed(err) {
			return fmt.Errorf("recording launch %s: %w", f.Token, store.ErrConflict)
		}
		if err != nil {
			return fmt.Errorf("recording launch %s: %w", f.Token, err)
		}
		return nil
	}
	// The fence: one transaction puts the launch and checks that every
	// member's claim still names it (no invocation took a job over after its
	// lease). At most 99 members: a transaction holds 100 items.
	items := []types.TransactWriteItem{{Put: &types.Put{TableName: put.TableName, Item: put.Item,
		ConditionExpression: put.ConditionExpression, ExpressionAttributeNames: put.ExpressionAttributeNames,
		ExpressionAttributeValues: put.ExpressionAttributeValues}}}
	for _, m := range f.Members {
		ce := newExpr()
		items = append(items, types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{
			TableName: aws.String(d.table), Key: claimKey(m.JobID),
			ConditionExpression:      aws.String(fmt.Sprintf("%s = %s", ce.name(attrToken), ce.value(str(f.Token)))),
			ExpressionAttributeNames: ce.names, ExpressionAttributeValues: ce.values,
		}})
	}
	_, err := d.api.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
	if isTransactionConflict(err) {
		return fmt.Errorf("recording launch %s: the launch exists or a member's claim was taken over: %w", f.Token, store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("recording launch %s: %w", f.Token, err)
	}
	return nil
}

// isTransactionConflict reports whether a transaction was cancelled by a
// failed condition (as opposed to throttling or a server error).
func isTransactionConflict(err error) bool {
	var tc *types.TransactionCanceledException
	if !errors.As(err, &tc) {
		return false
	}
	for _, r := range tc.CancellationReasons {
		if aws.ToString(r.Code) == "ConditionalCheckFailed" {
			return true
		}
	}
	return false
}

func instanceList(ids []string) types.AttributeValue {
	l := make([]types.AttributeValue, len(ids))
	for i, id := range ids {
		if id == "" {
			id = noInstance
		}
		l[i] = str(id)
	}
	return &types.AttributeValueMemberL{Value: l}
}

// FinishLaunch implements Launches.
func (d *LaunchDynamo) FinishLaunch(ctx context.Context, token string, instances []string, reason string) error {
	e := newExpr()
	sets := []string{
		e.name(attrState) + " = " + e.value(str(string(ledger.LaunchDone))),
		e.name(attrInstances) + " = " + e.value(instanceList(instances)),
	}
	update := "SET " + strings.Join(sets, ", ")
	if reason != "" {
		update += ", " + e.name(attrReason) + " = " + e.value(str(reason))
	}
	cond := fmt.Sprintf("attribute_exists(%s) AND %s = %s", e.name(attrPK), e.name(attrState), e.value(str(string(ledger.LaunchIntent))))
	_, err := d.api.UpdateItem(ctx, e.update(d.table, launchKey(token), update, cond))
	if isConditionFailed(err) {
		return fmt.Errorf("finishing launch %s: not in intent: %w", token, store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("finishing launch %s: %w", token, err)
	}
	return nil
}

// Launch implements Launches.
func (d *LaunchDynamo) Launch(ctx context.Context, token string, now time.Time) (ledger.Launch, error) {
	item, err := getLive(ctx, d.api, d.table, launchKey(token), now)
	if err != nil {
		return ledger.Launch{}, fmt.Errorf("reading launch %s: %w", token, err)
	}
	dec := decoder{item: item}
	f := ledger.Launch{Token: token}
	f.State = ledger.LaunchState(dec.str(attrState))
	f.Pool = dec.str(attrPool)
	f.Plan = dec.str(attrPlan)
	for _, m := range dec.strs(attrMembers) {
		id, attempt, ok := strings.Cut(m, ":")
		jid, err1 := strconv.ParseInt(id, 10, 64)
		n, err2 := strconv.Atoi(attempt)
		if !ok || err1 != nil || err2 != nil {
			return ledger.Launch{}, fmt.Errorf("decoding launch %s: member %q", token, m)
		}
		f.Members = append(f.Members, ledger.Member{JobID: jid, Attempt: n})
	}
	if _, ok := item[attrInstances]; ok {
		f.Instances = []string{}
		for _, id := range dec.strs(attrInstances) {
			if id == noInstance {
				id = ""
			}
			f.Instances = append(f.Instances, id)
		}
	}
	f.Reason = dec.str(attrReason)
	f.CreatedAt = dec.time(attrCreatedAt)
	f.ExpiresAt = dec.epoch(attrExpires)
	if dec.err != nil {
		return ledger.Launch{}, fmt.Errorf("decoding launch %s: %w", token, dec.err)
	}
	return f, nil
}

func onDemandPK(run int64) string { return "ONDEMAND#" + strconv.FormatInt(run, 10) }

// MarkOnDemand implements Launches: one item per run and pool
// (ONDEMAND#<run>, the pool), kept until until by the table's TTL.
func (d *LaunchDynamo) MarkOnDemand(ctx context.Context, run int64, pool string, attempt int, until time.Time) error {
	if err := ledger.ValidateOnDemand(run, pool, attempt); err != nil {
		return err
	}
	item := itemKey(onDemandPK(run), pool)
	item[attrAttempt] = numI(int64(attempt))
	item[attrExpires] = numI(expiry.Ceil(until))
	if _, err := d.api.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(d.table), Item: item}); err != nil {
		return fmt.Errorf("marking run %d on-demand in pool %s: %w", run, pool, err)
	}
	return nil
}

// OnDemandFrom implements Launches.
func (d *LaunchDynamo) OnDemandFrom(ctx context.Context, run int64, pool string, now time.Time) (int, error) {
	out, err := d.api.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(d.table),
		Key: itemKey(onDemandPK(run), pool), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return 0, fmt.Errorf("reading the on-demand mark of run %d in pool %s: %w", run, pool, err)
	}
	if out.Item == nil || expired(out.Item, now) {
		return 0, nil
	}
	dec := decoder{item: out.Item}
	attempt := dec.int(attrAttempt)
	if dec.err != nil {
		return 0, fmt.Errorf("decoding the on-demand mark of run %d in pool %s: %w", run, pool, dec.err)
	}
	return int(attempt), nil
}
