package scaleup

import "strconv"

// SQSEvent mirrors the Lambda SQS event: the fields scale-up reads, with
// the JSON names Lambda uses. pkg/ never imports aws-lambda-go, so
// functions/scaleup passes these types to lambda.Start directly.
type SQSEvent struct {
	Records []SQSMessage `json:"Records"`
}

// SQSMessage is one record of an SQSEvent.
type SQSMessage struct {
	MessageID      string            `json:"messageId"`
	ReceiptHandle  string            `json:"receiptHandle"`
	Body           string            `json:"body"`
	Attributes     map[string]string `json:"attributes"`
	EventSourceARN string            `json:"eventSourceARN"`
}

// ReceiveCount is SQS's ApproximateReceiveCount: how many times the message
// has been delivered, this delivery included (1 when absent or malformed).
func (m SQSMessage) ReceiveCount() int {
	n, err := strconv.Atoi(m.Attributes["ApproximateReceiveCount"])
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// BatchResponse is the partial batch response of an SQS event source with
// ReportBatchItemFailures: the messages to deliver again.
type BatchResponse struct {
	BatchItemFailures []BatchItemFailure `json:"batchItemFailures"`
}

// BatchItemFailure names one message to deliver again.
type BatchItemFailure struct {
	ItemIdentifier string `json:"itemIdentifier"`
}
