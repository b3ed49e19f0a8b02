package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/skiffci/skiff/pkg/room"
	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/store/expiry"
)

// roomSchema holds the waiting room (room.Store): an entry's record is JSON
// (room.Waiting), beside the columns the conditions and the listing read;
// room_served is when each repository of a pool was last offered a job;
// room_backoff is each pool's capacity backoff per place, room_probe when
// its probe is due (a table of its own, so that files made before it
// gain it by the schema's CREATE).
const roomSchema = `
CREATE TABLE IF NOT EXISTS room (
	pool          TEXT    NOT NULL,
	job_id        INTEGER NOT NULL,
	offered_until INTEGER NOT NULL,
	expires_at    INTEGER NOT NULL,
	record        TEXT    NOT NULL,
	PRIMARY KEY (pool, job_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS room_served (
	pool       TEXT    NOT NULL,
	repository TEXT    NOT NULL,
	served_at  INTEGER NOT NULL,
	PRIMARY KEY (pool, repository)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS room_backoff (
	pool     TEXT    NOT NULL,
	place    TEXT    NOT NULL,
	failures INTEGER NOT NULL,
	until    INTEGER NOT NULL,
	PRIMARY KEY (pool, place)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS room_probe (
	pool     TEXT    NOT NULL,
	place    TEXT    NOT NULL,
	probe_at INTEGER NOT NULL,
	PRIMARY KEY (pool, place)
) WITHOUT ROWID;
`

// Room is a room.Store in the SQLite file, with the conditions of
// room.Memory: each write is one transaction that reads the entry it
// changes.
type Room struct{ d *DB }

var _ room.Store = (*Room)(nil)

// NewRoom returns the waiting room in d.
func NewRoom(d *DB) *Room { return &Room{d: d} }

func (r *Room) entry(ctx context.Context, tx *sql.Tx, pool string, job int64) (room.Waiting, bool, error) {
	var rec string
	var exp int64
	err := tx.QueryRowContext(ctx, `SELECT record, expires_at FROM room WHERE pool = ? AND job_id = ?`, pool, job).Scan(&rec, &exp)
	if isNoRows(err) {
		return room.Waiting{}, false, nil
	}
	if err != nil {
		return room.Waiting{}, false, fmt.Errorf("reading job %d in the room of pool %s: %w", job, pool, err)
	}
	var w room.Waiting
	if err := json.Unmarshal([]byte(rec), &w); err != nil {
		return room.Waiting{}, false, fmt.Errorf("decoding job %d in the room of pool %s: %w", job, pool, err)
	}
	return w, true, nil
}

func (r *Room) put(ctx context.Context, tx *sql.Tx, w room.Waiting) error {
	rec, err := json.Marshal(w)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO room (pool, job_id, offered_until, expires_at, record) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (pool, job_id) DO UPDATE SET offered_until = excluded.offered_until, expires_at = excluded.expires_at,
		record = excluded.record`, w.Pool, w.JobID, nanos(w.OfferedUntil), expiry.Seconds(w.ExpiresAt), string(rec))
	if err != nil {
		return fmt.Errorf("writing job %d in the room of pool %s: %w", w.JobID, w.Pool, err)
	}
	return nil
}

// Enter implements room.Store.
func (r *Room) Enter(ctx context.Context, w room.Waiting) (room.Waiting, error) {
	if err := room.ValidateWaiting(w); err != nil {
		return room.Waiting{}, err
	}
	if w.ExpiresAt.IsZero() {
		w.ExpiresAt = w.Since.Add(room.Limit)
	}
	w.Tries = 1
	err := r.d.tx(ctx, func(tx *sql.Tx) error {
		old, ok, err := r.entry(ctx, tx, w.Pool, w.JobID)
		if err != nil {
			return err
		}
		if ok && expiry.Live(old.ExpiresAt, w.Since) {
			w.Since, w.ExpiresAt, w.Tries = old.Since, old.ExpiresAt, old.Tries+1
		}
		return r.put(ctx, tx, w)
	})
	if err != nil {
		return room.Waiting{}, err
	}
	return w, nil
}

// Offer implements room.Store.
func (r *Room) Offer(ctx context.Context, pool string, jobID int64, now, until time.Time) error {
	return r.d.tx(ctx, func(tx *sql.Tx) error {
		w, ok, err := r.entry(ctx, tx, pool, jobID)
		if err != nil {
			return err
		}
		if !ok || !expiry.Live(w.ExpiresAt, now) {
			return fmt.Errorf("offering job %d of pool %s: %w", jobID, pool, store.ErrNotFound)
		}
		if now.Before(w.OfferedUntil) {
			return fmt.Errorf("offering job %d of pool %s: an offer is under way: %w", jobID, pool, store.ErrConflict)
		}
		w.OfferedUntil = until
		if err := r.put(ctx, tx, w); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO room_served (pool, repository, served_at) VALUES (?, ?, ?)
			ON CONFLICT (pool, repository) DO UPDATE SET served_at = excluded.served_at`, pool, w.Repository, now.UnixNano()); err != nil {
			return fmt.Errorf("recording repository %s served in pool %s: %w", w.Repository, pool, err)
		}
		return nil
	})
}

