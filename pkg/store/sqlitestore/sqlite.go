// Package sqlitestore keeps `skiff local`'s queue and store in one SQLite file,
// through the pure-Go driver modernc.org/sqlite (no cgo): the job queue
// (queue.Sender, queue.Receiver, queue.DeadLetterer, with SQS's
// at-least-once semantics) and the state (store.Store: jobs and runs,
// with the same merge rules as the in-memory and DynamoDB stores), scale-up's launch state (ledger.Launches: claims, fenced launches,
// on-demand marks), the waiting room (room.Store, whose backoffs are also the
// memory of failed capacity) and the runner ledger (ledger.Ledger and
// ledger.Interruptions), with the conditions of ledger.LaunchMemory and
// ledger.Memory.
//
// Durability: the file is in WAL mode with synchronous=FULL by default, and
// every write is one transaction committed before the call returns. A
// committed write survives the process being killed (kill -9) at any
// moment — WAL with synchronous=NORMAL would already guarantee that, since
// the WAL is written before commit returns and the kernel keeps it — and,
// with FULL, the WAL is also fsynced at every commit, so a power loss or a
// kernel crash loses no acknowledged job either. The webhook answers GitHub
// 200 only after Send returns, and GitHub never redelivers by itself: a job
// acknowledged and then lost is lost for good, so FULL is the default. The
// same holds for the runner ledger: an acknowledged reservation (all its
// runners or none) and an acknowledged end (the record terminated and off
// its pool's count, together) survive.
// Options.Synchronous can choose NORMAL where a lost tail on power loss is
// acceptable (see the benchmark for the cost).
//
// Schema (integer times are Unix nanoseconds; 0 means none):
//
//	queue_messages (id, body, job_id, visible_at, receives, sent_at)
//	dead_letters   (id, message_id, body, job_id, receive_count, reason, detail, dead_at)
//	jobs           (id, status, record JSON, expires_at)
//	runs           (id, attempt, record JSON, expires_at)
//	launch_claims  (job_id, gen, token, record JSON, expires_at)
//	fleets         (token, state, record JSON, expires_at): launch records,
//	               under the table's first name
//	runners        (name, pool, state, record JSON, expires_at); partial index
//	               runners_live (pool, name) over live states: the live count
//	runner_instances (instance_id, runner)
//	runners_awaiting (pool, name): the ledger's awaiting runners
//
// A record whose expires_at has passed on the store's clock is treated as
// absent by every read and write, as DynamoDB's TTL is; Sweep deletes them.
package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"time"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver

	"github.com/skiffci/skiff/pkg/store/expiry"
)

// Synchronous is SQLite's synchronous setting in WAL mode.
type Synchronous string

// The settings Options.Synchronous takes.
const (
	// Full fsyncs the WAL at every commit: a committed write survives a
	// power loss (the default).
	Full Synchronous = "FULL"
	// Normal fsyncs only at checkpoints: a committed write survives the
	// process's death, but the last commits may roll back on a power loss.
	Normal Synchronous = "NORMAL"
)

// busyTimeout is how long a write waits for another process's write lock
// (`skiff status` reading, a second skiff local by mistake) before it
// fails: far longer than any of skiff's transactions, which take
// milliseconds.
const busyTimeout = 5 * time.Second

// Options configures Open.
type Options struct {
	// Synchronous is Full (default) or Normal.
	Synchronous Synchronous
}

// DB is one open SQLite file. It is safe for concurrent use. Queue and
// Store share it.
type DB struct {
	db *sql.DB
}

// clocked is what each of the file's record stores holds: the file, and
// the clock that decides whether a record has expired.
type clocked struct {
	d   *DB
	now func() time.Time
}

// on returns d with the clock now (time.Now when nil).
func on(d *DB, now func() time.Time) clocked {
	if now == nil {
		now = time.Now
	}
	return clocked{d: d, now: now}
}

const schema = `
CREATE TABLE IF NOT EXISTS queue_messages (
	id         INTEGER PRIMARY KEY AUTOINCREMENT,
	body       TEXT    NOT NULL,
	job_id     INTEGER NOT NULL,
	visible_at INTEGER NOT NULL,
	receives   INTEGER NOT NULL DEFAULT 0,
	sent_at    INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS dead_letters (
	id            INTEGER PRIMARY KEY AUTOINCREMENT,
	message_id    TEXT    NOT NULL,
	body          TEXT    NOT NULL,
	job_id        INTEGER NOT NULL,
	receive_count INTEGER NOT NULL,
	reason        TEXT    NOT NULL,
	detail        TEXT    NOT NULL,
	dead_at       INTEGER NOT NULL
);
DROP TABLE IF EXISTS deliveries;
CREATE TABLE IF NOT EXISTS jobs (
	id         INTEGER PRIMARY KEY,
	status     INTEGER NOT NULL,
	record     TEXT    NOT NULL,
	expires_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS runs (
	id         INTEGER PRIMARY KEY,
	attempt    INTEGER NOT NULL,
	record     TEXT    NOT NULL,
	expires_at INTEGER NOT NULL
);
`

