package dynamostore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skiffci/skiff/pkg/store"
)

// RunnerVersionPartition holds the runner release list (sk RELEASES), the
// pools' holds (sk HOLD#<pool>) and their installed runner versions (sk
// INSTALLED#<pool>): a handful of items, one Query lists each kind.
const (
	RunnerVersionPartition = "RVERSION#" // names.RunnerStatePartition, which the CDK app scopes by
	releasesSK             = "RELEASES"
	holdSKPrefix           = "HOLD#"
	installedSKPrefix      = "INSTALLED#"
)

// RunnerDynamoAPI is the part of the DynamoDB client the runner state needs.
type RunnerDynamoAPI interface {
	getItem
	putItem
	query
	deleteItem
}

// RunnerDynamo keeps store.RunnerState in the state table: pk RVERSION#.
// The release list is one item whose releases attribute is JSON (a few KB:
// one page of releases, versions, dates and checksums).
type RunnerDynamo struct {
	api   RunnerDynamoAPI
	table string
}

var _ store.RunnerState = (*RunnerDynamo)(nil)

// NewRunnerDynamo returns the runner state in table.
func NewRunnerDynamo(api RunnerDynamoAPI, table string) *RunnerDynamo {
	return &RunnerDynamo{api: api, table: table}
}

func versionKey(sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: RunnerVersionPartition},
		"sk": &types.AttributeValueMemberS{Value: sk},
	}
}

// RunnerReleases implements store.RunnerState with one consistent GetItem.
func (s *RunnerDynamo) RunnerReleases(ctx context.Context) (store.ReleaseList, error) {
	out, err := s.api.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.table), Key: versionKey(releasesSK),
		ConsistentRead: aws.Bool(true)})
	if err != nil {
		return store.ReleaseList{}, fmt.Errorf("reading runner releases: %w", err)
	}
	if len(out.Item) == 0 {
		return store.ReleaseList{}, store.ErrNotFound
	}
	var it releasesItem
	if err := attributevalue.UnmarshalMap(out.Item, &it); err != nil {
		return store.ReleaseList{}, fmt.Errorf("decoding runner releases: %w", err)
	}
	l := store.ReleaseList{FetchedAt: time.Unix(0, it.FetchedAt).UTC()}
	if err := json.Unmarshal([]byte(it.Releases), &l.Releases); err != nil {
		return store.ReleaseList{}, fmt.Errorf("decoding runner releases: %w", err)
	}
	return l, nil
}

// releasesItem is the shared release list as the table keeps it: the
// releases as one JSON string, fetched_at in Unix nanoseconds.
type releasesItem struct {
	FetchedAt int64  `dynamodbav:"fetched_at"`
	Releases  string `dynamodbav:"releases"`
}

// holdItem is a pool's hold as the table keeps it (attributevalue's
// encoding): times are numbers, in Unix nanoseconds.
type holdItem struct {
	Pool     string `dynamodbav:"pool"`
	Version  string `dynamodbav:"version"`
	Launched string `dynamodbav:"launched,omitempty"`
	Reason   string `dynamodbav:"reason"`
	Detail   string `dynamodbav:"detail,omitempty"`
	At       int64  `dynamodbav:"at"`
	Until    int64  `dynamodbav:"until,omitempty"`
}

// PutRunnerReleases implements store.RunnerState with one PutItem.
func (s *RunnerDynamo) PutRunnerReleases(ctx context.Context, l store.ReleaseList) error {
	raw, err := json.Marshal(l.Releases)
	if err != nil {
		return fmt.Errorf("encoding runner releases: %w", err)
	}
	item, err := attributevalue.MarshalMap(releasesItem{FetchedAt: l.FetchedAt.UnixNano(), Releases: string(raw)})
	if err != nil {
		return fmt.Errorf("encoding runner releases: %w", err)
	}
	for k, v := range versionKey(releasesSK) {
		item[k] = v
	}
	if _, err := s.api.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(s.table), Item: item}); err != nil {
		return fmt.Errorf("storing runner releases: %w", err)
	}
	return nil
}

// HoldPool implements store.RunnerState with one conditional PutItem:
// written unless the pool is held for the same version.
func (s *RunnerDynamo) HoldPool(ctx context.Context, h store.RunnerHold) (bool, error) {
	if err := store.ValidateRunnerHold(h); err != nil {
		return false, err
	}
	it := holdItem{Pool: h.Pool, Version: h.Version, Launched: h.Launched, Reason: h.Reason, Detail: h.Detail, At: h.At.UnixNano()}
	if !h.Until.IsZero() {
		it.Until = h.Until.UnixNano()
	}
	item, err := attributevalue.MarshalMap(it)
	if err != nil {
		return false, fmt.Errorf("encoding pool %s's hold: %w", h.Pool, err)
	}
	for k, v := range versionKey(holdSKPrefix + h.Pool) {
		item[k] = v
	}
	written, err := conditionalPut(ctx, s.api, &dynamodb.PutItemInput{TableName: aws.String(s.table), Item: item,
		ConditionExpression:       aws.String("attribute_not_exists(pk) OR version <> :v"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":v": &types.AttributeValueMemberS{Value: h.Version}}})
	if err != nil {
		return false, fmt.Errorf("holding pool %s: %w", h.Pool, err)
	}
	return written, nil
}