// Leave implements room.Store.
func (r *Room) Leave(ctx context.Context, pool string, jobID int64) error {
	return r.d.tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM room WHERE pool = ? AND job_id = ?`, pool, jobID); err != nil {
			return fmt.Errorf("taking job %d out of the room of pool %s: %w", jobID, pool, err)
		}
		return nil
	})
}

// Waiting implements room.Store.
func (r *Room) Waiting(ctx context.Context, pool string, now time.Time) ([]room.Waiting, map[string]time.Time, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	out, err := liveEntries(ctx, r.d.db, pool, now)
	if err != nil {
		return nil, nil, err
	}
	room.SortWaiting(out)
	served := map[string]time.Time{}
	srows, err := r.d.db.QueryContext(ctx, `SELECT repository, served_at FROM room_served WHERE pool = ?`, pool)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the served times of pool %s: %w", pool, err)
	}
	defer srows.Close()
	for srows.Next() {
		var repo string
		var at int64
		if err := srows.Scan(&repo, &at); err != nil {
			return nil, nil, err
		}
		served[repo] = time.Unix(0, at).UTC()
	}
	return out, served, srows.Err()
}

// backoff reads the place's backoff and its probe in tx.
func backoff(ctx context.Context, tx *sql.Tx, pool, place string) (room.Backoff, bool, error) {
	var failures, until, probe int64
	err := tx.QueryRowContext(ctx, `SELECT b.failures, b.until, coalesce(p.probe_at, 0) FROM room_backoff b
		LEFT JOIN room_probe p ON p.pool = b.pool AND p.place = b.place WHERE b.pool = ? AND b.place = ?`, pool, place).
		Scan(&failures, &until, &probe)
	if isNoRows(err) {
		return room.Backoff{}, false, nil
	}
	if err != nil {
		return room.Backoff{}, false, fmt.Errorf("reading the backoff of pool %s in %q: %w", pool, place, err)
	}
	return backoffOf(pool, place, failures, until, probe), true, nil
}

// backoffOf is the backoff of a room_backoff row and its probe's time (0:
// none).
func backoffOf(pool, place string, failures, until, probe int64) room.Backoff {
	b := room.Backoff{Pool: pool, Place: place, Failures: int(failures), Until: time.Unix(0, until).UTC()}
	if probe != 0 {
		b.ProbeAt = time.Unix(0, probe).UTC()
	}
	return b
}

// Refused implements room.Store: the read and the write in one transaction.
func (r *Room) Refused(ctx context.Context, pool, place string, now time.Time, next func(int) time.Duration) (room.Backoff, error) {
	var b room.Backoff
	err := r.d.tx(ctx, func(tx *sql.Tx) error {
		old, ok, err := backoff(ctx, tx, pool, place)
		if err != nil {
			return err
		}
		var changed bool
		b, changed = room.NextBackoff(old, ok, pool, place, now, next)
		if !changed {
			return nil
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO room_backoff (pool, place, failures, until) VALUES (?, ?, ?, ?)
			ON CONFLICT (pool, place) DO UPDATE SET failures = excluded.failures, until = excluded.until`,
			pool, place, b.Failures, nanos(b.Until)); err != nil {
			return fmt.Errorf("recording the backoff of pool %s in %q: %w", pool, place, err)
		}
		return nil
	})
	return b, err
}

