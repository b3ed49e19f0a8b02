// Package queue carries queued workflow jobs from the webhook to scale-up.
//
// One message is one job. Delivery is at-least-once: consumers dedupe by job id
// (the store's conditional claim), so a message sent twice never launches twice.
// In AWS the queue is SQS with a dead-letter queue; in tests and local mode it
// is in memory.
package queue

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Job is one queued workflow job: what the webhook sends and scale-up receives.
// The JSON field names are the wire format of the SQS message body.
type Job struct {
	JobID          int64    `json:"job_id"`
	RunID          int64    `json:"run_id"`
	Attempt        int      `json:"attempt"`
	Repository     string   `json:"repository"` // owner/name
	Owner          string   `json:"owner"`
	InstallationID int64    `json:"installation_id"`
	Labels         []string `json:"labels"`
	Pool           string   `json:"pool"`
	// Visibility is the repository's visibility (private, internal, public)
	// as the webhook saw it; empty in messages from before it was sent.
	Visibility string    `json:"visibility,omitempty"`
	DeliveryID string    `json:"delivery_id"`
	ReceivedAt time.Time `json:"received_at"`
	// Waited counts the times the job entered its pool's waiting room; a
	// message the room sends carries it, so that scale-up knows to take the
	// job out of the room and the capacity backoff grows with it.
	Waited int `json:"waited,omitempty"`
	// Probe marks the room's probe of a place that backs off: the job's
	// refusal then only arms the next probe, leaving its entry and the
	// place's backoff as they are.
	Probe bool `json:"probe,omitempty"`
	// Acquired marks a job a scale-set listener acquired for its pool just
	// before sending it: GitHub has just said it is queued, so scale-up
	// does not ask again on its first delivery, unless the job waited in
	// the room since.
	Acquired bool `json:"acquired,omitempty"`
}

// Validate reports the first missing field a consumer needs to act on the job.
func (j Job) Validate() error {
	switch {
	case j.JobID <= 0:
		return errors.New("job_id is missing")
	case j.RunID <= 0:
		return errors.New("run_id is missing")
	case j.Repository == "":
		return errors.New("repository is missing")
	case j.Pool == "":
		return errors.New("pool is missing")
	case len(j.Labels) == 0:
		return errors.New("labels are missing")
	}
	return nil
}

// Sender enqueues jobs.
//
// Send returns nil only when the queue has durably accepted the job. Any error
// means the job may not be queued, and the caller must let the sender of the
// event retry (the webhook answers 5xx so GitHub marks the delivery failed).
type Sender interface {
	Send(ctx context.Context, job Job) error
}

// DelayedSender enqueues a job that becomes visible only after delay (at
// most MaxDelay): the waiting room's capacity backoff.
type DelayedSender interface {
	SendAfter(ctx context.Context, job Job, delay time.Duration) error
}

// MaxDelay is the longest delay SQS takes (DelaySeconds, 900).
const MaxDelay = 15 * time.Minute

// ErrInvalidJob is returned by Send for a job that fails Validate: retrying it cannot help.
var ErrInvalidJob = errors.New("invalid job")

func invalid(err error) error { return fmt.Errorf("%w: %w", ErrInvalidJob, err) }
