package sqsqueue

import (
	"context"
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/skiffci/skiff/pkg/queue"
)

// SQSReceiveAPI is the part of the SQS client SQSReceiver calls, with the
// SDK's signatures; *sqs.Client implements it.
type SQSReceiveAPI interface {
	ReceiveMessage(ctx context.Context, params *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessage(ctx context.Context, params *sqs.DeleteMessageInput, optFns ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error)
}

var (
	_ SQSReceiveAPI      = (*sqs.Client)(nil)
	_ queue.Receiver     = (*SQSReceiver)(nil)
	_ queue.DeadLetterer = (*SQSDeadLetters)(nil)
)

// receiveWaitSeconds is the long poll of one Receive: it keeps an idle
// consumer to a few calls a minute (SQS bills per call) and a new job
// waiting no longer than it takes SQS to answer.
const receiveWaitSeconds = 5

// SQSReceiver receives jobs from an SQS queue, for consumers outside
// Lambda, and completes them: Done deletes, Retry lets the visibility timeout
// bring the message back, DeadLetter sends it to the dead-letter queue
// through dl and then deletes it.
type SQSReceiver struct {
	api SQSReceiveAPI
	url string
	dl  queue.DeadLetterer
}

// NewSQSReceiver returns a receiver of the queue at url that dead-letters through dl.
func NewSQSReceiver(api SQSReceiveAPI, url string, dl queue.DeadLetterer) *SQSReceiver {
	return &SQSReceiver{api: api, url: url, dl: dl}
}

// Receive implements Receiver (a long poll of up to 5 s; SQS returns at most 10).
func (r *SQSReceiver) Receive(ctx context.Context, limit int) ([]queue.Delivery, error) {
	out, err := r.api.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(r.url), MaxNumberOfMessages: int32(min(max(limit, 1), 10)), WaitTimeSeconds: receiveWaitSeconds,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount},
	})
	if err != nil {
		return nil, fmt.Errorf("receiving from SQS: %w", err)
	}
	ds := make([]queue.Delivery, 0, len(out.Messages))
	for _, m := range out.Messages {
		n := queue.ParseReceiveCount(m.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)])
		ds = append(ds, queue.NewDelivery(aws.ToString(m.MessageId), aws.ToString(m.Body), n, aws.ToString(m.ReceiptHandle)))
	}
	return ds, nil
}

// Complete implements Receiver.
func (r *SQSReceiver) Complete(ctx context.Context, d queue.Delivery, a queue.Answer) error {
	switch a.Verdict {
	case queue.Retry:
		return nil
	case queue.DeadLetter:
		if err := r.dl.DeadLetter(ctx, d, a.Reason, a.Detail); err != nil {
			return err
		}
	}
	if _, err := r.api.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(r.url), ReceiptHandle: aws.String(d.Receipt)}); err != nil {
		return fmt.Errorf("deleting message %s: %w", d.ID, err)
	}
	return nil
}

// SQSDeadLetters sends dead letters to the dead-letter queue: the original
// body unchanged (so it can be redriven to the job queue as is), with the
// message attributes reason, job_id, receive_count, source_message_id and,
// when there is one, detail.
type SQSDeadLetters struct {
	api SQSAPI
	url string
}

// NewSQSDeadLetters returns a dead-letterer to the queue at url.
func NewSQSDeadLetters(api SQSAPI, url string) *SQSDeadLetters {
	return &SQSDeadLetters{api: api, url: url}
}

// DeadLetter implements DeadLetterer.
func (q *SQSDeadLetters) DeadLetter(ctx context.Context, d queue.Delivery, reason, detail string) error {
	str := func(v string) types.MessageAttributeValue {
		return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(sqsSafe(v))}
	}
	num := func(v int64) types.MessageAttributeValue {
		return types.MessageAttributeValue{DataType: aws.String("Number"), StringValue: aws.String(strconv.FormatInt(v, 10))}
	}
	attrs := map[string]types.MessageAttributeValue{
		"reason":            str(reason),
		"receive_count":     num(int64(d.ReceiveCount)),
		"source_message_id": str(d.ID),
	}
	if d.Job.JobID > 0 {
		attrs["job_id"] = num(d.Job.JobID)
	}
	if detail != "" { // SQS refuses empty attribute values
		attrs["detail"] = str(detail)
	}
	_, err := q.api.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl: aws.String(q.url), MessageBody: aws.String(d.Body), MessageAttributes: attrs,
	})
	if err != nil {
		return fmt.Errorf("dead-lettering message %s: %w", d.ID, err)
	}
	return nil
}
