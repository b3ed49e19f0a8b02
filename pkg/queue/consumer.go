package queue

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/skiffci/skiff/internal/ctxsleep"
	"github.com/skiffci/skiff/pkg/telemetry"
)

// Delivery is one received message of the job queue, whatever carried it
// (a Lambda SQS event, a Receiver): what a consumer processes and answers.
type Delivery struct {
	// ID is the message's id (SQS's MessageId): the key of the answer.
	ID string
	// Body is the message body as received; a dead letter carries it
	// unchanged, so it can be redriven as is.
	Body string
	// ReceiveCount is how many times the queue has delivered the message,
	// this delivery included (SQS's ApproximateReceiveCount), at least 1.
	ReceiveCount int
	// Job is the decoded job; valid only when Err is nil.
	Job Job
	// Err says why the body is not a valid job (it wraps ErrInvalidJob):
	// no redelivery can fix it.
	Err error
	// Receipt is the transport's handle to complete the message (SQS's
	// receipt handle); opaque to consumers.
	Receipt string
}

// NewDelivery decodes a received message into a Delivery. A receive count
// below 1 (absent or malformed) counts as 1.
func NewDelivery(id, body string, receiveCount int, receipt string) Delivery {
	d := Delivery{ID: id, Body: body, ReceiveCount: max(receiveCount, 1), Receipt: receipt}
	d.Job, d.Err = DecodeMessage(body)
	return d
}

// ParseReceiveCount reads SQS's ApproximateReceiveCount attribute; 1 when
// absent or malformed.
func ParseReceiveCount(v string) int {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// Verdict is what becomes of a delivery.
type Verdict int

// The verdicts.
const (
	// Done: the message is finished (the job launched, was skipped, or was
	// already handled); the queue deletes it.
	Done Verdict = iota
	// Retry: the queue delivers the message again after its visibility
	// timeout.
	Retry
	// DeadLetter: the message goes to the dead-letter queue with its reason
	// and detail, then is deleted.
	DeadLetter
)

var verdictNames = [...]string{"done", "retry", "dead_letter"}

// String names the verdict for logs.
func (v Verdict) String() string {
	if v < 0 || int(v) >= len(verdictNames) {
		return "unknown"
	}
	return verdictNames[v]
}

// Answer is a consumer's answer to one delivery.
type Answer struct {
	Verdict Verdict
	// Reason is a short fixed name (e.g. launch_quota); with DeadLetter it
	// becomes the dead letter's reason attribute.
	Reason string
	// Detail is what the operator needs beyond the reason (a provider's
	// error and the quota to raise); never a secret. May be empty.
	Detail string
}

// DeadLetterer moves a delivery to the dead-letter queue with its reason
// and detail. DeadLetter returns nil only when the dead letter is durably
// queued.
type DeadLetterer interface {
	DeadLetter(ctx context.Context, d Delivery, reason, detail string) error
}

// Receiver is a queue a consumer polls (the local mode, a worker outside
// Lambda). Lambda's SQS event source receives for the function instead: see
// CompleteBatch.
type Receiver interface {
	// Receive returns up to max deliveries, waiting a little (at most a
	// few seconds, or until ctx ends) when none is visible. None is not an
	// error.
	Receive(ctx context.Context, max int) ([]Delivery, error)
	// Complete applies an answer: Done deletes the message, Retry leaves it
	// to come back after its visibility timeout, DeadLetter moves it to the
	// dead-letter queue (then deletes it). An error leaves the message to
	// come back, never lost.
	Complete(ctx context.Context, d Delivery, a Answer) error
}

// completeTimeout bounds completing one batch after its context ended.
const completeTimeout = 10 * time.Second

// MetricDeadLetterFailed counts dead letters that could not be queued (the
// message is returned to the queue instead).
const MetricDeadLetterFailed = "QueueDeadLetterFailed"

// CompleteBatch applies answers for a transport that completes a batch by
// naming the messages to deliver again (Lambda's SQS event source with
// ReportBatchItemFailures): it dead-letters through dl what must be, and
// returns the ids of the deliveries to redeliver — the retries, and the dead
// letters that could not be queued (logged and counted, never lost).
// ds and as are aligned.
func CompleteBatch(ctx context.Context, dl DeadLetterer, ds []Delivery, as []Answer, counter telemetry.Counter, log *slog.Logger) []string {
	redeliver := []string{}
	for i, d := range ds {
		a := as[i]
		switch a.Verdict {
		case Retry:
			redeliver = append(redeliver, d.ID)
		case DeadLetter:
			if err := dl.DeadLetter(ctx, d, a.Reason, a.Detail); err != nil {
				counter.Count(MetricDeadLetterFailed, a.Reason)
				log.Error("dead-lettering failed; returning the message to the queue", "message_id", d.ID,
					"job_id", d.Job.JobID, "reason", a.Reason, "err", err)
				redeliver = append(redeliver, d.ID)
			}
		}
	}
	return redeliver
}

// ConsumeConcurrently runs workers poll loops of Consume over r at once,
// each with batches of up to batch deliveries, as Lambda's event source
// runs several invocations of one function: one slow batch (a launch
// waiting on its provider) does not hold back the next. Fewer than one
// worker runs one. It returns when every loop has ended with ctx; handle
// must be safe for concurrent use.
func ConsumeConcurrently(ctx context.Context, r Receiver, batch, workers int, handle func(context.Context, []Delivery) []Answer,
	log *slog.Logger) {
	var wg sync.WaitGroup
	for range max(workers, 1) {
		wg.Go(func() { Consume(ctx, r, batch, handle, log) })
	}
	wg.Wait()
}

// Consume receives from r until ctx ends, hands each batch of up to max
// deliveries to handle, and completes each answer. It is the poll loop of
// consumers outside Lambda. A failed receive or complete is logged and the
// loop goes on (the message comes back after its visibility timeout).
func Consume(ctx context.Context, r Receiver, max int, handle func(context.Context, []Delivery) []Answer, log *slog.Logger) {
	for ctx.Err() == nil {
		ds, err := r.Receive(ctx, max)
		if err != nil {
			if ctx.Err() == nil {
				log.Error("receiving jobs; trying again in a second", "err", err)
				_ = ctxsleep.For(ctx, time.Second) // an ended context ends the loop above
			}
			continue
		}
		if len(ds) == 0 {
			continue
		}
		as := handle(ctx, ds)
		// Complete what was answered even when ctx ended meanwhile (a shutdown):
		// an answer not applied would redeliver work already done.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), completeTimeout)
		for i, d := range ds {
			if err := r.Complete(sctx, d, as[i]); err != nil {
				log.Error("completing a delivery; it will come back", "message_id", d.ID, "verdict", as[i].Verdict.String(), "err", err)
			}
		}
		cancel()
	}
}
