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

	"github.com/skiffci/skiff/pkg/room"
	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/store/expiry"
)

// The waiting room's items, one partition per pool, so that one consistent
// Query reads a pool's whole room:
//
//	kind     pk            sk                  attributes
//	waiting  ROOM#<pool>   JOB#<job id, 20     repository, message, since, reason,
//	                       digits>             detail, tries, wake_at, offered_until,
//	                                           expires_at
//	served   ROOM#<pool>   SERVED#<owner/repo> served_at, expires_at
//	backoff  ROOM#<pool>   BACKOFF#<place>     failures, until, probe_at, expires_at
//
// wake_at, offered_until, until and probe_at are epoch nanoseconds (exact, so that an offer
// ends at the same instant as in room.Memory); since and served_at are
// timestamps in the table's fixed-width layout. An entry's expires_at is
// its first entry plus RoomLimit, kept by later entries.

// RoomDynamoAPI is the part of the DynamoDB client the room calls.
type RoomDynamoAPI interface {
	getItem
	putItem
	updateItem
	deleteItem
	query
}

var (
	_ RoomDynamoAPI = (*dynamodb.Client)(nil)
	_ room.Store    = (*RoomDynamo)(nil)
)

const (
	attrRepository   = "repository"
	attrMessage      = "message"
	attrSince        = "since"
	attrDetail       = "detail"
	attrTries        = "tries"
	attrWakeAt       = "wake_at"
	attrOfferedUntil = "offered_until"
	attrServedAt     = "served_at"
	attrPlace        = "place"
	attrFailures     = "failures"
	attrUntil        = "until"
	attrProbeAt      = "probe_at"

	skWaitingPrefix = "JOB#"
	skServedPrefix  = "SERVED#"
	skBackoffPrefix = "BACKOFF#"
)

// RoomDynamo is the Room over the store's table.
type RoomDynamo struct {
	api   RoomDynamoAPI
	table string
}

// NewRoomDynamo returns the Room over the table (created by CreateTable).
func NewRoomDynamo(api RoomDynamoAPI, table string) *RoomDynamo {
	return &RoomDynamo{api: api, table: table}
}

func roomPK(pool string) string { return "ROOM#" + pool }

func waitingKey(pool string, jobID int64) map[string]types.AttributeValue {
	return itemKey(roomPK(pool), fmt.Sprintf("%s%020d", skWaitingPrefix, jobID))
}

func nanos(t time.Time) types.AttributeValue {
	if t.IsZero() {
		return numI(0)
	}
	return numI(t.UnixNano())
}

// Enter implements Room: one UpdateItem that keeps the first since and
// expires_at of a live entry; an expired one (not yet deleted by TTL) is
// replaced whole by a conditional PutItem.
func (d *RoomDynamo) Enter(ctx context.Context, w room.Waiting) (room.Waiting, error) {
	if err := room.ValidateWaiting(w); err != nil {
		return room.Waiting{}, err
	}
	if w.ExpiresAt.IsZero() {
		w.ExpiresAt = w.Since.Add(room.Limit)
	}
	e := newExpr()
	set := []string{
		e.name(attrRepository) + " = " + e.value(str(w.Repository)),
		e.name(attrMessage) + " = " + e.value(str(w.Message)),
		e.name(attrReason) + " = " + e.value(str(w.Reason)),
		e.name(attrDetail) + " = " + e.value(str(w.Detail)),
		e.name(attrPlace) + " = " + e.value(str(w.Place)),
		e.name(attrWakeAt) + " = " + e.value(nanos(w.WakeAt)),
		e.name(attrOfferedUntil) + " = " + e.value(nanos(w.OfferedUntil)),
		e.name(attrSince) + " = if_not_exists(" + e.name(attrSince) + ", " + e.value(str(w.Since.UTC().Format(timeLayout))) + ")",
		e.name(attrExpires) + " = if_not_exists(" + e.name(attrExpires) + ", " + e.value(numI(expiry.Ceil(w.ExpiresAt))) + ")",
	}
	update := "SET " + strings.Join(set, ", ") + " ADD " + e.name(attrTries) + " " + e.value(numI(1))
	cond := "attribute_not_exists(" + e.name(attrPK) + ") OR " + e.name(attrExpires) + " > " + e.value(numI(w.Since.Unix()))
	out, err := d.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(d.table), Key: waitingKey(w.Pool, w.JobID),
		UpdateExpression: aws.String(update), ConditionExpression: aws.String(cond),
		ExpressionAttributeNames: e.names, ExpressionAttributeValues: e.values, ReturnValues: types.ReturnValueAllNew})
	var ccf *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &ccf):
		// An expired entry: a new one replaces it.
		item := waitingKey(w.Pool, w.JobID)
		w.Tries = 1
		putWaiting(item, w)
		if _, err := d.api.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(d.table), Item: item}); err != nil {
			return room.Waiting{}, fmt.Errorf("entering job %d in the room of pool %s: %w", w.JobID, w.Pool, err)
		}
		return w, nil
	case err != nil:
		return room.Waiting{}, fmt.Errorf("entering job %d in the room of pool %s: %w", w.JobID, w.Pool, err)
	}
	got, err := decodeWaiting(w.Pool, out.Attributes)
	if err != nil {
		return room.Waiting{}, fmt.Errorf("decoding job %d in the room of pool %s: %w", w.JobID, w.Pool, err)
	}
	return got, nil
}