// PoolHolds implements store.RunnerState: one Query of the partition.
func (s *RunnerDynamo) PoolHolds(ctx context.Context) ([]store.RunnerHold, error) {
	items, err := queryPrefix[holdItem](ctx, s, holdSKPrefix)
	if err != nil {
		return nil, fmt.Errorf("listing pool holds: %w", err)
	}
	out := make([]store.RunnerHold, 0, len(items))
	for _, it := range items {
		h := store.RunnerHold{Pool: it.Pool, Version: it.Version, Launched: it.Launched, Reason: it.Reason,
			Detail: it.Detail, At: time.Unix(0, it.At).UTC()}
		if it.Until != 0 {
			h.Until = time.Unix(0, it.Until).UTC()
		}
		out = append(out, h)
	}
	store.SortRunnerHolds(out)
	return out, nil
}

// queryPrefix decodes every item of the partition whose sort key starts
// with prefix, over all pages of one consistent Query.
func queryPrefix[T any](ctx context.Context, s *RunnerDynamo, prefix string) ([]T, error) {
	in := &dynamodb.QueryInput{TableName: aws.String(s.table),
		KeyConditionExpression: aws.String("pk = :pk AND begins_with(sk, :prefix)"), ConsistentRead: aws.Bool(true),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk":     &types.AttributeValueMemberS{Value: RunnerVersionPartition},
			":prefix": &types.AttributeValueMemberS{Value: prefix}}}
	return queryDecoded[T](ctx, s.api, in)
}

// queryDecoded runs a Query over all its pages and decodes every item with
// the SDK's attributevalue package.
func queryDecoded[T any](ctx context.Context, api query, in *dynamodb.QueryInput) ([]T, error) {
	items, err := queryItems(ctx, api, in)
	if err != nil {
		return nil, err
	}
	var out []T
	if err := attributevalue.UnmarshalListOfMaps(items, &out); err != nil {
		return nil, fmt.Errorf("decoding: %w", err)
	}
	return out, nil
}

// installedItem is a pool's installed runner version as the table keeps it.
type installedItem struct {
	Pool    string `dynamodbav:"pool"`
	Version string `dynamodbav:"version"`
	SeenAt  int64  `dynamodbav:"seen_at"`
}

// PutInstalled implements store.RunnerState with one PutItem.
func (s *RunnerDynamo) PutInstalled(ctx context.Context, in store.InstalledRunner) error {
	if err := store.ValidateInstalled(in); err != nil {
		return err
	}
	item, err := attributevalue.MarshalMap(installedItem{Pool: in.Pool, Version: in.Version, SeenAt: in.SeenAt.UnixNano()})
	if err != nil {
		return fmt.Errorf("encoding pool %s's installed runner: %w", in.Pool, err)
	}
	for k, v := range versionKey(installedSKPrefix + in.Pool) {
		item[k] = v
	}
	if _, err := s.api.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(s.table), Item: item}); err != nil {
		return fmt.Errorf("recording pool %s's installed runner: %w", in.Pool, err)
	}
	return nil
}

// InstalledRunners implements store.RunnerState: one Query of the partition.
func (s *RunnerDynamo) InstalledRunners(ctx context.Context) ([]store.InstalledRunner, error) {
	items, err := queryPrefix[installedItem](ctx, s, installedSKPrefix)
	if err != nil {
		return nil, fmt.Errorf("listing installed runners: %w", err)
	}
	out := make([]store.InstalledRunner, 0, len(items))
	for _, it := range items {
		out = append(out, store.InstalledRunner{Pool: it.Pool, Version: it.Version, SeenAt: time.Unix(0, it.SeenAt).UTC()})
	}
	store.SortInstalled(out)
	return out, nil
}

// ReleasePool implements store.RunnerState with one DeleteItem.
func (s *RunnerDynamo) ReleasePool(ctx context.Context, pool string) error {
	if _, err := s.api.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(s.table), Key: versionKey(holdSKPrefix + pool)}); err != nil {
		return fmt.Errorf("releasing pool %s: %w", pool, err)
	}
	return nil
}
