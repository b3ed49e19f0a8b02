package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// SQSAPI is the part of the SQS client that SQS calls, with the SDK's
// signature; *sqs.Client implements it.
type SQSAPI interface {
	SendMessage(ctx context.Context, params *sqs.SendMessageInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
}

var (
	_ SQSAPI = (*sqs.Client)(nil)
	_ Sender = (*SQS)(nil)
)

// MaxMessageBytes bounds the encoded body of one message. SQS accepts 256 KiB
// for body and attributes together; a real job encodes to well under 1 KiB,
// so a body past 64 KiB means a payload gone wrong (thousands of labels). It
// is refused as invalid, never truncated, and leaves SQS's limit far away.
const MaxMessageBytes = 64 << 10

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

var _ DelayedSender = (*SQS)(nil)

// Send implements Sender: one message per job, the body is the job as JSON
// (see EncodeMessage). A job that fails Validate or encodes past
// MaxMessageBytes is refused with ErrInvalidJob before anything is sent.
func (q *SQS) Send(ctx context.Context, job Job) error { return q.SendAfter(ctx, job, 0) }

// SendAfter implements DelayedSender with the message's own DelaySeconds
// (rounded up to a second, at most MaxDelay).
func (q *SQS) SendAfter(ctx context.Context, job Job, delay time.Duration) error {
	body, err := EncodeMessage(job)
	if err != nil {
		return err
	}
	secs := int32((min(delay, MaxDelay) + time.Second - 1) / time.Second)
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

// EncodeMessage returns the message body of a valid job: its JSON, with
// every character SQS accepts in a body (U+FFFE and U+FFFF, which SQS
// refuses, are written as JSON escapes). It returns ErrInvalidJob for a job
// that fails Validate or encodes past MaxMessageBytes.
func EncodeMessage(job Job) (string, error) {
	if err := job.Validate(); err != nil {
		return "", invalid(err)
	}
	b, err := json.Marshal(job)
	if err != nil {
		return "", invalid(fmt.Errorf("encoding job: %w", err))
	}
	// encoding/json already escapes control characters and replaces invalid
	// UTF-8; the two noncharacters it leaves can occur only inside strings.
	body := bodyEscaper.Replace(string(b))
	if len(body) > MaxMessageBytes {
		return "", invalid(fmt.Errorf("message body is %d bytes, more than %d", len(body), MaxMessageBytes))
	}
	return body, nil
}

// DecodeMessage parses a message body written by EncodeMessage and validates
// the job. It returns ErrInvalidJob for a body that is not a valid job (no
// redelivery can fix it: dead-letter it). Unknown fields are ignored, so a
// newer sender can add fields during a rolling deploy.
func DecodeMessage(body string) (Job, error) {
	var j Job
	if err := json.Unmarshal([]byte(body), &j); err != nil {
		return Job{}, invalid(fmt.Errorf("decoding job: %w", err))
	}
	if err := j.Validate(); err != nil {
		return Job{}, invalid(err)
	}
	return j, nil
}

var bodyEscaper = strings.NewReplacer("\uFFFE", `\ufffe`, "\uFFFF", `\uffff`)

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
