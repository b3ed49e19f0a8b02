package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/skiffci/skiff/pkg/queue"
)

// Defaults of QueueOptions.
const (
	// DefaultVisibility is how long a received message stays invisible
	// unless completed: as queue.DefaultVisibility, one scale-up pass.
	DefaultVisibility = queue.DefaultVisibility
	// DefaultPollWait bounds how long Receive waits when no message is
	// visible: short, since a send from another process is only seen by
	// polling.
	DefaultPollWait = time.Second
)

// ReasonMaxReceives is the dead-letter reason of a message received
// MaxReceives times without being completed (SQS's redrive policy).
const ReasonMaxReceives = "max_receives"

// ErrStaleReceipt: a Complete whose delivery was received again since (its
// visibility timeout ended): the newer receiver owns the message now, so
// nothing is changed, and the message is never lost.
var ErrStaleReceipt = errors.New("stale receipt: the message was received again")

// QueueOptions configures a Queue.
type QueueOptions struct {
	// Visibility is the visibility timeout (default DefaultVisibility).
	Visibility time.Duration
	// MaxReceives moves a message to the dead letters, reason
	// ReasonMaxReceives, instead of delivering it a MaxReceives+1st time;
	// 0 never does (the consumer dead-letters by its own rule).
	MaxReceives int
	// PollWait bounds Receive's wait (default DefaultPollWait).
	PollWait time.Duration
	// Now is the clock of visibility timeouts (default time.Now).
	Now func() time.Time
}

// Queue is the job queue and its dead letters in the SQLite file: a
// queue.Sender, queue.Receiver and queue.DeadLetterer with SQS's semantics
// (at-least-once, visibility timeout, receive counts). A completed dead
// letter moves in one transaction. Message ids are "sqlite-<n>"; a receipt
// names the message and its receive, so a receiver that outlived its
// visibility timeout cannot complete for the newer one.
type Queue struct {
	d *DB
	o QueueOptions

	mu     sync.Mutex
	notify chan struct{}
}

var (
	_ queue.Sender       = (*Queue)(nil)
	_ queue.Receiver     = (*Queue)(nil)
	_ queue.DeadLetterer = (*Queue)(nil)
)