func putWaiting(item map[string]types.AttributeValue, w room.Waiting) {
	item[attrRepository] = str(w.Repository)
	item[attrMessage] = str(w.Message)
	item[attrReason] = str(w.Reason)
	item[attrDetail] = str(w.Detail)
	item[attrPlace] = str(w.Place)
	item[attrWakeAt] = nanos(w.WakeAt)
	item[attrOfferedUntil] = nanos(w.OfferedUntil)
	item[attrSince] = str(w.Since.UTC().Format(timeLayout))
	item[attrTries] = numI(int64(w.Tries))
	item[attrExpires] = numI(expiry.Ceil(w.ExpiresAt))
}

func decodeWaiting(pool string, item map[string]types.AttributeValue) (room.Waiting, error) {
	dec := decoder{item: item}
	w := room.Waiting{Pool: pool, Repository: dec.str(attrRepository), Message: dec.str(attrMessage), Since: dec.time(attrSince),
		Reason: dec.str(attrReason), Detail: dec.str(attrDetail), Place: dec.str(attrPlace), Tries: int(dec.int(attrTries)),
		ExpiresAt: dec.epoch(attrExpires)}
	if n := dec.int(attrWakeAt); n != 0 {
		w.WakeAt = time.Unix(0, n).UTC()
	}
	if n := dec.int(attrOfferedUntil); n != 0 {
		w.OfferedUntil = time.Unix(0, n).UTC()
	}
	sk := dec.str(attrSK)
	id, err := strconv.ParseInt(strings.TrimLeft(strings.TrimPrefix(sk, skWaitingPrefix), "0"), 10, 64)
	if err != nil && dec.err == nil {
		dec.err = fmt.Errorf("sort key %q: %w", sk, err)
	}
	w.JobID = id
	return w, dec.err
}

// Offer implements Room: a conditional UpdateItem (live, no offer under
// way), then the repository's served time.
func (d *RoomDynamo) Offer(ctx context.Context, pool string, jobID int64, now, until time.Time) error {
	e := newExpr()
	cond := "attribute_exists(" + e.name(attrPK) + ") AND " + e.name(attrExpires) + " > " + e.value(numI(now.Unix())) +
		" AND " + e.name(attrOfferedUntil) + " <= " + e.value(numI(now.UnixNano()))
	out, err := d.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(d.table), Key: waitingKey(pool, jobID),
		UpdateExpression:    aws.String("SET " + e.name(attrOfferedUntil) + " = " + e.value(nanos(until))),
		ConditionExpression: aws.String(cond), ExpressionAttributeNames: e.names, ExpressionAttributeValues: e.values,
		ReturnValues: types.ReturnValueAllNew})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		got, gerr := d.api.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(d.table), Key: waitingKey(pool, jobID),
			ConsistentRead: aws.Bool(true)})
		if gerr != nil {
			return fmt.Errorf("offering job %d of pool %s: %w", jobID, pool, gerr)
		}
		if got.Item == nil || expired(got.Item, now) {
			return fmt.Errorf("offering job %d of pool %s: %w", jobID, pool, store.ErrNotFound)
		}
		return fmt.Errorf("offering job %d of pool %s: an offer is under way: %w", jobID, pool, store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("offering job %d of pool %s: %w", jobID, pool, err)
	}
	repo := ""
	if v, ok := out.Attributes[attrRepository].(*types.AttributeValueMemberS); ok {
		repo = v.Value
	}
	item := itemKey(roomPK(pool), skServedPrefix+repo)
	item[attrServedAt] = str(now.UTC().Format(timeLayout))
	item[attrExpires] = numI(expiry.Ceil(now.Add(room.Limit)))
	if _, err := d.api.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(d.table), Item: item}); err != nil {
		// The offer stands; only the fair order's memory of it is lost.
		return fmt.Errorf("recording repository %s served in pool %s: %w", repo, pool, err)
	}
	return nil
}

