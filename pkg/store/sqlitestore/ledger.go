package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/store"
)

// ledgerSchema holds the runner ledger (ledger.Ledger). A runner's record is
// JSON (ledger.Runner); state is its state's rank, the column the live
// count reads. runner_instances points an instance id at its runner; it
// has no expiry of its own: a lookup through it finds nothing once the
// runner's record has expired, and Sweep deletes pointers left without a
// record.
//
// There is no count column: a pool's live count is the number of its
// records in a live state, counted through the partial index runners_live
// (which holds the live records only, at most the pool's max). A count
// derived from the records cannot drift from them, so a runner leaves its
// pool's count exactly when its record leaves a live state — once.
//
// runners_awaiting lists each pool's awaiting runners (ledger.Ledger's
// EndAwaiting): a row beside the record, written in the end's transaction.
var ledgerSchema = fmt.Sprintf(`
CREATE TABLE IF NOT EXISTS runners (
	name       TEXT    PRIMARY KEY,
	pool       TEXT    NOT NULL,
	state      INTEGER NOT NULL,
	record     TEXT    NOT NULL,
	expires_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS runners_live ON runners (pool, name) WHERE %[1]s;
CREATE TABLE IF NOT EXISTS runner_instances (
	instance_id TEXT PRIMARY KEY,
	runner      TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS runners_awaiting (
	pool TEXT NOT NULL,
	name TEXT NOT NULL,
	PRIMARY KEY (pool, name)
) WITHOUT ROWID;
`, liveState)

// liveState is the SQL condition of a record in a live state
// (ledger.State.Live: reserved up to, not including, terminated). Queries
// that count or list live records use it verbatim, so that SQLite uses the
// partial index runners_live.
var liveState = fmt.Sprintf("state >= %d AND state < %d", ledger.StateReserved, ledger.StateTerminated)

// Ledger is a ledger.Ledger and ledger.Interruptions in the SQLite file, with
// the conditions and expiry of ledger.Memory. Every write is one
// transaction that reads the record, applies the same rule as the
// in-memory ledger and writes it back: a reservation of several runners
// and an end (the record terminated, so off its pool's count) are each
// all or nothing, across a kill -9 as across concurrent callers and
// processes.
type Ledger struct {
	clocked
	ttl time.Duration
}

var (
	_ ledger.Ledger        = (*Ledger)(nil)
	_ ledger.Interruptions = (*Ledger)(nil)
)

// NewLedger returns the runner ledger in d. Ended records expire
// ledger.DefaultRunnerTTL after their end; now is the clock that decides
// whether they have (time.Now when nil). A live record never expires.
func NewLedger(d *DB, now func() time.Time) *Ledger {
	return &Ledger{clocked: on(d, now), ttl: ledger.DefaultRunnerTTL}
}

// runner reads the record of name, hiding one that has expired: ok is
// false for both.
func (l *Ledger) runner(ctx context.Context, q querier, name string) (ledger.Runner, bool, error) {
	r, ok, err := readLive[ledger.Runner](ctx, q, l.now(), "SELECT record, expires_at FROM runners WHERE name = ?", name)
	if err != nil {
		return ledger.Runner{}, false, fmt.Errorf("reading runner %s: %w", name, err)
	}
	return r, ok, nil
}

// runnerOf reads the name of the runner on an instance; store.ErrNotFound
// for an instance that is no runner's.
func runnerOf(ctx context.Context, q querier, instanceID string) (string, error) {
	var name string
	err := q.QueryRowContext(ctx, "SELECT runner FROM runner_instances WHERE instance_id = ?", instanceID).Scan(&name)
	switch {
	case isNoRows(err):
		return "", store.ErrNotFound
	case err != nil:
		return "", fmt.Errorf("reading instance %s: %w", instanceID, err)
	}
	return name, nil
}

// put writes r (inserting, or replacing the record of the same name).
func put(ctx context.Context, tx *sql.Tx, r ledger.Runner) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encoding runner %s: %w", r.Name, err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO runners (name, pool, state, record, expires_at) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET pool = excluded.pool, state = excluded.state, record = excluded.record, expires_at = excluded.expires_at`,
		r.Name, r.Pool, int(r.State), string(b), nanos(r.ExpiresAt)); err != nil {
		return fmt.Errorf("writing runner %s: %w", r.Name, err)
	}
	return nil
}