// NewQueue returns the queue in d.
func NewQueue(d *DB, o QueueOptions) *Queue {
	if o.Visibility <= 0 {
		o.Visibility = DefaultVisibility
	}
	if o.PollWait <= 0 {
		o.PollWait = DefaultPollWait
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Queue{d: d, o: o, notify: make(chan struct{})}
}

// Send implements queue.Sender: the job is committed to the file when Send
// returns nil. A job EncodeMessage refuses is refused with ErrInvalidJob.
func (q *Queue) Send(ctx context.Context, job queue.Job) error { return q.SendAfter(ctx, job, 0) }

// SendAfter implements queue.DelayedSender.
func (q *Queue) SendAfter(ctx context.Context, job queue.Job, delay time.Duration) error {
	body, err := queue.EncodeMessage(job)
	if err != nil {
		return err
	}
	sent := q.o.Now()
	now, visible := sent.UnixNano(), sent.Add(min(max(delay, 0), queue.MaxDelay)).UnixNano()
	err = q.d.tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, "INSERT INTO queue_messages (body, job_id, visible_at, sent_at) VALUES (?, ?, ?, ?)",
			body, job.JobID, visible, now); err != nil {
			return fmt.Errorf("sending job %d: %w", job.JobID, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	q.mu.Lock()
	close(q.notify) // wake receivers
	q.notify = make(chan struct{})
	q.mu.Unlock()
	return nil
}

// Receive implements queue.Receiver: up to max visible messages, oldest
// first, each made invisible for the visibility timeout; when none is
// visible it waits up to PollWait for a Send of this process.
func (q *Queue) Receive(ctx context.Context, limit int) ([]queue.Delivery, error) {
	for try := 0; ; try++ {
		q.mu.Lock()
		notify := q.notify
		q.mu.Unlock()
		out, err := q.receiveOnce(ctx, limit)
		if err != nil || len(out) > 0 || try > 0 {
			return out, err
		}
		if err := queue.WaitForSend(ctx, notify, q.o.PollWait); err != nil {
			return nil, err
		}
	}
}

func (q *Queue) receiveOnce(ctx context.Context, limit int) ([]queue.Delivery, error) {
	limit = max(limit, 1)
	var out []queue.Delivery
	now := q.o.Now()
	err := q.d.tx(ctx, func(tx *sql.Tx) error {
		type msg struct {
			id, jobID int64
			body      string
			receives  int
		}
		msgs, err := queryAll(ctx, tx, func(rows *sql.Rows) (msg, error) {
			var m msg
			err := rows.Scan(&m.id, &m.body, &m.jobID, &m.receives)
			return m, err
		}, "SELECT id, body, job_id, receives FROM queue_messages WHERE visible_at <= ? ORDER BY id LIMIT ?", now.UnixNano(), limit*2)
		if err != nil {
			return fmt.Errorf("receiving: %w", err)
		}
		for _, m := range msgs {
			if len(out) >= limit {
				break
			}
			id := "sqlite-" + strconv.FormatInt(m.id, 10)
			if q.o.MaxReceives > 0 && m.receives >= q.o.MaxReceives {
				if err := deadLetter(ctx, tx, m.id, id, m.body, m.jobID, m.receives, ReasonMaxReceives,
					fmt.Sprintf("received %d times without being completed", m.receives), now); err != nil {
					return err
				}
				continue
			}
			if _, err := tx.ExecContext(ctx, "UPDATE queue_messages SET receives = receives + 1, visible_at = ? WHERE id = ?",
				now.Add(q.o.Visibility).UnixNano(), m.id); err != nil {
				return fmt.Errorf("receiving: %w", err)
			}
			out = append(out, queue.NewDelivery(id, m.body, m.receives+1, receipt(m.id, m.receives+1)))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func receipt(id int64, receives int) string {
	return strconv.FormatInt(id, 10) + ":" + strconv.Itoa(receives)
}

func parseReceipt(r string) (id int64, receives int, err error) {
	a, b, ok := strings.Cut(r, ":")
	if ok {
		id, err = strconv.ParseInt(a, 10, 64)
		if err == nil {
			receives, err = strconv.Atoi(b)
		}
	}
	if !ok || err != nil {
		return 0, 0, fmt.Errorf("completing: receipt %q is not this queue's", r)
	}
	return id, receives, nil
}

// Complete implements queue.Receiver. Done deletes the message, Retry leaves
// it to come back after its visibility timeout, DeadLetter moves it to the
// dead letters in one transaction. A receipt of an earlier receive is
// ErrStaleReceipt and changes nothing.
func (q *Queue) Complete(ctx context.Context, d queue.Delivery, a queue.Answer) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if a.Verdict == queue.Retry {
		return nil
	}
	id, receives, err := parseReceipt(d.Receipt)
	if err != nil {
		return err
	}
	return q.d.tx(ctx, func(tx *sql.Tx) error {
		var cur int
		err := tx.QueryRowContext(ctx, "SELECT receives FROM queue_messages WHERE id = ?", id).Scan(&cur)
		switch {
		case isNoRows(err):
			return nil // completed before: Done and DeadLetter are idempotent
		case err != nil:
			return fmt.Errorf("completing: %w", err)
		case cur != receives:
			return ErrStaleReceipt
		}
		if a.Verdict == queue.DeadLetter {
			return deadLetter(ctx, tx, id, d.ID, d.Body, d.Job.JobID, d.ReceiveCount, a.Reason, a.Detail, q.o.Now())
		}
		if _, err := tx.ExecContext(ctx, "DELETE FROM queue_messages WHERE id = ?", id); err != nil {
			return fmt.Errorf("deleting message %s: %w", d.ID, err)
		}
		return nil
	})
}

// deadLetter records a dead letter and, when msg is not 0, deletes the message.
func deadLetter(ctx context.Context, tx *sql.Tx, msg int64, id, body string, jobID int64, receives int, reason, detail string, now time.Time) error {
	if _, err := tx.ExecContext(ctx, `INSERT INTO dead_letters (message_id, body, job_id, receive_count, reason, detail, dead_at)
		VALUES (?, ?, ?, ?, ?, ?, ?)`, id, body, jobID, receives, reason, detail, now.UnixNano()); err != nil {
		return fmt.Errorf("dead-lettering %s: %w", id, err)
	}
	if msg != 0 {
		if _, err := tx.ExecContext(ctx, "DELETE FROM queue_messages WHERE id = ?", msg); err != nil {
			return fmt.Errorf("dead-lettering %s: %w", id, err)
		}
	}
	return nil
}

// DeadLetter implements queue.DeadLetterer: it records the dead letter (and
// leaves the message to the caller's Complete).
func (q *Queue) DeadLetter(ctx context.Context, d queue.Delivery, reason, detail string) error {
	return q.d.tx(ctx, func(tx *sql.Tx) error {
		return deadLetter(ctx, tx, 0, d.ID, d.Body, d.Job.JobID, d.ReceiveCount, reason, detail, q.o.Now())
	})
}

// DeadLetters returns the dead letters, oldest first.
func (q *Queue) DeadLetters(ctx context.Context) ([]queue.DeadLetterRecord, error) {
	out, err := queryAll(ctx, q.d.db, func(rows *sql.Rows) (queue.DeadLetterRecord, error) {
		var r queue.DeadLetterRecord
		var at int64
		err := rows.Scan(&r.MessageID, &r.Body, &r.JobID, &r.ReceiveCount, &r.Reason, &r.Detail, &at)
		r.DeadAt = time.Unix(0, at).UTC()
		return r, err
	}, "SELECT message_id, body, job_id, receive_count, reason, detail, dead_at FROM dead_letters ORDER BY id")
	if err != nil {
		return nil, fmt.Errorf("reading dead letters: %w", err)
	}
	return out, nil
}

// Depth returns how many messages are queued, visible or in flight.
func (q *Queue) Depth(ctx context.Context) (int, error) {
	var n int
	if err := q.d.db.QueryRowContext(ctx, "SELECT count(*) FROM queue_messages").Scan(&n); err != nil {
		return 0, fmt.Errorf("counting messages: %w", err)
	}
	return n, nil
}

// Counts is the queue's depth as `skiff status` shows it.
type Counts struct {
	Visible, InFlight, DeadLetters int
}

// Counts returns how many messages wait (visible now), how many are in
// flight (received, their visibility not yet over) and how many dead
// letters there are.
func (q *Queue) Counts(ctx context.Context) (Counts, error) {
	var c Counts
	now := q.o.Now().UnixNano()
	err := q.d.db.QueryRowContext(ctx, `SELECT
		(SELECT count(*) FROM queue_messages WHERE visible_at <= ?),
		(SELECT count(*) FROM queue_messages WHERE visible_at > ?),
		(SELECT count(*) FROM dead_letters)`, now, now).Scan(&c.Visible, &c.InFlight, &c.DeadLetters)
	if err != nil {
		return Counts{}, fmt.Errorf("counting messages: %w", err)
	}
	return c, nil
}
