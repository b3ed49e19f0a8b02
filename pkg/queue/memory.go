package queue

import (
	"context"
	"strconv"
	"sync"
	"time"
)

// DefaultVisibility is how long a received message of the in-memory queue
// stays invisible before it comes back, unless completed: long enough for one
// scale-up pass, short enough that a retry comes soon in local mode.
const DefaultVisibility = 30 * time.Second

// pollWait bounds how long Receive waits for a message when none is visible.
const pollWait = time.Second

// Memory is an in-process queue for tests and local mode: a Sender, a
// Receiver with SQS's semantics (at-least-once, a visibility timeout,
// receive counts) and a DeadLetterer. It keeps every job it accepted, in
// order, for inspection. Its zero value is ready to use.
type Memory struct {
	mu         sync.Mutex
	jobs       []Job
	msgs       []*memMessage
	dead       []DeadLetterRecord
	seq        int
	err        error // returned by Send instead of accepting, see SetErr
	now        func() time.Time
	visibility time.Duration
	notify     chan struct{}
}

type memMessage struct {
	id, body  string
	receives  int
	visibleAt time.Time
}

// DeadLetterRecord is one dead letter of a Memory queue.
type DeadLetterRecord struct {
	MessageID    string
	Body         string
	JobID        int64
	ReceiveCount int
	Reason       string
	Detail       string
	DeadAt       time.Time
}

var (
	_ Sender       = (*Memory)(nil)
	_ Receiver     = (*Memory)(nil)
	_ DeadLetterer = (*Memory)(nil)
)

// init sets the defaults of a zero Memory. The caller holds m.mu.
func (m *Memory) init() {
	if m.now == nil {
		m.now = time.Now
	}
	if m.visibility <= 0 {
		m.visibility = DefaultVisibility
	}
	if m.notify == nil {
		m.notify = make(chan struct{})
	}
}

// SetClock sets the clock that visibility timeouts are measured with.
func (m *Memory) SetClock(now func() time.Time) {
	m.mu.Lock()
	m.now = now
	m.mu.Unlock()
}

// SetVisibility sets the visibility timeout of received messages.
func (m *Memory) SetVisibility(d time.Duration) {
	m.mu.Lock()
	m.visibility = d
	m.mu.Unlock()
}

// Send queues the job, or returns the error set by SetErr. A job that
// EncodeMessage refuses is refused with ErrInvalidJob.
func (m *Memory) Send(ctx context.Context, job Job) error { return m.SendAfter(ctx, job, 0) }

// SendAfter implements DelayedSender.
func (m *Memory) SendAfter(ctx context.Context, job Job, delay time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	body, err := EncodeMessage(job)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.init()
	if m.err != nil {
		return m.err
	}
	job.Labels = append([]string(nil), job.Labels...)
	m.jobs = append(m.jobs, job)
	m.seq++
	msg := &memMessage{id: "mem-" + strconv.Itoa(m.seq), body: body}
	if delay > 0 {
		msg.visibleAt = m.now().Add(min(delay, MaxDelay))
	}
	m.msgs = append(m.msgs, msg)
	close(m.notify) // wake receivers
	m.notify = make(chan struct{})
	return nil
}

// Receive implements Receiver: up to max visible messages, each made
// invisible for the visibility timeout; when none is visible it waits up to
// a second for a Send.
func (m *Memory) Receive(ctx context.Context, max int) ([]Delivery, error) {
	for try := 0; ; try++ {
		m.mu.Lock()
		m.init()
		now := m.now()
		var out []Delivery
		for _, msg := range m.msgs {
			if len(out) >= max {
				break
			}
			if now.Before(msg.visibleAt) {
				continue
			}
			msg.receives++
			msg.visibleAt = now.Add(m.visibility)
			out = append(out, NewDelivery(msg.id, msg.body, msg.receives, msg.id))
		}
		notify := m.notify
		m.mu.Unlock()
		if len(out) > 0 || try > 0 {
			return out, ctx.Err()
		}
		if err := WaitForSend(ctx, notify, pollWait); err != nil {
			return nil, err
		}
	}
}

// WaitForSend is a receiver's one wait between two looks at an empty
// queue: until notify closes (a Send), wait passes, or ctx ends (its error).
func WaitForSend(ctx context.Context, notify <-chan struct{}, wait time.Duration) error {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-notify:
	case <-t.C:
	}
	return nil
}

// Complete implements Receiver.
func (m *Memory) Complete(ctx context.Context, d Delivery, a Answer) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	switch a.Verdict {
	case Retry:
		return nil
	case DeadLetter:
		if err := m.DeadLetter(ctx, d, a.Reason, a.Detail); err != nil {
			return err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, msg := range m.msgs {
		if msg.id == d.Receipt {
			m.msgs = append(m.msgs[:i], m.msgs[i+1:]...)
			break
		}
	}
	return nil
}

// DeadLetter implements DeadLetterer: it records the dead letter.
func (m *Memory) DeadLetter(ctx context.Context, d Delivery, reason, detail string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.init()
	m.dead = append(m.dead, DeadLetterRecord{MessageID: d.ID, Body: d.Body, JobID: d.Job.JobID,
		ReceiveCount: d.ReceiveCount, Reason: reason, Detail: detail, DeadAt: m.now()})
	return nil
}

// DeadLetters returns the dead letters so far, in order.
func (m *Memory) DeadLetters() []DeadLetterRecord {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]DeadLetterRecord(nil), m.dead...)
}

// Depth returns how many messages are in the queue, visible or in flight.
func (m *Memory) Depth() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.msgs)
}

// Jobs returns a copy of the jobs sent so far, in order.
func (m *Memory) Jobs() []Job {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Job, len(m.jobs))
	for i, j := range m.jobs {
		j.Labels = append([]string(nil), j.Labels...)
		out[i] = j
	}
	return out
}

// SetErr makes Send fail with err, to exercise callers' failure paths;
// nil makes Send accept jobs again.
func (m *Memory) SetErr(err error) {
	m.mu.Lock()
	m.err = err
	m.mu.Unlock()
}

// Reset forgets every job, message, dead letter and the injected error.
func (m *Memory) Reset() {
	m.mu.Lock()
	m.jobs, m.msgs, m.dead, m.err = nil, nil, nil, nil
	m.mu.Unlock()
}
