// Package recordstore keeps metrics records in DynamoDB: the AWS side of
// metrics.Records.
//
// Key design: the records live in skiff's state table (or a table of their
// own: the layout is the same), one item per job and run attempt:
//
//	pk                              sk      attributes
//	RECORD#<job id>#<run attempt>   RECORD  record (the record's JSON, as validated),
//	                                        repository, workflow, pool, instance_type
//	                                        (lower case, for filters), ended_at (UTC,
//	                                        fixed width), expires_at (TTL, epoch s)
//
// Put is one conditional PutItem (the key is absent, or its item expired):
// exactly one record per key, however many times the reconciler runs. The
// record's JSON is stored whole, so that what is read back is byte for byte
// what was validated. List scans the table for the kind (with server-side
// filters); reports read rarely, so a scan is cheaper than an index paid on
// every write. Items past expires_at are treated as gone at once.
package recordstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skiffci/skiff/pkg/metrics"
)

// API is the part of the DynamoDB client Dynamo calls, with the SDK's
// signatures; *dynamodb.Client implements it.
type API interface {
	PutItem(ctx context.Context, params *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	Scan(ctx context.Context, params *dynamodb.ScanInput, optFns ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
}

var (
	_ API             = (*dynamodb.Client)(nil)
	_ metrics.Records = (*Dynamo)(nil)
)

// DefaultRetention is how long a record is kept (its TTL): 400 days, so
// that a year-over-year comparison and a few months' right-sizing fit.
const DefaultRetention = 400 * 24 * time.Hour

const (
	attrPK       = "pk"
	attrSK       = "sk"
	attrRecord   = "record"
	attrRepo     = "repository"
	attrWorkflow = "workflow"
	attrPool     = "pool"
	attrType     = "instance_type"
	attrEnded    = "ended_at"
	attrExpires  = "expires_at"

	kindPrefix = "RECORD#"
	kindSK     = "RECORD"
	timeLayout = "2006-01-02T15:04:05.000000000Z"
)

// Dynamo is a metrics.Records over a DynamoDB table with string keys pk
// and sk. Build it with New.
type Dynamo struct {
	api       API
	table     string
	retention time.Duration
	now       func() time.Time
}

// Option configures a Dynamo.
type Option func(*Dynamo)

// WithRetention sets how long records are kept (the TTL); 0 keeps them
// forever.
func WithRetention(d time.Duration) Option { return func(s *Dynamo) { s.retention = d } }

// WithClock sets the clock that expiry is measured against.
func WithClock(now func() time.Time) Option { return func(s *Dynamo) { s.now = now } }

// New returns a record store over table.
func New(api API, table string, opts ...Option) *Dynamo {
	d := &Dynamo{api: api, table: table, retention: DefaultRetention, now: time.Now}
	for _, o := range opts {
		o(d)
	}
	return d
}

func key(k metrics.Key) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		attrPK: &types.AttributeValueMemberS{Value: kindPrefix + k.String()},
		attrSK: &types.AttributeValueMemberS{Value: kindSK},
	}
}

func str(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }
func num(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

// Put implements metrics.Records.
func (d *Dynamo) Put(ctx context.Context, r metrics.Record) error {
	data, err := metrics.Encode(ctx, r)
	if err != nil {
		return err
	}
	now := d.now()
	item := key(r.Key())
	item[attrRecord] = str(string(data))
	for attr, v := range map[string]string{attrRepo: r.Repository, attrWorkflow: r.WorkflowName, attrPool: r.Pool, attrType: r.InstanceType} {
		if v != "" {
			item[attr] = str(strings.ToLower(v))
		}
	}
	if end := r.End(); !end.IsZero() {
		item[attrEnded] = str(end.UTC().Format(timeLayout))
	}
	if d.retention > 0 {
		item[attrExpires] = num(now.Add(d.retention).Unix() + 1)
	}
	_, err = d.api.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                 aws.String(d.table),
		Item:                      item,
		ConditionExpression:       aws.String("attribute_not_exists(#pk) OR #exp <= :now"),
		ExpressionAttributeNames:  map[string]string{"#pk": attrPK, "#exp": attrExpires},
		ExpressionAttributeValues: map[string]types.AttributeValue{":now": num(now.Unix())},
	})
	var ccf *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &ccf):
		return fmt.Errorf("putting metrics record %s: %w", r.Key(), metrics.ErrExists)
	case err != nil:
		return fmt.Errorf("putting metrics record %s: %w", r.Key(), err)
	}
	return nil
}

// List implements metrics.Records with a paginated Scan.
func (d *Dynamo) List(ctx context.Context, f metrics.Filter) iter.Seq2[metrics.Record, error] {
	return func(yield func(metrics.Record, error) bool) {
		names := map[string]string{"#pk": attrPK, "#sk": attrSK}
		values := map[string]types.AttributeValue{":kind": str(kindPrefix), ":sk": str(kindSK), ":now": num(d.now().Unix())}
		cond := []string{"begins_with(#pk, :kind)", "#sk = :sk", "(attribute_not_exists(#exp) OR #exp > :now)"}
		names["#exp"] = attrExpires
		for i, c := range []struct{ attr, v string }{{attrRepo, f.Repository}, {attrWorkflow, f.Workflow}, {attrPool, f.Pool}, {attrType, f.InstanceType}} {
			if c.v == "" {
				continue
			}
			n, v := fmt.Sprintf("#f%d", i), fmt.Sprintf(":f%d", i)
			names[n], values[v] = c.attr, str(strings.ToLower(c.v))
			cond = append(cond, n+" = "+v)
		}
		if !f.Since.IsZero() {
			names["#end"], values[":since"] = attrEnded, str(f.Since.UTC().Format(timeLayout))
			cond = append(cond, "#end >= :since")
		}
		in := &dynamodb.ScanInput{
			TableName:                 aws.String(d.table),
			FilterExpression:          aws.String(strings.Join(cond, " AND ")),
			ExpressionAttributeNames:  names,
			ExpressionAttributeValues: values,
			ProjectionExpression:      aws.String("#rec"),
		}
		names["#rec"] = attrRecord
		for {
			out, err := d.api.Scan(ctx, in)
			if err != nil {
				yield(metrics.Record{}, fmt.Errorf("listing metrics records: %w", err))
				return
			}
			for _, item := range out.Items {
				s, ok := item[attrRecord].(*types.AttributeValueMemberS)
				if !ok {
					continue
				}
				var r metrics.Record
				if err := json.Unmarshal([]byte(s.Value), &r); err != nil {
					if !yield(metrics.Record{}, fmt.Errorf("decoding metrics record: %w", err)) {
						return
					}
					continue
				}
				if f.Match(&r) && !yield(r, nil) {
					return
				}
			}
			if len(out.LastEvaluatedKey) == 0 {
				return
			}
			in.ExclusiveStartKey = out.LastEvaluatedKey
		}
	}
}
