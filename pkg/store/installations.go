package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// InstallationStatus is what skiff knows of a GitHub App installation,
// from the installation webhook:
//
//	created ──► active ──suspend──► suspended ──unsuspend──► active
//	              └──────────── deleted (final: GitHub never reuses an id) ◄──┘
type InstallationStatus string

// The installation statuses.
const (
	InstallationActive    InstallationStatus = "active"
	InstallationSuspended InstallationStatus = "suspended"
	InstallationDeleted   InstallationStatus = "deleted"
)

// Installation is the record of one App installation.
type Installation struct {
	ID          int64
	AppID       int64
	Account     string // the organization's or user's login
	AccountType string // "Organization" or "User"
	Status      InstallationStatus
	UpdatedAt   time.Time // when skiff received the event
}

// Installations records App installations. RecordInstallation stores an
// event's status: a deleted installation stays deleted whatever comes
// later, and otherwise the later event (by UpdatedAt) wins, so a replayed
// delivery changes nothing. Installation returns the record or
// ErrNotFound.
type Installations interface {
	RecordInstallation(ctx context.Context, in Installation) error
	Installation(ctx context.Context, id int64) (Installation, error)
}

// installationWins reports whether an event next replaces the record cur.
func installationWins(cur, next Installation) bool {
	return cur.Status != InstallationDeleted && (next.Status == InstallationDeleted || !next.UpdatedAt.Before(cur.UpdatedAt))
}

func checkInstallation(in Installation) error {
	switch in.Status {
	case InstallationActive, InstallationSuspended, InstallationDeleted:
	default:
		return fmt.Errorf("recording installation %d: status %q", in.ID, in.Status)
	}
	if in.ID <= 0 {
		return fmt.Errorf("recording installation: id %d", in.ID)
	}
	return nil
}

// InstallationsMemory is an in-memory Installations, for tests and for
// processes that keep no file.
type InstallationsMemory struct {
	mu sync.Mutex
	m  map[int64]Installation
}

// NewInstallationsMemory returns an empty InstallationsMemory.
func NewInstallationsMemory() *InstallationsMemory {
	return &InstallationsMemory{m: map[int64]Installation{}}
}

// RecordInstallation implements Installations.
func (s *InstallationsMemory) RecordInstallation(_ context.Context, in Installation) error {
	if err := checkInstallation(in); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.m[in.ID]; ok && !installationWins(cur, in) {
		return nil
	}
	s.m[in.ID] = in
	return nil
}

// Installation implements Installations.
func (s *InstallationsMemory) Installation(_ context.Context, id int64) (Installation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, ok := s.m[id]
	if !ok {
		return Installation{}, ErrNotFound
	}
	return in, nil
}

// InstallationsDynamoAPI is the part of the DynamoDB client the
// installation records need.
type InstallationsDynamoAPI interface {
	GetItem(ctx context.Context, params *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(ctx context.Context, params *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
}

// InstallationsDynamo keeps installation records in the state table, one
// item each: pk INSTALLATION#<id>, sk INSTALLATION (the webhook role's
// LeadingKeys list INSTALLATION#). Records do not expire.
type InstallationsDynamo struct {
	api   InstallationsDynamoAPI
	table string
}

var _ Installations = (*InstallationsDynamo)(nil)

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
func (s *InstallationsDynamo) RecordInstallation(ctx context.Context, in Installation) error {
	if err := checkInstallation(in); err != nil {
		return err
	}
	item := installationKey(in.ID)
	item["app_id"] = &types.AttributeValueMemberN{Value: strconv.FormatInt(in.AppID, 10)}
	item["account"] = &types.AttributeValueMemberS{Value: in.Account}
	item["account_type"] = &types.AttributeValueMemberS{Value: in.AccountType}
	item["status"] = &types.AttributeValueMemberS{Value: string(in.Status)}
	item["updated_at"] = &types.AttributeValueMemberN{Value: strconv.FormatInt(in.UpdatedAt.UnixNano(), 10)}
	cond := "attribute_not_exists(pk) OR (#st <> :deleted AND updated_at <= :t)"
	if in.Status == InstallationDeleted {
		cond = "attribute_not_exists(pk) OR #st <> :deleted"
	}
	vals := map[string]types.AttributeValue{":deleted": &types.AttributeValueMemberS{Value: string(InstallationDeleted)}}
	if in.Status != InstallationDeleted {
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
func (s *InstallationsDynamo) Installation(ctx context.Context, id int64) (Installation, error) {
	out, err := s.api.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.table), Key: installationKey(id),
		ConsistentRead: aws.Bool(true)})
	if err != nil {
		return Installation{}, fmt.Errorf("reading installation %d: %w", id, err)
	}
	if out.Item == nil {
		return Installation{}, ErrNotFound
	}
	in := Installation{ID: id}
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
		in.Status = InstallationStatus(v.Value)
	}
	if v, ok := out.Item["updated_at"].(*types.AttributeValueMemberN); ok {
		n, _ := strconv.ParseInt(v.Value, 10, 64)
		in.UpdatedAt = time.Unix(0, n).UTC()
	}
	return in, nil
}
