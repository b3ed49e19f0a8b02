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

// RecordSecurityEvent implements store.SecurityEvents with one conditional
// PutItem: written when the job attempt has no event, or an expired one.
func (s *SecurityDynamo) RecordSecurityEvent(ctx context.Context, e store.SecurityEvent) (bool, error) {
	if err := store.ValidateSecurityEvent(e); err != nil {
		return false, err
	}
	item := map[string]types.AttributeValue{
		"pk":      &types.AttributeValueMemberS{Value: securityPartition},
		"sk":      &types.AttributeValueMemberS{Value: strconv.FormatInt(e.JobID, 10) + "#" + strconv.Itoa(e.Attempt)},
		"job_id":  &types.AttributeValueMemberN{Value: strconv.FormatInt(e.JobID, 10)},
		"attempt": &types.AttributeValueMemberN{Value: strconv.Itoa(e.Attempt)},
		"run_id":  &types.AttributeValueMemberN{Value: strconv.FormatInt(e.RunID, 10)},
		"at":      &types.AttributeValueMemberN{Value: strconv.FormatInt(e.At.UnixNano(), 10)},
		"runner":  &types.AttributeValueMemberS{Value: e.Runner},
		"reason":  &types.AttributeValueMemberS{Value: e.Reason},
	}
	putStr(item, "repository", e.Repository)
	putStr(item, "pool", e.Pool)
	putStr(item, "detail", e.Detail)
	if sec := store.ExpirySeconds(e.ExpiresAt); sec != 0 {
		item["expires_at"] = &types.AttributeValueMemberN{Value: strconv.FormatInt(sec, 10)}
	}
	_, err := s.api.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(s.table), Item: item,
		ConditionExpression: aws.String("attribute_not_exists(pk) OR expires_at <= :now"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":now": &types.AttributeValueMemberN{Value: strconv.FormatInt(s.now().Unix(), 10)}}})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("recording security event of job %d: %w", e.JobID, err)
	}
	return true, nil
}

// SecurityEvents implements store.SecurityEvents: one Query of the
// partition, paged, expired items left out.
func (s *SecurityDynamo) SecurityEvents(ctx context.Context, since time.Time) ([]store.SecurityEvent, error) {
	var out []store.SecurityEvent
	now := s.now().Unix()
	in := &dynamodb.QueryInput{TableName: aws.String(s.table), KeyConditionExpression: aws.String("pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: securityPartition}}}
	for {
		page, err := s.api.Query(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("listing security events: %w", err)
		}
		for _, it := range page.Items {
			e := store.SecurityEvent{JobID: secNum(it, "job_id"), Attempt: int(secNum(it, "attempt")), RunID: secNum(it, "run_id"),
				Repository: secStr(it, "repository"), Runner: secStr(it, "runner"), Pool: secStr(it, "pool"),
				Reason: secStr(it, "reason"), Detail: secStr(it, "detail"), At: time.Unix(0, secNum(it, "at")).UTC()}
			if exp := secNum(it, "expires_at"); exp != 0 {
				if exp <= now {
					continue
				}
				e.ExpiresAt = time.Unix(exp, 0).UTC()
			}
			if e.At.Before(since) {
				continue
			}
			out = append(out, e)
		}
		if len(page.LastEvaluatedKey) == 0 {
			break
		}
		in.ExclusiveStartKey = page.LastEvaluatedKey
	}
	store.SortSecurityEvents(out)
	return out, nil
}

func secNum(it map[string]types.AttributeValue, name string) int64 {
	if v, ok := it[name].(*types.AttributeValueMemberN); ok {
		n, _ := strconv.ParseInt(v.Value, 10, 64)
		return n
	}
	return 0
}

func secStr(it map[string]types.AttributeValue, name string) string {
	if v, ok := it[name].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}
