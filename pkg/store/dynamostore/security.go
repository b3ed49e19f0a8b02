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
	"github.com/skiffci/skiff/pkg/store/expiry"
)

// securityPartition holds every security event: they are rare (each one is
// an alarm), so one partition lists them with one Query. The webhook
// role's LeadingKeys list SECURITY#.
const securityPartition = "SECURITY#"

// SecurityDynamoAPI is the part of the DynamoDB client the security events
// need.
type SecurityDynamoAPI interface {
	putItem
	query
}

// SecurityDynamo keeps the security events in the state table: pk
// SECURITY#, sk <job id>#<attempt>, TTL on expires_at.
type SecurityDynamo struct {
	api   SecurityDynamoAPI
	table string
	now   func() time.Time
}

var _ store.SecurityEvents = (*SecurityDynamo)(nil)

// NewSecurityDynamo returns the security events in table.
func NewSecurityDynamo(api SecurityDynamoAPI, table string) *SecurityDynamo {
	return &SecurityDynamo{api: api, table: table, now: time.Now}
}

// securityItem is a security event's item, marshalled by the SDK's
// attributevalue package: ids and times are numbers (at in Unix
// nanoseconds, expires_at in epoch seconds), an optional string or
// expires_at absent when empty.
type securityItem struct {
	PK         string `dynamodbav:"pk"`
	SK         string `dynamodbav:"sk"`
	JobID      int64  `dynamodbav:"job_id"`
	Attempt    int    `dynamodbav:"attempt"`
	RunID      int64  `dynamodbav:"run_id"`
	At         int64  `dynamodbav:"at"`
	Runner     string `dynamodbav:"runner"`
	Reason     string `dynamodbav:"reason"`
	Repository string `dynamodbav:"repository,omitempty"`
	Pool       string `dynamodbav:"pool,omitempty"`
	Detail     string `dynamodbav:"detail,omitempty"`
	ExpiresAt  int64  `dynamodbav:"expires_at,omitempty"`
}

// RecordSecurityEvent implements store.SecurityEvents with one conditional
// PutItem: written when the job attempt has no event, or an expired one.
func (s *SecurityDynamo) RecordSecurityEvent(ctx context.Context, e store.SecurityEvent) (bool, error) {
	if err := store.ValidateSecurityEvent(e); err != nil {
		return false, err
	}
	item, err := attributevalue.MarshalMap(securityItem{
		PK: securityPartition, SK: strconv.FormatInt(e.JobID, 10) + "#" + strconv.Itoa(e.Attempt),
		JobID: e.JobID, Attempt: e.Attempt, RunID: e.RunID, At: e.At.UnixNano(), Runner: e.Runner, Reason: e.Reason,
		Repository: e.Repository, Pool: e.Pool, Detail: e.Detail, ExpiresAt: expiry.Seconds(e.ExpiresAt),
	})
	if err != nil {
		return false, fmt.Errorf("encoding security event of job %d: %w", e.JobID, err)
	}
	written, err := conditionalPut(ctx, s.api, &dynamodb.PutItemInput{TableName: aws.String(s.table), Item: item,
		ConditionExpression: aws.String("attribute_not_exists(pk) OR expires_at <= :now"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":now": &types.AttributeValueMemberN{Value: strconv.FormatInt(s.now().Unix(), 10)}}})
	if err != nil {
		return false, fmt.Errorf("recording security event of job %d: %w", e.JobID, err)
	}
	return written, nil
}

// SecurityEvents implements store.SecurityEvents: one Query of the
// partition, paged, expired items left out.
func (s *SecurityDynamo) SecurityEvents(ctx context.Context, since time.Time) ([]store.SecurityEvent, error) {
	var out []store.SecurityEvent
	now := s.now().Unix()
	in := &dynamodb.QueryInput{TableName: aws.String(s.table), KeyConditionExpression: aws.String("pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: securityPartition}}}
	items, err := queryDecoded[securityItem](ctx, s.api, in)
	if err != nil {
		return nil, fmt.Errorf("listing security events: %w", err)
	}
	for _, it := range items {
		if it.ExpiresAt != 0 && it.ExpiresAt <= now {
			continue
		}
		e := store.SecurityEvent{JobID: it.JobID, Attempt: it.Attempt, RunID: it.RunID, Repository: it.Repository,
			Runner: it.Runner, Pool: it.Pool, Reason: it.Reason, Detail: it.Detail, At: time.Unix(0, it.At).UTC()}
		if it.ExpiresAt != 0 {
			e.ExpiresAt = time.Unix(it.ExpiresAt, 0).UTC()
		}
		if e.At.Before(since) {
			continue
		}
		out = append(out, e)
	}
	store.SortSecurityEvents(out)
	return out, nil
}