// Leave implements Room.
func (d *RoomDynamo) Leave(ctx context.Context, pool string, jobID int64) error {
	if _, err := d.api.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(d.table), Key: waitingKey(pool, jobID)}); err != nil {
		return fmt.Errorf("taking job %d out of the room of pool %s: %w", jobID, pool, err)
	}
	return nil
}

// Waiting implements Room: one consistent Query of the pool's partition.
func (d *RoomDynamo) Waiting(ctx context.Context, pool string, now time.Time) ([]room.Waiting, map[string]time.Time, error) {
	e := newExpr()
	in := &dynamodb.QueryInput{TableName: aws.String(d.table), ConsistentRead: aws.Bool(true),
		KeyConditionExpression:   aws.String(e.name(attrPK) + " = " + e.value(str(roomPK(pool)))),
		ExpressionAttributeNames: e.names, ExpressionAttributeValues: e.values}
	var out []room.Waiting
	served := map[string]time.Time{}
	items, err := queryItems(ctx, d.api, in)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the room of pool %s: %w", pool, err)
	}
	for _, item := range items {
		if expired(item, now) {
			continue
		}
		sk, _ := item[attrSK].(*types.AttributeValueMemberS)
		switch {
		case sk == nil:
		case strings.HasPrefix(sk.Value, skServedPrefix):
			dec := decoder{item: item}
			at := dec.time(attrServedAt)
			if dec.err != nil {
				return nil, nil, fmt.Errorf("decoding a served time in the room of pool %s: %w", pool, dec.err)
			}
			served[strings.TrimPrefix(sk.Value, skServedPrefix)] = at
		case strings.HasPrefix(sk.Value, skWaitingPrefix):
			w, err := decodeWaiting(pool, item)
			if err != nil {
				return nil, nil, fmt.Errorf("decoding an entry in the room of pool %s: %w", pool, err)
			}
			out = append(out, w)
		}
	}
	room.SortWaiting(out)
	return out, served, nil
}

func backoffKey(pool, place string) map[string]types.AttributeValue {
	return itemKey(roomPK(pool), skBackoffPrefix+place)
}

func decodeBackoff(pool, place string, dec *decoder) room.Backoff {
	b := room.Backoff{Pool: pool, Place: place, Failures: int(dec.int(attrFailures)), Until: time.Unix(0, dec.int(attrUntil)).UTC()}
	if n := dec.int(attrProbeAt); n != 0 {
		b.ProbeAt = time.Unix(0, n).UTC()
	}
	return b
}

// refusedTries bounds Refused's optimistic rounds: each lost round means
// another invocation moved the backoff, which is then under way.
const refusedTries = 5

// Refused implements Room: a consistent read of the place's backoff, then
// an UpdateItem conditional on the backoff read (absent, or the same failures
// and until), read again when another invocation got there first.
func (d *RoomDynamo) Refused(ctx context.Context, pool, place string, now time.Time, next func(int) time.Duration) (room.Backoff, error) {
	for range refusedTries {
		got, err := d.api.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(d.table), Key: backoffKey(pool, place),
			ConsistentRead: aws.Bool(true)})
		if err != nil {
			return room.Backoff{}, fmt.Errorf("reading the backoff of pool %s in %q: %w", pool, place, err)
		}
		var old room.Backoff
		ok := got.Item != nil
		if ok {
			dec := decoder{item: got.Item}
			old = decodeBackoff(pool, place, &dec)
			if dec.err != nil {
				return room.Backoff{}, fmt.Errorf("decoding the backoff of pool %s in %q: %w", pool, place, dec.err)
			}
		}
		b, changed := room.NextBackoff(old, ok, pool, place, now, next)
		if !changed {
			return b, nil
		}
		e := newExpr()
		update := "SET " + e.name(attrFailures) + " = " + e.value(numI(int64(b.Failures))) + ", " + e.name(attrUntil) + " = " +
			e.value(nanos(b.Until)) + ", " + e.name(attrExpires) + " = " + e.value(numI(expiry.Ceil(b.Until.Add(room.BackoffLimit))))
		var cond string
		if !ok {
			cond = "attribute_not_exists(" + e.name(attrPK) + ")"
		} else {
			cond = e.name(attrFailures) + " = " + e.value(numI(int64(old.Failures))) + " AND " + e.name(attrUntil) + " = " +
				e.value(nanos(old.Until))
		}
		// An update, not a put: the probe's time stays as ArmProbe set it.
		_, err = d.api.UpdateItem(ctx, e.update(d.table, backoffKey(pool, place), update, cond))
		if isConditionFailed(err) {
			continue
		}
		if err != nil {
			return room.Backoff{}, fmt.Errorf("recording the backoff of pool %s in %q: %w", pool, place, err)
		}
		return b, nil
	}
	return room.Backoff{}, fmt.Errorf("recording the backoff of pool %s in %q: %d rounds lost to other writers: %w", pool, place,
		refusedTries, store.ErrConflict)
}

