package main

import (
	"context"

	"github.com/aws/aws-lambda-go/events"

	"github.com/skiffci/skiff/internal/wiring"
	"github.com/skiffci/skiff/pkg/queue"
)

// sqsHandler translates Lambda's SQS event into the queue's deliveries,
// lets the service answer them, dead-letters what must be, and reports the
// rest for redelivery (the event source mapping has ReportBatchItemFailures).
// Its error is always nil: every message is acknowledged, retried or
// dead-lettered.
func sqsHandler(su *wiring.ScaleUp) func(context.Context, events.SQSEvent) (events.SQSEventResponse, error) {
	return func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		ds := make([]queue.Delivery, len(ev.Records))
		for i, r := range ev.Records {
			ds[i] = queue.NewDelivery(r.MessageId, r.Body, queue.ParseReceiveCount(r.Attributes["ApproximateReceiveCount"]), r.ReceiptHandle)
		}
		answers := su.Handle(ctx, ds)
		resp := events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{}}
		for _, id := range queue.CompleteBatch(ctx, su.DeadLetters, ds, answers, su.Counter, su.Logger) {
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: id})
		}
		return resp, nil
	}
}
