package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/store/expiry"
)

// Store is a store.Store in the SQLite file.
type Store struct{ clocked }

var _ store.Store = (*Store)(nil)

// NewStore returns the store in d. now is the clock that decides whether a
// record has expired (time.Now when nil).
func NewStore(d *DB, now func() time.Time) *Store {
	return &Store{on(d, now)}
}

// RecordJob implements store.Store: read, merge (store.MergeJob) and write
// in one transaction.
func (s *Store) RecordJob(ctx context.Context, j store.JobRecord) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if err := store.ValidateJob(j); err != nil {
		return false, err
	}
	var advanced bool
	err := s.d.tx(ctx, func(tx *sql.Tx) error {
		old, exists, err := s.job(ctx, tx, j.ID)
		if err != nil {
			return err
		}
		var rec store.JobRecord
		rec, advanced = store.MergeJob(old, exists, j)
		b, err := json.Marshal(rec)
		if err != nil {
			return fmt.Errorf("encoding job: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO jobs (id, status, record, expires_at) VALUES (?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET status = excluded.status, record = excluded.record, expires_at = excluded.expires_at`,
			rec.ID, int(rec.Status), string(b), nanos(rec.ExpiresAt)); err != nil {
			return fmt.Errorf("writing job: %w", err)
		}
		return nil
	})
	return advanced, err
}

// querier reads through the database or a transaction.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// job reads a live job record.
func (s *Store) job(ctx context.Context, q querier, id int64) (store.JobRecord, bool, error) {
	j, ok, err := readLive[store.JobRecord](ctx, q, s.now(), "SELECT record, expires_at FROM jobs WHERE id = ?", id)
	if err != nil {
		return store.JobRecord{}, false, fmt.Errorf("reading job %d: %w", id, err)
	}
	return j, ok, nil
}

// Job implements store.Store.
func (s *Store) Job(ctx context.Context, id int64) (store.JobRecord, error) {
	if err := ctx.Err(); err != nil {
		return store.JobRecord{}, err
	}
	j, ok, err := s.job(ctx, s.d.db, id)
	switch {
	case err != nil:
		return store.JobRecord{}, err
	case !ok:
		return store.JobRecord{}, store.ErrNotFound
	}
	j.Labels = slices.Clone(j.Labels)
	return j, nil
}

// RecordRun implements store.Store.
func (s *Store) RecordRun(ctx context.Context, r store.RunRecord) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if r.ID <= 0 {
		return errors.New("recording run: id is required")
	}
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encoding run: %w", err)
	}
	expiredBy := expiry.NanosFloor(s.now()) // an expires_at at or below it has expired
	return s.d.tx(ctx, func(tx *sql.Tx) error {
		// Replace a record of the same or an older attempt, or an expired one.
		if _, err := tx.ExecContext(ctx, `INSERT INTO runs (id, attempt, record, expires_at) VALUES (?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET attempt = excluded.attempt, record = excluded.record, expires_at = excluded.expires_at
			WHERE runs.attempt <= excluded.attempt OR (runs.expires_at != 0 AND runs.expires_at <= ?)`,
			r.ID, r.Attempt, string(b), nanos(r.ExpiresAt), expiredBy); err != nil {
			return fmt.Errorf("writing run: %w", err)
		}
		return nil
	})
}

// Run implements store.Store.
func (s *Store) Run(ctx context.Context, id int64) (store.RunRecord, error) {
	if err := ctx.Err(); err != nil {
		return store.RunRecord{}, err
	}
	r, ok, err := readLive[store.RunRecord](ctx, s.d.db, s.now(), "SELECT record, expires_at FROM runs WHERE id = ?", id)
	switch {
	case err != nil:
		return store.RunRecord{}, fmt.Errorf("reading run %d: %w", id, err)
	case !ok:
		return store.RunRecord{}, store.ErrNotFound
	}
	return r, nil
}
