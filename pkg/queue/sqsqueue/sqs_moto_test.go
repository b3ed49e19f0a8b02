//go:build linux

package sqsqueue_test

import (
	"net/http"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/skiffci/skiff/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestSQSAgainstMoto sends to moto's SQS through the SDK, and receives
// through it.
func TestSQSAgainstMoto(t *testing.T) {
	t.Parallel()
	endpoint := testenv.Moto(t)
	calls := &testenv.CountingTransport{}
	cfg := testenv.AWSConfig(t)
	cfg.HTTPClient = &http.Client{Transport: calls}
	client := sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.BaseEndpoint = aws.String(endpoint) })
	const name = "skiff-jobs-moto"
	if _, err := client.CreateQueue(t.Context(), &sqs.CreateQueueInput{QueueName: aws.String(name)}); err != nil {
		t.Fatalf("CreateQueue: %v", err)
	}
	testSQSAgainst(t, client, client, name, endpoint+"/123456789012/no-such-queue")
	if n := calls.Take()["SendMessage"]; n != 4 {
		t.Errorf("%d SendMessage requests, want 4 (3 jobs, 1 to a missing queue; the invalid job is never sent)", n)
	}
}