// Backoffs implements room.Store.
func (r *Room) Backoffs(ctx context.Context, pool string, now time.Time) (map[string]room.Backoff, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	backoffs, err := queryAll(ctx, r.d.db, func(rows *sql.Rows) (room.Backoff, error) {
		var place string
		var failures, until, probe int64
		err := rows.Scan(&place, &failures, &until, &probe)
		return backoffOf(pool, place, failures, until, probe), err
	}, `SELECT b.place, b.failures, b.until, coalesce(p.probe_at, 0) FROM room_backoff b
		LEFT JOIN room_probe p ON p.pool = b.pool AND p.place = b.place WHERE b.pool = ? AND b.until > ?`, pool, nanos(now))
	if err != nil {
		return nil, fmt.Errorf("reading the backoffs of pool %s: %w", pool, err)
	}
	out := map[string]room.Backoff{}
	for _, b := range backoffs {
		out[b.Place] = b
	}
	return out, nil
}

// Recovered implements room.Store: the backoff and its probe go.
func (r *Room) Recovered(ctx context.Context, pool, place string) (bool, error) {
	var n int64
	err := r.d.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM room_backoff WHERE pool = ? AND place = ?`, pool, place)
		if err == nil {
			_, err = tx.ExecContext(ctx, `DELETE FROM room_probe WHERE pool = ? AND place = ?`, pool, place)
		}
		if err != nil {
			return fmt.Errorf("ending the backoff of pool %s in %q: %w", pool, place, err)
		}
		n, err = res.RowsAffected()
		return err
	})
	return n > 0, err
}

// ArmProbe implements room.Store: the read and the write in one transaction.
func (r *Room) ArmProbe(ctx context.Context, pool, place string, now, due time.Time) (bool, error) {
	armed := false
	err := r.d.tx(ctx, func(tx *sql.Tx) error {
		b, ok, err := backoff(ctx, tx, pool, place)
		if err != nil || !room.CanArm(b, ok, now) {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO room_probe (pool, place, probe_at) VALUES (?, ?, ?)
			ON CONFLICT (pool, place) DO UPDATE SET probe_at = excluded.probe_at`, pool, place, nanos(due)); err != nil {
			return fmt.Errorf("arming the probe of pool %s in %q: %w", pool, place, err)
		}
		armed = true
		return nil
	})
	return armed, err
}

// Resume implements room.Store: the pool's entries read and rewritten in
// one transaction.
func (r *Room) Resume(ctx context.Context, pool, place string, now time.Time) (int, error) {
	n := 0
	err := r.d.tx(ctx, func(tx *sql.Tx) error {
		live, err := liveEntries(ctx, tx, pool, now)
		if err != nil {
			return err
		}
		var resume []room.Waiting
		for _, w := range live {
			if w.Place == place && w.WakeAt.After(now) {
				resume = append(resume, w)
			}
		}
		for _, w := range resume {
			w.WakeAt, w.OfferedUntil = time.Time{}, time.Time{}
			if err := r.put(ctx, tx, w); err != nil {
				return err
			}
		}
		n = len(resume)
		return nil
	})
	return n, err
}

// liveEntries reads the pool's entries that have not expired by now, in
// no particular order.
func liveEntries(ctx context.Context, q querier, pool string, now time.Time) ([]room.Waiting, error) {
	out, err := queryAll(ctx, q, func(rows *sql.Rows) (room.Waiting, error) {
		var rec string
		var w room.Waiting
		if err := rows.Scan(&rec); err != nil {
			return w, err
		}
		err := json.Unmarshal([]byte(rec), &w)
		return w, err
	}, `SELECT record FROM room WHERE pool = ? AND (expires_at = 0 OR expires_at > ?)`, pool, now.Unix())
	if err != nil {
		return nil, fmt.Errorf("reading the room of pool %s: %w", pool, err)
	}
	return out, nil
}
