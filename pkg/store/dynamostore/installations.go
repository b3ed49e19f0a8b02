package dynamostore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
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

// installationPK and installationSK are an installation record's keys.
func installationPK(id int64) string { return "INSTALLATION#" + strconv.FormatInt(id, 10) }

const installationSK = "INSTALLATION"

func installationKey(id int64) map[string]types.AttributeValue {
	return itemKey(installationPK(id), installationSK)
}

// installationItem is an installation's record, marshalled by the SDK's
// attributevalue package; updated_at is in Unix nanoseconds.
type installationItem struct {
	PK          string `dynamodbav:"pk"`
	SK          string `dynamodbav:"sk"`
	AppID       int64  `dynamodbav:"app_id"`
	Account     string `dynamodbav:"account"`
	AccountType string `dynamodbav:"account_type"`
	Status      string `dynamodbav:"status"`
	UpdatedAt   int64  `dynamodbav:"updated_at"`
}

// RecordInstallation implements Installations with one conditional
// PutItem: written when there is no record, or the record is not deleted
// and not newer (a deletion is written over any status but deleted).
func (s *InstallationsDynamo) RecordInstallation(ctx context.Context, in store.Installation) error {
	if err := store.ValidateInstallation(in); err != nil {
		return err
	}
	item, err := attributevalue.MarshalMap(installationItem{
		PK: installationPK(in.ID), SK: installationSK,
		AppID: in.AppID, Account: in.Account, AccountType: in.AccountType, Status: string(in.Status), UpdatedAt: in.UpdatedAt.UnixNano(),
	})
	if err != nil {
		return fmt.Errorf("encoding installation %d: %w", in.ID, err)
	}
	cond := "attribute_not_exists(pk) OR (#st <> :deleted AND updated_at <= :t)"
	if in.Status == store.InstallationDeleted {
		cond = "attribute_not_exists(pk) OR #st <> :deleted"
	}
	vals := map[string]types.AttributeValue{":deleted": &types.AttributeValueMemberS{Value: string(store.InstallationDeleted)}}
	if in.Status != store.InstallationDeleted {
		vals[":t"] = item["updated_at"]
	}
	// Not written: a newer event, or the deletion, is recorded already.
	_, err = conditionalPut(ctx, s.api, &dynamodb.PutItemInput{TableName: aws.String(s.table), Item: item,
		ConditionExpression: aws.String(cond), ExpressionAttributeNames: map[string]string{"#st": "status"},
		ExpressionAttributeValues: vals})
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
	var it installationItem
	if err := attributevalue.UnmarshalMap(out.Item, &it); err != nil {
		return store.Installation{}, fmt.Errorf("decoding installation %d: %w", id, err)
	}
	return store.Installation{ID: id, AppID: it.AppID, Account: it.Account, AccountType: it.AccountType,
		Status: store.InstallationStatus(it.Status), UpdatedAt: time.Unix(0, it.UpdatedAt).UTC()}, nil
}
