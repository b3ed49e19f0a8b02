package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/skiffci/skiff/pkg/store"
)

const runnersSchema = `
CREATE TABLE IF NOT EXISTS runner_releases (
	id         INTEGER PRIMARY KEY CHECK (id = 1),
	fetched_at INTEGER NOT NULL,
	releases   TEXT    NOT NULL
);
CREATE TABLE IF NOT EXISTS runner_holds (
	pool     TEXT PRIMARY KEY,
	version  TEXT    NOT NULL,
	launched TEXT    NOT NULL DEFAULT '',
	reason  TEXT    NOT NULL,
	detail  TEXT    NOT NULL,
	at      INTEGER NOT NULL,
	until   INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS runner_installed (
	pool    TEXT PRIMARY KEY,
	version TEXT    NOT NULL,
	seen_at INTEGER NOT NULL
);
`

// RunnerState is local mode's store.RunnerState in the SQLite file: the
// release list as one JSON row, one row per held pool and per pool whose
// installed runner version is known.
type RunnerState struct{ d *DB }

var _ store.RunnerState = (*RunnerState)(nil)

// NewRunnerState returns the runner state in d.
func NewRunnerState(d *DB) *RunnerState { return &RunnerState{d: d} }

// RunnerReleases implements store.RunnerState.
func (s *RunnerState) RunnerReleases(ctx context.Context) (store.ReleaseList, error) {
	var at int64
	var raw string
	err := s.d.db.QueryRowContext(ctx, `SELECT fetched_at, releases FROM runner_releases WHERE id = 1`).Scan(&at, &raw)
	if errors.Is(err, sql.ErrNoRows) {
		return store.ReleaseList{}, store.ErrNotFound
	}
	if err != nil {
		return store.ReleaseList{}, fmt.Errorf("reading runner releases: %w", err)
	}
	l := store.ReleaseList{FetchedAt: time.Unix(0, at).UTC()}
	if err := json.Unmarshal([]byte(raw), &l.Releases); err != nil {
		return store.ReleaseList{}, fmt.Errorf("decoding runner releases: %w", err)
	}
	return l, nil
}

// PutRunnerReleases implements store.RunnerState.
func (s *RunnerState) PutRunnerReleases(ctx context.Context, l store.ReleaseList) error {
	raw, err := json.Marshal(l.Releases)
	if err != nil {
		return fmt.Errorf("encoding runner releases: %w", err)
	}
	return s.d.tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO runner_releases (id, fetched_at, releases) VALUES (1, ?, ?)
			ON CONFLICT (id) DO UPDATE SET fetched_at = excluded.fetched_at, releases = excluded.releases`,
			l.FetchedAt.UnixNano(), string(raw)); err != nil {
			return fmt.Errorf("storing runner releases: %w", err)
		}
		return nil
	})
}

// HoldPool implements store.RunnerState: one upsert that leaves a hold of
// the same version alone.
func (s *RunnerState) HoldPool(ctx context.Context, h store.RunnerHold) (bool, error) {
	if err := store.ValidateRunnerHold(h); err != nil {
		return false, err
	}
	var n int64
	err := s.d.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO runner_holds (pool, version, launched, reason, detail, at, until) VALUES (?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (pool) DO UPDATE SET version = excluded.version, launched = excluded.launched, reason = excluded.reason,
				detail = excluded.detail, at = excluded.at, until = excluded.until
			WHERE runner_holds.version != excluded.version`,
			h.Pool, h.Version, h.Launched, h.Reason, h.Detail, h.At.UnixNano(), nanos(h.Until))
		if err != nil {
			return fmt.Errorf("holding pool %s: %w", h.Pool, err)
		}
		n, err = res.RowsAffected()
		return err
	})
	return n > 0, err
}

// PoolHolds implements store.RunnerState.
func (s *RunnerState) PoolHolds(ctx context.Context) ([]store.RunnerHold, error) {
	out, err := queryAll(ctx, s.d.db, scanHold, `SELECT pool, version, launched, reason, detail, at, until FROM runner_holds`)
	if err != nil {
		return nil, fmt.Errorf("listing pool holds: %w", err)
	}
	store.SortRunnerHolds(out)
	return out, nil
}

func scanHold(rows *sql.Rows) (store.RunnerHold, error) {
	var h store.RunnerHold
	var at, until int64
	if err := rows.Scan(&h.Pool, &h.Version, &h.Launched, &h.Reason, &h.Detail, &at, &until); err != nil {
		return h, fmt.Errorf("reading pool hold: %w", err)
	}
	h.At = time.Unix(0, at).UTC()
	if until != 0 {
		h.Until = time.Unix(0, until).UTC()
	}
	return h, nil
}

// ReleasePool implements store.RunnerState.
func (s *RunnerState) ReleasePool(ctx context.Context, pool string) error {
	return s.d.tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM runner_holds WHERE pool = ?`, pool); err != nil {
			return fmt.Errorf("releasing pool %s: %w", pool, err)
		}
		return nil
	})
}

// PutInstalled implements store.RunnerState: one upsert.
func (s *RunnerState) PutInstalled(ctx context.Context, in store.InstalledRunner) error {
	if err := store.ValidateInstalled(in); err != nil {
		return err
	}
	return s.d.tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO runner_installed (pool, version, seen_at) VALUES (?, ?, ?)
			ON CONFLICT (pool) DO UPDATE SET version = excluded.version, seen_at = excluded.seen_at`,
			in.Pool, in.Version, in.SeenAt.UnixNano()); err != nil {
			return fmt.Errorf("recording pool %s's installed runner: %w", in.Pool, err)
		}
		return nil
	})
}

// InstalledRunners implements store.RunnerState.
func (s *RunnerState) InstalledRunners(ctx context.Context) ([]store.InstalledRunner, error) {
	out, err := queryAll(ctx, s.d.db, scanInstalled, `SELECT pool, version, seen_at FROM runner_installed`)
	if err != nil {
		return nil, fmt.Errorf("listing installed runners: %w", err)
	}
	store.SortInstalled(out)
	return out, nil
}

func scanInstalled(rows *sql.Rows) (store.InstalledRunner, error) {
	var in store.InstalledRunner
	var at int64
	if err := rows.Scan(&in.Pool, &in.Version, &at); err != nil {
		return in, fmt.Errorf("reading an installed runner: %w", err)
	}
	in.SeenAt = time.Unix(0, at).UTC()
	return in, nil
}
