package testenv

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// NewQueue creates a queue named Unique(prefix) in the emulator client
// speaks to, and returns its URL: NewTable's twin for SQS.
func NewQueue(t testing.TB, client *sqs.Client, prefix string) string {
	t.Helper()
	out, err := client.CreateQueue(t.Context(), &sqs.CreateQueueInput{QueueName: aws.String(Unique(prefix))})
	if err != nil {
		t.Fatalf("creating queue %s: %v", prefix, err)
	}
	return aws.ToString(out.QueueUrl)
}

// QueueURL returns the URL of the queue called name in the emulator client
// speaks to (one Goaws made, say).
func QueueURL(t testing.TB, client *sqs.Client, name string) string {
	t.Helper()
	out, err := client.GetQueueUrl(t.Context(), &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
	if err != nil {
		t.Fatalf("looking up queue %s: %v", name, err)
	}
	return aws.ToString(out.QueueUrl)
}
