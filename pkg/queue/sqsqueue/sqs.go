package sqsqueue

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/skiffci/skiff/pkg/queue"
)

// SQSAPI is the part of the SQS client that SQS calls, with the SDK's
// signature; *sqs.Client implements it.
type SQSAPI interface {
	SendMessage(ctx context.Context, params *sqs.SendMessageInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
}

var (
	_ SQSAPI       = (*sqs.Client)(nil)
	_ queue.Sender = (*SQS)(nil)
)

// Names of the message attributes Send sets, for operators browsing the
// queue or dead-letter queue in the console and for subscription filters.
// Consumers read the body, never the attributes.
const (
	AttrPool  = "pool"   // String: the job's pool
	AttrJobID = "job_id" // Number: the GitHub workflow job id
)

// SQS is a Sender over an SQS standard queue. A standard queue, not FIFO:
// delivery is at-least-once either way, and scale-up dedupes by job id (see
// the package doc), so FIFO's ordering and five-minute dedupe window would
// only cost throughput. Its zero value is not usable: call NewSQS.
type SQS struct {
	api      SQSAPI
	queueURL string
}

// NewSQS returns a Sender that sends to the queue with the given URL.
func NewSQS(api SQSAPI, queueURL string) *SQS {
	return &SQS{api: api, queueURL: queueURL}
}

var _ queue.DelayedSender = (*SQS)(nil)

// Send implements Sender: one message per job, the body is the job as JSON
// (see EncodeMessage). A job that fails Validate or encodes past
// MaxMessageBytes is refused with ErrInvalidJob before anything is sent.
func (q *SQS) Send(ctx context.Context, job queue.Job) error { return q.SendAfter(ctx, job, 0) }

// SendAfter implements DelayedSender with the message's own DelaySeconds
// (rounded up to a second, at most MaxDelay).
func (q *SQS) SendAfter(ctx context.Context, job queue.Job, delay time.Duration) error {
	body, err := queue.EncodeMessage(job)
	if err != nil {
		return err
	}
	secs := int32((min(delay, queue.MaxDelay) + time.Second - 1) / time.Second)
	_, err = q.api.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl:     aws.String(q.queueURL),
		MessageBody:  aws.String(body),
		DelaySeconds: max(secs, 0),
		MessageAttributes: map[string]types.MessageAttributeValue{
			AttrPool:  {DataType: aws.String("String"), StringValue: aws.String(sqsSafe(job.Pool))},
			AttrJobID: {DataType: aws.String("Number"), StringValue: aws.String(strconv.FormatInt(job.JobID, 10))},
		},
	})
	if err != nil {
		return fmt.Errorf("sending job %d to SQS: %w", job.JobID, err)
	}
	return nil
}

// sqsSafe replaces the characters SQS refuses in a string attribute value
// (outside #x9 #xA #xD #x20-#xD7FF #xE000-#xFFFD #x10000-#x10FFFF) with U+FFFD.
func sqsSafe(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\t' || r == '\n' || r == '\r',
			r >= 0x20 && r <= 0xD7FF,
			r >= 0xE000 && r <= 0xFFFD,
			r >= 0x10000 && r <= 0x10FFFF:
			return r
		}
		return '\uFFFD'
	}, s)
}
