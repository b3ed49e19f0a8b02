//go:build linux

package sqsqueue_test

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/awsjson"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestSQSAgainstMoto sends through the hand-built client (pkg/awsjson) to
// moto's SQS, through a proxy that lets only correctly signed requests
// through (goaws and moto check no signatures), and receives through the SDK.
func TestSQSAgainstMoto(t *testing.T) {
	t.Parallel()
	endpoint := testenv.Moto(t)
	client := sqs.NewFromConfig(testenv.AWSConfig(t), func(o *sqs.Options) { o.BaseEndpoint = aws.String(endpoint) })
	const name = "skiff-jobs-awsjson"
	if _, err := client.CreateQueue(t.Context(), &sqs.CreateQueueInput{QueueName: aws.String(name)}); err != nil {
		t.Fatalf("CreateQueue: %v", err)
	}
	proxy, verified := testenv.SigV4Proxy(t, endpoint)
	hot, err := awsjson.NewSQS(t.Context(), sqs.NewFromConfig(testenv.AWSConfig(t), func(o *sqs.Options) { o.BaseEndpoint = aws.String(proxy) }))
	if err != nil {
		t.Fatal(err)
	}
	testSQSAgainst(t, client, hot, name, endpoint+"/123456789012/no-such-queue")
	if n := verified.Take()["SendMessage"]; n != 4 {
		t.Errorf("%d SendMessage requests passed the verifying proxy, want 4 (3 jobs, 1 to a missing queue; the invalid job is never sent)", n)
	}
}