// count returns the pool's live count.
func count(ctx context.Context, q querier, pool string) (int, error) {
	var n int
	if err := q.QueryRowContext(ctx, "SELECT COUNT(*) FROM runners WHERE pool = ? AND "+liveState, pool).Scan(&n); err != nil {
		return 0, fmt.Errorf("counting the live runners of pool %s: %w", pool, err)
	}
	return n, nil
}

// Reserve implements ledger.Ledger: in one transaction, the pool's live
// count is read and reserved records are written for the runners, in
// order, until one exists (and has not expired) or the count reaches max.
// A record that expired is replaced, and the instance pointers to it are
// dropped with it.
func (l *Ledger) Reserve(ctx context.Context, pool string, max int, runners []ledger.Runner) (int, error) {
	if err := ledger.ValidateRunners(pool, runners); err != nil {
		return 0, err
	}
	n := 0
	err := l.d.tx(ctx, func(tx *sql.Tx) error {
		have, err := count(ctx, tx, pool)
		if err != nil {
			return fmt.Errorf("reserving runners of pool %s: %w", pool, err)
		}
		for _, r := range runners {
			if have >= max {
				break
			}
			var expires int64
			err := tx.QueryRowContext(ctx, "SELECT expires_at FROM runners WHERE name = ?", r.Name).Scan(&expires)
			switch {
			case err != nil && !isNoRows(err):
				return fmt.Errorf("reading runner %s: %w", r.Name, err)
			case err == nil && live(expires, l.now()):
				return nil // a prefix: the first runner that exists ends it
			case err == nil: // expired: its pointers and its awaiting row go with it
				if _, err := tx.ExecContext(ctx, "DELETE FROM runner_instances WHERE runner = ?", r.Name); err != nil {
					return fmt.Errorf("dropping the instances of expired runner %s: %w", r.Name, err)
				}
				if _, err := tx.ExecContext(ctx, "DELETE FROM runners_awaiting WHERE name = ?", r.Name); err != nil {
					return fmt.Errorf("taking expired runner %s off its awaiting list: %w", r.Name, err)
				}
			}
			r.State, r.ExpiresAt = ledger.StateReserved, time.Time{}
			if err := put(ctx, tx, r); err != nil {
				return fmt.Errorf("reserving runners of pool %s: %w", pool, err)
			}
			have++
			n++
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// update runs fn on the live record of name in one transaction and writes
// back what it returns; fn returning false writes nothing. ErrNotFound: no
// record, or it expired.
func (l *Ledger) update(ctx context.Context, name string, fn func(*sql.Tx, ledger.Runner) (ledger.Runner, bool, error)) error {
	return l.d.tx(ctx, func(tx *sql.Tx) error {
		return l.updateTx(ctx, tx, name, fn)
	})
}

func (l *Ledger) updateTx(ctx context.Context, tx *sql.Tx, name string, fn func(*sql.Tx, ledger.Runner) (ledger.Runner, bool, error)) error {
	r, ok, err := l.runner(ctx, tx, name)
	if err != nil {
		return err
	}
	if !ok {
		return store.ErrNotFound
	}
	r, write, err := fn(tx, r)
	if err != nil || !write {
		return err
	}
	return put(ctx, tx, r)
}

// Launched implements ledger.Ledger: in one transaction, the record moves
// from reserved to launched (a record past it only gets the instance facts
// it lacks) and the instance points at the runner.
func (l *Ledger) Launched(ctx context.Context, name string, in ledger.LaunchReport) error {
	if in.InstanceID == "" {
		return errors.New("recording launch: instance id is required")
	}
	err := l.update(ctx, name, func(tx *sql.Tx, r ledger.Runner) (ledger.Runner, bool, error) {
		r = ledger.Launched(r, in)
		if _, err := tx.ExecContext(ctx, `INSERT INTO runner_instances (instance_id, runner) VALUES (?, ?)
			ON CONFLICT (instance_id) DO UPDATE SET runner = excluded.runner`, in.InstanceID, name); err != nil {
			return r, false, fmt.Errorf("recording instance %s: %w", in.InstanceID, err)
		}
		return r, true, nil
	})
	if err != nil {
		return fmt.Errorf("recording launch of runner %s: %w", name, err)
	}
	return nil
}

// Advance implements ledger.Ledger with ledger.Advance, in one transaction.
func (l *Ledger) Advance(ctx context.Context, name string, to ledger.State, at time.Time, job int64) error {
	if !ledger.Reported(to) {
		return ledger.ErrInvalidAdvance
	}
	err := l.update(ctx, name, func(_ *sql.Tx, r ledger.Runner) (ledger.Runner, bool, error) {
		r, _ = ledger.Advance(r, to, at, job) // never moves an ended runner: terminated is the last state
		return r, true, nil
	})
	if err != nil {
		return fmt.Errorf("advancing runner %s to %s: %w", name, to, err)
	}
	return nil
}

// End implements ledger.Ledger: in one transaction, a live record becomes
// terminated (off its pool's count) and starts its retention; an ended one
// is left as it is.
func (l *Ledger) End(ctx context.Context, name string, at time.Time, reason string) (bool, error) {
	var ended bool
	err := l.d.tx(ctx, func(tx *sql.Tx) error {
		var err error
		ended, err = l.endTx(ctx, tx, name, at, reason)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("ending runner %s: %w", name, err)
	}
	return ended, nil
}

func (l *Ledger) endTx(ctx context.Context, tx *sql.Tx, name string, at time.Time, reason string) (bool, error) {
	ended := false
	err := l.updateTx(ctx, tx, name, func(_ *sql.Tx, r ledger.Runner) (ledger.Runner, bool, error) {
		if !r.State.Live() {
			return r, false, nil // the first end won
		}
		r.State, r.EndedAt, r.Reason, r.ExpiresAt = ledger.StateTerminated, at, reason, at.Add(l.ttl)
		ended = true
		return r, true, nil
	})
	return ended, err
}

// EndAwaiting implements ledger.Ledger: in one transaction, End and the
// runner's row in runners_awaiting.
func (l *Ledger) EndAwaiting(ctx context.Context, name string, at time.Time, reason string) (bool, error) {
	var ended bool
	err := l.d.tx(ctx, func(tx *sql.Tx) error {
		var err error
		if ended, err = l.endTx(ctx, tx, name, at, reason); err != nil {
			return err
		}
		r, _, err := l.runner(ctx, tx, name)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO runners_awaiting (pool, name) VALUES (?, ?) ON CONFLICT DO NOTHING", r.Pool, name); err != nil {
			return fmt.Errorf("listing runner %s as awaiting: %w", name, err)
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("ending runner %s: %w", name, err)
	}
	return ended, nil
}

// Awaiting implements ledger.Ledger: the pool's rows of runners_awaiting
// with their records, sorted by name.
func (l *Ledger) Awaiting(ctx context.Context, pool string) ([]ledger.Runner, error) {
	out, err := l.list(ctx, `SELECT r.name, r.record, r.expires_at FROM runners_awaiting a
		JOIN runners r ON r.name = a.name WHERE a.pool = ? ORDER BY a.name`, pool)
	if err != nil {
		return nil, fmt.Errorf("listing the awaiting runners of pool %s: %w", pool, err)
	}
	return out, nil
}

// StopAwaiting implements ledger.Ledger: the runner's row in runners_awaiting goes.
func (l *Ledger) StopAwaiting(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if _, err := l.d.db.ExecContext(ctx, "DELETE FROM runners_awaiting WHERE name = ?", name); err != nil {
		return fmt.Errorf("taking runner %s off its awaiting list: %w", name, err)
	}
	return nil
}

// EndInstance implements ledger.Ledger: End of the runner the instance
// points at, in the same transaction as the lookup.
func (l *Ledger) EndInstance(ctx context.Context, instanceID string, at time.Time, reason string) (bool, error) {
	var ended bool
	err := l.d.tx(ctx, func(tx *sql.Tx) error {
		name, err := runnerOf(ctx, tx, instanceID)
		if err != nil {
			return err
		}
		ended, err = l.endTx(ctx, tx, name, at, reason)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("ending instance %s: %w", instanceID, err)
	}
	return ended, nil
}

// MarkInterrupted implements ledger.Interruptions: in one transaction, the
// runner on the instance gets the warning's time unless it has one.
func (l *Ledger) MarkInterrupted(ctx context.Context, instanceID string, at time.Time) error {
	err := l.d.tx(ctx, func(tx *sql.Tx) error {
		name, err := runnerOf(ctx, tx, instanceID)
		if err != nil {
			return err
		}
		return l.updateTx(ctx, tx, name, func(_ *sql.Tx, r ledger.Runner) (ledger.Runner, bool, error) {
			if !r.InterruptedAt.IsZero() {
				return r, false, nil // the first warning wins
			}
			r.InterruptedAt = at
			return r, true, nil
		})
	})
	if err != nil {
		return fmt.Errorf("marking instance %s interrupted: %w", instanceID, err)
	}
	return nil
}

// Runner implements ledger.Ledger.
func (l *Ledger) Runner(ctx context.Context, name string) (ledger.Runner, error) {
	if err := ctx.Err(); err != nil {
		return ledger.Runner{}, err
	}
	r, ok, err := l.runner(ctx, l.d.db, name)
	switch {
	case err != nil:
		return ledger.Runner{}, err
	case !ok:
		return ledger.Runner{}, fmt.Errorf("reading runner %s: %w", name, store.ErrNotFound)
	}
	return r, nil
}

// RunnerByInstance implements ledger.Ledger: the pointer and the record in
// one read.
func (l *Ledger) RunnerByInstance(ctx context.Context, instanceID string) (ledger.Runner, error) {
	if err := ctx.Err(); err != nil {
		return ledger.Runner{}, err
	}
	var name, rec string
	var expires int64
	err := l.d.db.QueryRowContext(ctx, `SELECT r.name, r.record, r.expires_at FROM runner_instances i
		JOIN runners r ON r.name = i.runner WHERE i.instance_id = ?`, instanceID).Scan(&name, &rec, &expires)
	switch {
	case isNoRows(err) || (err == nil && !live(expires, l.now())):
		return ledger.Runner{}, fmt.Errorf("reading the runner of instance %s: %w", instanceID, store.ErrNotFound)
	case err != nil:
		return ledger.Runner{}, fmt.Errorf("reading the runner of instance %s: %w", instanceID, err)
	}
	var r ledger.Runner
	if err := json.Unmarshal([]byte(rec), &r); err != nil {
		return ledger.Runner{}, fmt.Errorf("decoding runner %s: %w", name, err)
	}
	return r, nil
}

// LiveRunners implements ledger.Ledger, sorted by name. Unlike DynamoDB's
// index, it is exact: one read of the records in a live state.
func (l *Ledger) LiveRunners(ctx context.Context, pool string) ([]ledger.Runner, error) {
	out, err := l.list(ctx, "SELECT name, record, expires_at FROM runners WHERE pool = ? AND "+liveState+" ORDER BY name", pool)
	if err != nil {
		return nil, fmt.Errorf("listing the live runners of pool %s: %w", pool, err)
	}
	return out, nil
}

// list runs a query of runner rows (name, record, expires_at) and decodes
// the records that have not expired.
func (l *Ledger) list(ctx context.Context, query string, args ...any) ([]ledger.Runner, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rows, err := l.d.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []ledger.Runner
	for rows.Next() {
		var name, rec string
		var expires int64
		if err := rows.Scan(&name, &rec, &expires); err != nil {
			return nil, err
		}
		if !live(expires, l.now()) {
			continue
		}
		var r ledger.Runner
		if err := json.Unmarshal([]byte(rec), &r); err != nil {
			return nil, fmt.Errorf("decoding runner %s: %w", name, err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// Live implements ledger.Ledger: the number of the pool's records in a live
// state.
func (l *Ledger) Live(ctx context.Context, pool string) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return count(ctx, l.d.db, pool)
}