// Recovered implements Room: one DeleteItem that returns what it deleted.
func (d *RoomDynamo) Recovered(ctx context.Context, pool, place string) (bool, error) {
	out, err := d.api.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(d.table), Key: backoffKey(pool, place),
		ReturnValues: types.ReturnValueAllOld})
	if err != nil {
		return false, fmt.Errorf("ending the backoff of pool %s in %q: %w", pool, place, err)
	}
	return len(out.Attributes) > 0, nil
}

// Backoffs implements Room: one consistent Query of the pool's backoffs.
func (d *RoomDynamo) Backoffs(ctx context.Context, pool string, now time.Time) (map[string]room.Backoff, error) {
	e := newExpr()
	in := &dynamodb.QueryInput{TableName: aws.String(d.table), ConsistentRead: aws.Bool(true),
		KeyConditionExpression: aws.String(e.name(attrPK) + " = " + e.value(str(roomPK(pool))) + " AND begins_with(" +
			e.name(attrSK) + ", " + e.value(str(skBackoffPrefix)) + ")"),
		ExpressionAttributeNames: e.names, ExpressionAttributeValues: e.values}
	items, err := queryItems(ctx, d.api, in)
	if err != nil {
		return nil, fmt.Errorf("reading the backoffs of pool %s: %w", pool, err)
	}
	out := map[string]room.Backoff{}
	for _, item := range items {
		sk, _ := item[attrSK].(*types.AttributeValueMemberS)
		if sk == nil || expired(item, now) {
			continue
		}
		place := strings.TrimPrefix(sk.Value, skBackoffPrefix)
		dec := decoder{item: item}
		b := decodeBackoff(pool, place, &dec)
		if dec.err != nil {
			return nil, fmt.Errorf("decoding the backoff of pool %s in %q: %w", pool, place, dec.err)
		}
		if b.Until.After(now) {
			out[place] = b
		}
	}
	return out, nil
}

// Resume implements Room: the pool's room in one Query, then one
// UpdateItem per entry of the place, conditional on its wake_at as read
// (an entry that entered again meanwhile keeps its new one).
func (d *RoomDynamo) Resume(ctx context.Context, pool, place string, now time.Time) (int, error) {
	ws, _, err := d.Waiting(ctx, pool, now)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, w := range ws {
		if w.Place != place || !w.WakeAt.After(now) {
			continue
		}
		e := newExpr()
		_, err := d.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(d.table), Key: waitingKey(pool, w.JobID),
			UpdateExpression: aws.String("SET " + e.name(attrWakeAt) + " = " + e.value(numI(0)) + ", " + e.name(attrOfferedUntil) +
				" = " + e.value(numI(0))),
			ConditionExpression:      aws.String(e.name(attrWakeAt) + " = " + e.value(nanos(w.WakeAt))),
			ExpressionAttributeNames: e.names, ExpressionAttributeValues: e.values})
		switch {
		case isConditionFailed(err):
		case err != nil:
			return n, fmt.Errorf("resuming job %d in the room of pool %s: %w", w.JobID, pool, err)
		default:
			n++
		}
	}
	return n, nil
}

// ArmProbe implements Room: one UpdateItem conditional on the backoff
// under way at now and no probe due after now.
func (d *RoomDynamo) ArmProbe(ctx context.Context, pool, place string, now, due time.Time) (bool, error) {
	e := newExpr()
	at := e.value(numI(now.UnixNano()))
	cond := "attribute_exists(" + e.name(attrPK) + ") AND " + e.name(attrUntil) + " > " + at + " AND (attribute_not_exists(" +
		e.name(attrProbeAt) + ") OR " + e.name(attrProbeAt) + " <= " + at + ")"
	_, err := d.api.UpdateItem(ctx, e.update(d.table, backoffKey(pool, place), "SET "+e.name(attrProbeAt)+" = "+e.value(nanos(due)), cond))
	switch {
	case isConditionFailed(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("arming the probe of pool %s in %q: %w", pool, place, err)
	}
	return true, nil
}
