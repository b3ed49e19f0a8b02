//go:build linux

package sqsqueue_test

import (
	"errors"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/queue"
	"github.com/skiffci/skiff/pkg/queue/sqsqueue"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestSQSAgainstGoaws sends to goaws through the SDK, and receives what a
// consumer would: the body, the attributes, and the SDK's MD5 checks of
// both on the way in.
func TestSQSAgainstGoaws(t *testing.T) {
	t.Parallel()
	client := testenv.Goaws(t, "skiff-jobs")
	testSQSAgainst(t, client, client, testenv.QueueURL(t, client, "skiff-jobs"), "http://127.0.0.1:4100/100010001000/no-such-queue")
}

// TestSQSAgainstMoto sends to moto's SQS through the SDK, and receives
// through it.
func TestSQSAgainstMoto(t *testing.T) {
	t.Parallel()
	endpoint := testenv.Moto(t)
	calls := &testenv.CountingTransport{}
	cfg := testenv.AWSConfig(t)
	cfg.HTTPClient = &http.Client{Transport: calls}
	client := sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.BaseEndpoint = aws.String(endpoint) })
	testSQSAgainst(t, client, client, testenv.NewQueue(t, client, "skiff-jobs-moto"), endpoint+"/123456789012/no-such-queue")
	if n := calls.Take()["SendMessage"]; n != 4 {
		t.Errorf("%d SendMessage requests, want 4 (3 jobs, 1 to a missing queue; the invalid job is never sent)", n)
	}
}

// testSQSAgainst sends jobs through api to an emulator's queue at url,
// receives them through client, and sends to a queue that does not exist.
func testSQSAgainst(t *testing.T, client *sqs.Client, api sqsqueue.SQSAPI, url, missing string) {
	ctx := t.Context()
	q := sqsqueue.NewSQS(api, url)

	unicode := jobN(3)
	unicode.Labels = []string{"self-hosted", "gpu-🚀", "tab\tand\u2028separator"}
	want := []queue.Job{jobN(1), jobN(2), unicode}
	for _, j := range want {
		if err := q.Send(ctx, j); err != nil {
			t.Fatalf("Send(%d): %v", j.JobID, err)
		}
	}
	invalidJob := jobN(4)
	invalidJob.Labels = nil
	if err := q.Send(ctx, invalidJob); !errors.Is(err, queue.ErrInvalidJob) {
		t.Errorf("Send(invalid) = %v, want ErrInvalidJob", err)
	}

	var got []queue.Job
	for range 10 { // goaws returns what is there; a standard queue may split the batch
		out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: 10, MessageAttributeNames: []string{"All"},
		})
		if err != nil {
			t.Fatalf("ReceiveMessage: %v", err)
		}
		for _, m := range out.Messages {
			j, err := queue.DecodeMessage(aws.ToString(m.Body))
			if err != nil {
				t.Fatalf("DecodeMessage(%q): %v", aws.ToString(m.Body), err)
			}
			wantAttrs := map[string]types.MessageAttributeValue{
				"pool":   {DataType: aws.String("String"), StringValue: aws.String(j.Pool)},
				"job_id": {DataType: aws.String("Number"), StringValue: aws.String(strconv.FormatInt(j.JobID, 10))},
			}
			if !reflect.DeepEqual(m.MessageAttributes, wantAttrs) {
				t.Errorf("job %d attributes %+v, want %+v", j.JobID, m.MessageAttributes, wantAttrs)
			}
			got = append(got, j)
		}
		if len(got) >= len(want) {
			break
		}
	}
	slices.SortFunc(got, func(a, b queue.Job) int { return int(a.JobID - b.JobID) })
	if !reflect.DeepEqual(got, want) {
		t.Errorf("received:\n%+v\nwant:\n%+v", got, want)
	}

	gone := sqsqueue.NewSQS(api, missing)
	if err := gone.Send(ctx, jobN(5)); err == nil || errors.Is(err, queue.ErrInvalidJob) {
		t.Errorf("Send to a missing queue = %v, want a retryable error", err)
	}
}

// TestSQSReceiverAgainstGoaws receives and completes through the real SDK:
// done deletes, dead letters reach the dead-letter queue with their reason
// and the original body, and a retried message comes back with a higher
// receive count.
func TestSQSReceiverAgainstGoaws(t *testing.T) {
	t.Parallel()
	client := testenv.Goaws(t, "skiff-recv", "skiff-recv-dlq")
	ctx := t.Context()
	jobs, dlq := testenv.QueueURL(t, client, "skiff-recv"), testenv.QueueURL(t, client, "skiff-recv-dlq")
	sender := sqsqueue.NewSQS(client, jobs)
	for _, id := range []int64{11, 12} {
		if err := sender.Send(ctx, jobN(id)); err != nil {
			t.Fatal(err)
		}
	}
	r := sqsqueue.NewSQSReceiver(client, jobs, sqsqueue.NewSQSDeadLetters(client, dlq))
	var got []queue.Delivery
	for range 10 {
		ds, err := r.Receive(ctx, 10)
		if err != nil {
			t.Fatalf("Receive: %v", err)
		}
		got = append(got, ds...)
		if len(got) >= 2 {
			break
		}
	}
	if len(got) != 2 {
		t.Fatalf("received %d deliveries, want 2", len(got))
	}
	for _, d := range got {
		if d.Err != nil || d.ReceiveCount != 1 || d.Receipt == "" {
			t.Errorf("delivery %+v", d)
		}
		a := queue.Answer{Verdict: queue.Done}
		if d.Job.JobID == 12 {
			a = queue.Answer{Verdict: queue.DeadLetter, Reason: "launch_invalid", Detail: "no such launch template"}
		}
		if err := r.Complete(ctx, d, a); err != nil {
			t.Fatalf("Complete(%d): %v", d.Job.JobID, err)
		}
	}
	out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(dlq), MaxNumberOfMessages: 10, MessageAttributeNames: []string{"All"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Messages) != 1 {
		t.Fatalf("dead-letter queue holds %d messages, want 1", len(out.Messages))
	}
	m := out.Messages[0]
	if j, err := queue.DecodeMessage(aws.ToString(m.Body)); err != nil || j.JobID != 12 ||
		aws.ToString(m.MessageAttributes["reason"].StringValue) != "launch_invalid" {
		t.Errorf("dead letter %s %v (%v)", aws.ToString(m.Body), m.MessageAttributes, err)
	}
	if left, _ := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(jobs), MaxNumberOfMessages: 10}); len(left.Messages) != 0 {
		t.Errorf("the job queue still holds %d messages after completing", len(left.Messages))
	}
}
