package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/store/expiry"
)

const securitySchema = `
CREATE TABLE IF NOT EXISTS security_events (
	job_id     INTEGER NOT NULL,
	attempt    INTEGER NOT NULL,
	run_id     INTEGER NOT NULL,
	repository TEXT    NOT NULL,
	runner     TEXT    NOT NULL,
	pool       TEXT    NOT NULL,
	reason     TEXT    NOT NULL,
	detail     TEXT    NOT NULL,
	at         INTEGER NOT NULL,
	expires_at INTEGER NOT NULL,
	PRIMARY KEY (job_id, attempt)
);
`

// SecurityEvents is local mode's store.SecurityEvents in the SQLite file.
type SecurityEvents struct{ clocked }

var _ store.SecurityEvents = (*SecurityEvents)(nil)

// NewSecurityEvents returns the security events in d on the clock now
// (nil: time.Now), which decides expiry.
func NewSecurityEvents(d *DB, now func() time.Time) *SecurityEvents {
	return &SecurityEvents{on(d, now)}
}

// RecordSecurityEvent implements store.SecurityEvents: one insert, replacing
// only an expired event of the same job attempt.
func (s *SecurityEvents) RecordSecurityEvent(ctx context.Context, e store.SecurityEvent) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if err := store.ValidateSecurityEvent(e); err != nil {
		return false, err
	}
	var n int64
	err := s.d.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO security_events
			(job_id, attempt, run_id, repository, runner, pool, reason, detail, at, expires_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (job_id, attempt) DO UPDATE SET run_id = excluded.run_id, repository = excluded.repository,
				runner = excluded.runner, pool = excluded.pool, reason = excluded.reason, detail = excluded.detail,
				at = excluded.at, expires_at = excluded.expires_at
			WHERE security_events.expires_at != 0 AND security_events.expires_at <= ?`,
			e.JobID, e.Attempt, e.RunID, e.Repository, e.Runner, e.Pool, e.Reason, e.Detail, e.At.UnixNano(),
			nanos(e.ExpiresAt), expiry.NanosFloor(s.now()))
		if err != nil {
			return fmt.Errorf("recording security event of job %d: %w", e.JobID, err)
		}
		n, err = res.RowsAffected()
		return err
	})
	return n > 0, err
}

// SecurityEvents implements store.SecurityEvents.
func (s *SecurityEvents) SecurityEvents(ctx context.Context, since time.Time) ([]store.SecurityEvent, error) {
	out, err := queryAll(ctx, s.d.db, scanSecurityEvent, `SELECT job_id, attempt, run_id, repository, runner, pool, reason, detail, at, expires_at
		FROM security_events WHERE at >= ? AND (expires_at = 0 OR expires_at > ?)`, since.UnixNano(), expiry.NanosFloor(s.now()))
	if err != nil {
		return nil, fmt.Errorf("listing security events: %w", err)
	}
	store.SortSecurityEvents(out)
	return out, nil
}

func scanSecurityEvent(rows *sql.Rows) (store.SecurityEvent, error) {
	var e store.SecurityEvent
	var at, expires int64
	if err := rows.Scan(&e.JobID, &e.Attempt, &e.RunID, &e.Repository, &e.Runner, &e.Pool, &e.Reason, &e.Detail,
		&at, &expires); err != nil {
		return e, fmt.Errorf("reading security event: %w", err)
	}
	e.At = time.Unix(0, at).UTC()
	if expires != 0 {
		e.ExpiresAt = time.Unix(0, expires).UTC()
	}
	return e, nil
}