// Open opens (creating if needed) the SQLite file at path with its schema.
func Open(path string, o Options) (*DB, error) {
	if o.Synchronous == "" {
		o.Synchronous = Full
	}
	if o.Synchronous != Full && o.Synchronous != Normal {
		return nil, fmt.Errorf("opening %s: synchronous %q is neither FULL nor NORMAL", path, o.Synchronous)
	}
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous("+string(o.Synchronous)+")")
	q.Add("_pragma", "foreign_keys(ON)")
	q.Set("_txlock", "immediate") // take the write lock at BEGIN: no lock upgrades, no deadlocks
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	// One connection: SQLite has one writer anyway, and a single connection
	// serialises this process's transactions without SQLITE_BUSY.
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(schema + launchSchema + ledgerSchema + recordsSchema + roomSchema + installationsSchema + securitySchema + runnersSchema); err != nil {
		db.Close()
		return nil, fmt.Errorf("creating the schema in %s: %w", path, err)
	}
	d := &DB{db: db}
	// The settings are read back: a driver that ignored a pragma would
	// otherwise leave the file less durable than documented, silently.
	got, err := d.Settings(context.Background())
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	if want := (Settings{JournalMode: "wal", Synchronous: o.Synchronous, ForeignKeys: true}); got != want {
		db.Close()
		return nil, fmt.Errorf("opening %s: settings are %+v, want %+v", path, got, want)
	}
	return d, nil
}

// Settings are the durability settings of an open file, as SQLite reports them.
type Settings struct {
	JournalMode string      // "wal"
	Synchronous Synchronous // FULL or NORMAL; OFF or EXTRA read as such
	ForeignKeys bool
}

// Settings reads the file's settings back from SQLite.
func (d *DB) Settings(ctx context.Context) (Settings, error) {
	var s Settings
	var sync, fk int
	if err := d.db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&s.JournalMode); err != nil {
		return s, fmt.Errorf("reading the journal mode: %w", err)
	}
	if err := d.db.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&sync); err != nil {
		return s, fmt.Errorf("reading the synchronous setting: %w", err)
	}
	if err := d.db.QueryRowContext(ctx, "PRAGMA foreign_keys").Scan(&fk); err != nil {
		return s, fmt.Errorf("reading the foreign keys setting: %w", err)
	}
	// SQLite's numbers for synchronous: 0 OFF, 1 NORMAL, 2 FULL, 3 EXTRA.
	s.Synchronous = [...]Synchronous{"OFF", Normal, Full, "EXTRA"}[min(max(sync, 0), 3)]
	s.ForeignKeys = fk == 1
	return s, nil
}

// Close closes the file.
func (d *DB) Close() error { return d.db.Close() }

// tx runs fn in one immediate transaction and commits it.
func (d *DB) tx(ctx context.Context, fn func(*sql.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("beginning a transaction: %w", err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("committing: %w", err)
	}
	return nil
}

// readLive reads the one row of a query that selects a JSON record and its
// expires_at, and decodes the record; ok is false when there is no row or
// the record has expired by now.
func readLive[T any](ctx context.Context, q querier, now time.Time, query string, args ...any) (v T, ok bool, err error) {
	var rec string
	var expires int64
	err = q.QueryRowContext(ctx, query, args...).Scan(&rec, &expires)
	switch {
	case isNoRows(err):
		return v, false, nil
	case err != nil:
		return v, false, err
	case !live(expires, now):
		return v, false, nil
	}
	if err := json.Unmarshal([]byte(rec), &v); err != nil {
		var zero T
		return zero, false, fmt.Errorf("decoding: %w", err)
	}
	return v, true, nil
}

// queryAll runs a query and reads every row with scan, in the query's
// order. The rows are closed when it returns, so that a transaction can
// write after it.
func queryAll[T any](ctx context.Context, q querier, scan func(*sql.Rows) (T, error), query string, args ...any) ([]T, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// Sweep deletes the records that have expired by now (jobs, runs, launch
// claims, launches, on-demand marks and ended runners, with
// the instance pointers and awaiting rows left without a runner), as
// DynamoDB's TTL does.
// Reads treat them as absent before.
func (d *DB) Sweep(ctx context.Context, now time.Time) (int64, error) {
	var n int64
	err := d.tx(ctx, func(tx *sql.Tx) error {
		for _, table := range []string{"jobs", "runs", "launch_claims", "fleets", "on_demand_runs", "runners"} {
			res, err := tx.ExecContext(ctx, "DELETE FROM "+table+" WHERE expires_at != 0 AND expires_at <= ?", expiry.NanosFloor(now))
			if err != nil {
				return fmt.Errorf("sweeping %s: %w", table, err)
			}
			k, _ := res.RowsAffected()
			n += k
		}
		for _, ref := range []struct{ table, runner string }{{"runner_instances", "runner"}, {"runners_awaiting", "name"}} {
			res, err := tx.ExecContext(ctx, "DELETE FROM "+ref.table+" WHERE NOT EXISTS (SELECT 1 FROM runners WHERE runners.name = "+
				ref.table+"."+ref.runner+")")
			if err != nil {
				return fmt.Errorf("sweeping %s: %w", ref.table, err)
			}
			k, _ := res.RowsAffected()
			n += k
		}
		return nil
	})
	return n, err
}

// nanos is t in Unix nanoseconds, 0 for the zero time.
func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// live reports whether a record with expires_at (Unix nanoseconds, 0 for
// never) is not expired at now, by pkg/store/expiry's rule.
func live(expiresAt int64, now time.Time) bool {
	return expiresAt == 0 || expiresAt > expiry.NanosFloor(now)
}

var errNoRows = sql.ErrNoRows

func isNoRows(err error) bool { return errors.Is(err, errNoRows) }
