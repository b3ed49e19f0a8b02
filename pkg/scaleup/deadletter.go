package scaleup

import (
	"context"
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// DeadLetters receives the jobs scale-up gives up on, with the reason (a
// short fixed name, e.g. ec2_quota) and a detail for the operator (EC2's
// error and the quota to raise; may be empty; never a secret).
// DeadLetter returns nil only when the message is durably queued.
type DeadLetters interface {
	DeadLetter(ctx context.Context, msg SQSMessage, jobID int64, reason, detail string) error
}

// SQSAPI is the part of the SQS client SQSDeadLetters calls; *sqs.Client
// implements it.
type SQSAPI interface {
	SendMessage(ctx context.Context, params *sqs.SendMessageInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
}

var _ SQSAPI = (*sqs.Client)(nil)

// SQSDeadLetters sends dead letters to the dead-letter queue: the original
// body unchanged (so it can be redriven to the job queue as is), with the
// message attributes reason, job_id, receive_count, source_message_id and,
// when there is one, detail.
type SQSDeadLetters struct {
	api SQSAPI
	url string
}

var _ DeadLetters = (*SQSDeadLetters)(nil)

// NewSQSDeadLetters returns a sender to the queue at url.
func NewSQSDeadLetters(api SQSAPI, url string) *SQSDeadLetters {
	return &SQSDeadLetters{api: api, url: url}
}

// DeadLetter implements DeadLetters.
func (d *SQSDeadLetters) DeadLetter(ctx context.Context, msg SQSMessage, jobID int64, reason, detail string) error {
	str := func(v string) types.MessageAttributeValue {
		return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
	}
	num := func(v int64) types.MessageAttributeValue {
		return types.MessageAttributeValue{DataType: aws.String("Number"), StringValue: aws.String(strconv.FormatInt(v, 10))}
	}
	attrs := map[string]types.MessageAttributeValue{
		"reason":            str(reason),
		"receive_count":     num(int64(msg.ReceiveCount())),
		"source_message_id": str(msg.MessageID),
	}
	if jobID > 0 {
		attrs["job_id"] = num(jobID)
	}
	if detail != "" { // SQS refuses empty attribute values
		attrs["detail"] = str(detail)
	}
	_, err := d.api.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl: aws.String(d.url), MessageBody: aws.String(msg.Body), MessageAttributes: attrs,
	})
	if err != nil {
		return fmt.Errorf("dead-lettering message %s: %w", msg.MessageID, err)
	}
	return nil
}
