package sqsqueue_test

import (
	"context"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/skiffci/skiff/pkg/queue"
	"github.com/skiffci/skiff/pkg/queue/sqsqueue"
)

var errSend = errors.New("injected send failure")

type sqsRecorder struct {
	in  []*sqs.SendMessageInput
	err error
}

func (r *sqsRecorder) SendMessage(_ context.Context, in *sqs.SendMessageInput, _ ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	r.in = append(r.in, in)
	if r.err != nil {
		return nil, r.err
	}
	return &sqs.SendMessageOutput{MessageId: aws.String("dlq-1")}, nil
}

func TestSQSDeadLetters(t *testing.T) {
	t.Parallel()
	rec := &sqsRecorder{}
	d := sqsqueue.NewSQSDeadLetters(rec, "https://sqs.eu-west-1.amazonaws.com/123456789012/skiff-jobs-dlq")
	msg := queue.NewDelivery("m-9", `{"job_id":9,"run_id":1,"repository":"acme/app","pool":"cpu","labels":["x"]}`, 5, "r-9")
	if err := d.DeadLetter(context.Background(), msg, "launch_quota", "VcpuLimitExceeded: limit of 0"); err != nil {
		t.Fatal(err)
	}
	in := rec.in[0]
	attr := func(k string) string { return aws.ToString(in.MessageAttributes[k].StringValue) }
	if aws.ToString(in.MessageBody) != msg.Body || attr("reason") != "launch_quota" || attr("job_id") != "9" ||
		attr("receive_count") != "5" || attr("source_message_id") != msg.ID || attr("detail") != "VcpuLimitExceeded: limit of 0" {
		t.Errorf("sent %+v", in)
	}
	// No detail, no empty attribute (SQS refuses empty values).
	if err := d.DeadLetter(context.Background(), msg, "max_runners", ""); err != nil {
		t.Fatal(err)
	}
	if _, ok := rec.in[1].MessageAttributes["detail"]; ok {
		t.Errorf("empty detail sent: %+v", rec.in[1].MessageAttributes)
	}
	rec.err = errSend
	if err := d.DeadLetter(context.Background(), msg, "x", ""); !errors.Is(err, errSend) {
		t.Errorf("err = %v", err)
	}
}
