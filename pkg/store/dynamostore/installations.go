package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skiffci/skiff/pkg/store"
)

// InstallationsDynamoAPI is the part of the DynamoDB client the
// installation records need.
type InstallationsDynamoAPI interface {
	getItem
	putItem
}

// InstallationsDynamo keeps installation records in the state table, one
// item each: pk INSTALLATION#<id>, sk INSTALLATION (the webhook role's
// LeadingKeys list INSTALLATION#). Records do not expire.
type InstallationsDynamo struct {
	api   InstallationsDynamoAPI
	table string
}

var _ store.Installations = (*InstallationsDynamo)(nil)

// NewInstallationsDynamo returns the records in table.
func NewInstallationsDynamo(api InstallationsDynamoAPI, table string) *InstallationsDynamo {
	return &InstallationsDynamo{api: api, table: table}
}

func installationKey(id int64) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: "INSTALLATION#" + strconv.FormatInt(id, 10)},
		"sk": &types.AttributeValueMemberS{Value: "INSTALLATION"},
	}
}

// RecordInstallation implements Installations with one conditional
// PutItem: written when there is no record, or the record is not deleted
// and not newer (a deletion is written over any status but deleted).
func (s *InstallationsDynamo) RecordInstallation(ctx context.Context, in store.Installation) error {
	if err := store.ValidateInstallation(in); err != nil {
		return err
	}
	item := installationKey(in.ID)
	item["app_id"] = &types.AttributeValueMemberN{Value: strconv.FormatInt(in.AppID, 10)}
	item["account"] = &types.AttributeValueMemberS{Value: in.Account}
	item["account_type"] = &types.AttributeValueMemberS{Value: in.AccountType}
	item["status"] = &types.AttributeValueMemberS{Value: string(in.Status)}
	item["updated_at"] = &types.AttributeValueMemberN{Value: strconv.FormatInt(in.UpdatedAt.UnixNano(), 10)}
	cond := "attribute_not_exists(pk) OR (#st <> :deleted AND updated_at <= :t)"
	if in.Status == store.InstallationDeleted {
		cond = "attribute_not_exists(pk) OR #st <> :deleted"
	}
	vals := map[string]types.AttributeValue{":deleted": &types.AttributeValueMemberS{Value: string(store.InstallationDeleted)}}
	if in.Status != store.InstallationDeleted {
		vals[":t"] = item["updated_at"]
	}
	_, err := s.api.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(s.table), Item: item,
		ConditionExpression: aws.String(cond), ExpressionAttributeNames: map[string]string{"#st": "status"},
		ExpressionAttributeValues: vals})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return nil // a newer event, or the deletion, is recorded already
	}
	if err != nil {
		return fmt.Errorf("recording installation %d: %w", in.ID, err)
	}
	return nil
}

// Installation implements Installations (a strongly consistent read).
func (s *InstallationsDynamo) Installation(ctx context.Context, id int64) (store.Installation, error) {
	out, err := s.api.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.table), Key: installationKey(id),
		ConsistentRead: aws.Bool(true)})
	if err != nil {
		return store.Installation{}, fmt.Errorf("reading installation %d: %w", id, err)
	}
	if out.Item == nil {
		return store.Installation{}, store.ErrNotFound
	}
	in := store.Installation{ID: id}
	if v, ok := out.Item["app_id"].(*types.AttributeValueMemberN); ok {
		in.AppID, _ = strconv.ParseInt(v.Value, 10, 64)
	}
	if v, ok := out.Item["account"].(*types.AttributeValueMemberS); ok {
		in.Account = v.Value
	}
	if v, ok := out.Item["account_type"].(*types.AttributeValueMemberS); ok {
		in.AccountType = v.Value
	}
	if v, ok := out.Item["status"].(*types.AttributeValueMemberS); ok {
		in.Status = store.InstallationStatus(v.Value)
	}
	if v, ok := out.Item["updated_at"].(*types.AttributeValueMemberN); ok {
		n, _ := strconv.ParseInt(v.Value, 10, 64)
		in.UpdatedAt = time.Unix(0, n).UTC()
	}
	return in, nil
}
