package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"github.com/skiffci/skiff/pkg/ledger"
	"strings"
	"time"

	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/store/expiry"
)

// launchSchema holds scale-up's launch state (ledger.Launches). Records are
// JSON (ledger.Claim, ledger.Launch); the columns beside them are what
// the conditions read. Failed places, once a table here, are the
// waiting room's backoffs (room_backoff); a file that has the old table
// loses it.
const launchSchema = `
CREATE TABLE IF NOT EXISTS launch_claims (
	job_id     INTEGER PRIMARY KEY,
	gen        INTEGER NOT NULL,
	token      TEXT    NOT NULL,
	record     TEXT    NOT NULL,
	expires_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS fleets (
	token      TEXT    PRIMARY KEY,
	state      TEXT    NOT NULL,
	record     TEXT    NOT NULL,
	expires_at INTEGER NOT NULL
) WITHOUT ROWID;
DROP TABLE IF EXISTS failed_capacity;
CREATE TABLE IF NOT EXISTS on_demand_runs (
	run_id     INTEGER NOT NULL,
	pool       TEXT    NOT NULL,
	attempt    INTEGER NOT NULL,
	expires_at INTEGER NOT NULL,
	PRIMARY KEY (run_id, pool)
) WITHOUT ROWID;
`

// Launches is a ledger.Launches in the SQLite file, with the conditions of
// ledger.LaunchMemory and dynamostore.LaunchDynamo: each write is one transaction
// that reads the records its condition names and writes only if the
// condition holds, so a fenced launch and its members' claims are checked
// and written atomically, also against another process on the file.
type Launches struct{ clocked }

var _ ledger.Launches = (*Launches)(nil)

// NewLaunches returns the launch state in d. now is the clock of the one
// call that takes no time of its own, FinishLaunch (an expired launch is gone
// and cannot be finished); time.Now when nil. Every other call decides
// expiry by the time it is given.
func NewLaunches(d *DB, now func() time.Time) *Launches {
	return &Launches{on(d, now)}
}

// LaunchClaims implements ledger.Launches: one read of the live claims.
func (l *Launches) LaunchClaims(ctx context.Context, jobIDs []int64, now time.Time) (map[int64]ledger.Claim, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := map[int64]ledger.Claim{}
	if len(jobIDs) == 0 {
		return out, nil
	}
	// One statement, one snapshot. SQLite allows 32766 parameters; a
	// scale-up pass reads at most a batch of SQS messages' worth.
	args := make([]any, 0, len(jobIDs)+1)
	args = append(args, expiry.NanosFloor(now))
	for _, id := range jobIDs {
		args = append(args, id)
	}
	claims, err := queryAll(ctx, l.d.db, scanClaim, `SELECT job_id, record FROM launch_claims
		WHERE (expires_at = 0 OR expires_at > ?) AND job_id IN (?`+strings.Repeat(", ?", len(jobIDs)-1)+`)`, args...)
	if err != nil {
		return nil, fmt.Errorf("reading launch claims: %w", err)
	}
	for _, c := range claims {
		out[c.JobID] = c
	}
	return out, nil
}

// scanClaim reads a row of launch_claims' job_id and record.
func scanClaim(rows *sql.Rows) (ledger.Claim, error) {
	var id int64
	var rec string
	var c ledger.Claim
	if err := rows.Scan(&id, &rec); err != nil {
		return c, err
	}
	if err := json.Unmarshal([]byte(rec), &c); err != nil {
		return c, fmt.Errorf("decoding the launch claim of job %d: %w", id, err)
	}
	return c, nil
}

// EndLeases ends, at now, the lease of every live claim whose lease runs
// past it, in one transaction, and returns how many it ended. It is for a
// process that knows no holder of a claim is still at work: local mode
// when it starts, its previous process killed (one process per file).
// Each of those jobs' next delivery then recovers its launch record or launches
// its next attempt at once, instead of waiting out the lease.
func (l *Launches) EndLeases(ctx context.Context, now time.Time) (int, error) {
	n := 0
	err := l.d.tx(ctx, func(tx *sql.Tx) error {
		n = 0
		claims, err := queryAll(ctx, tx, scanClaim, "SELECT job_id, record FROM launch_claims WHERE expires_at = 0 OR expires_at > ?", expiry.NanosFloor(now))
		if err != nil {
			return fmt.Errorf("reading launch claims: %w", err)
		}
		for _, c := range claims {
			if !c.LeaseUntil.After(now) {
				continue
			}
			c.LeaseUntil = now
			b, err := json.Marshal(c)
			if err != nil {
				return fmt.Errorf("encoding the launch claim of job %d: %w", c.JobID, err)
			}
			if _, err := tx.ExecContext(ctx, "UPDATE launch_claims SET record = ? WHERE job_id = ?", string(b), c.JobID); err != nil {
				return fmt.Errorf("ending the lease of job %d: %w", c.JobID, err)
			}
			n++
		}
		return nil
	})
	return n, err
}

// ClaimLaunch implements ledger.Launches: in one transaction, the job's
// claim is read and replaced if it is still the one the caller read
// (absent or expired at now for prevGen 0, else live with gen prevGen).
func (l *Launches) ClaimLaunch(ctx context.Context, c ledger.Claim, prevGen int, now time.Time) error {
	if err := ledger.ValidateClaim(c, prevGen); err != nil {
		return err
	}
	b, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("encoding the launch claim of job %d: %w", c.JobID, err)
	}
	return l.d.tx(ctx, func(tx *sql.Tx) error {
		var gen int
		var expires int64
		err := tx.QueryRowContext(ctx, "SELECT gen, expires_at FROM launch_claims WHERE job_id = ?", c.JobID).Scan(&gen, &expires)
		if err != nil && !isNoRows(err) {
			return fmt.Errorf("reading the launch claim of job %d: %w", c.JobID, err)
		}
		present := err == nil && live(expires, now)
		if (prevGen == 0 && present) || (prevGen != 0 && (!present || gen != prevGen)) {
			return fmt.Errorf("claiming launch of job %d: %w", c.JobID, store.ErrConflict)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO launch_claims (job_id, gen, token, record, expires_at) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (job_id) DO UPDATE SET gen = excluded.gen, token = excluded.token, record = excluded.record, expires_at = excluded.expires_at`,
			c.JobID, c.Gen, c.Token, string(b), nanos(c.ExpiresAt)); err != nil {
			return fmt.Errorf("claiming launch of job %d: %w", c.JobID, err)
		}
		return nil
	})
}

// PutLaunch implements ledger.Launches. It is fenced in one transaction: the
// launch is written only if no live launch has its token and every member's
// claim is live and still names it, both at f.CreatedAt.
func (l *Launches) PutLaunch(ctx context.Context, f ledger.Launch) error {
	if err := ledger.ValidateLaunch(f); err != nil {
		return err
	}
	b, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("encoding launch %s: %w", f.Token, err)
	}
	liveAbove := expiry.NanosFloor(f.CreatedAt)
	return l.d.tx(ctx, func(tx *sql.Tx) error {
		var n int
		if err := tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM fleets WHERE token = ? AND (expires_at = 0 OR expires_at > ?)",
			f.Token, liveAbove).Scan(&n); err != nil {
			return fmt.Errorf("reading launch %s: %w", f.Token, err)
		}
		if n > 0 {
			return fmt.Errorf("recording launch %s: %w", f.Token, store.ErrConflict)
		}
		for _, m := range f.Members {
			var token string
			err := tx.QueryRowContext(ctx, "SELECT token FROM launch_claims WHERE job_id = ? AND (expires_at = 0 OR expires_at > ?)",
				m.JobID, liveAbove).Scan(&token)
			if err != nil && !isNoRows(err) {
				return fmt.Errorf("reading the launch claim of job %d: %w", m.JobID, err)
			}
			if isNoRows(err) || token != f.Token {
				return fmt.Errorf("recording launch %s: the claim of job %d was taken over: %w", f.Token, m.JobID, store.ErrConflict)
			}
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO fleets (token, state, record, expires_at) VALUES (?, ?, ?, ?)
			ON CONFLICT (token) DO UPDATE SET state = excluded.state, record = excluded.record, expires_at = excluded.expires_at`,
			f.Token, string(f.State), string(b), nanos(f.ExpiresAt)); err != nil {
			return fmt.Errorf("recording launch %s: %w", f.Token, err)
		}
		return nil
	})
}

// FinishLaunch implements ledger.Launches: in one transaction, a live launch
// in intent becomes done; any other (done, expired on the clock, absent)
// is ErrConflict and keeps what it has.
func (l *Launches) FinishLaunch(ctx context.Context, token string, instances []string, reason string) error {
	return l.d.tx(ctx, func(tx *sql.Tx) error {
		var rec string
		err := tx.QueryRowContext(ctx, "SELECT record FROM fleets WHERE token = ? AND state = ? AND (expires_at = 0 OR expires_at > ?)",
			token, string(ledger.LaunchIntent), expiry.NanosFloor(l.now())).Scan(&rec)
		if isNoRows(err) {
			return fmt.Errorf("finishing launch %s: not in intent: %w", token, store.ErrConflict)
		}
		if err != nil {
			return fmt.Errorf("reading launch %s: %w", token, err)
		}
		var f ledger.Launch
		if err := json.Unmarshal([]byte(rec), &f); err != nil {
			return fmt.Errorf("decoding launch %s: %w", token, err)
		}
		f.State, f.Instances, f.Reason = ledger.LaunchDone, instances, reason
		b, err := json.Marshal(f)
		if err != nil {
			return fmt.Errorf("encoding launch %s: %w", token, err)
		}
		if _, err := tx.ExecContext(ctx, "UPDATE fleets SET state = ?, record = ? WHERE token = ?", string(f.State), string(b), token); err != nil {
			return fmt.Errorf("finishing launch %s: %w", token, err)
		}
		return nil
	})
}

// Launch implements ledger.Launches.
func (l *Launches) Launch(ctx context.Context, token string, now time.Time) (ledger.Launch, error) {
	if err := ctx.Err(); err != nil {
		return ledger.Launch{}, err
	}
	var rec string
	err := l.d.db.QueryRowContext(ctx, "SELECT record FROM fleets WHERE token = ? AND (expires_at = 0 OR expires_at > ?)",
		token, expiry.NanosFloor(now)).Scan(&rec)
	if isNoRows(err) {
		return ledger.Launch{}, fmt.Errorf("reading launch %s: %w", token, store.ErrNotFound)
	}
	if err != nil {
		return ledger.Launch{}, fmt.Errorf("reading launch %s: %w", token, err)
	}
	var f ledger.Launch
	if err := json.Unmarshal([]byte(rec), &f); err != nil {
		return ledger.Launch{}, fmt.Errorf("decoding launch %s: %w", token, err)
	}
	return f, nil
}

// MarkOnDemand implements ledger.Launches.
func (l *Launches) MarkOnDemand(ctx context.Context, run int64, pool string, attempt int, until time.Time) error {
	if err := ledger.ValidateOnDemand(run, pool, attempt); err != nil {
		return err
	}
	return l.d.tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO on_demand_runs (run_id, pool, attempt, expires_at) VALUES (?, ?, ?, ?)
			ON CONFLICT (run_id, pool) DO UPDATE SET attempt = excluded.attempt, expires_at = excluded.expires_at`,
			run, pool, attempt, nanos(until)); err != nil {
			return fmt.Errorf("marking run %d on-demand in pool %s: %w", run, pool, err)
		}
		return nil
	})
}

// OnDemandFrom implements ledger.Launches.
func (l *Launches) OnDemandFrom(ctx context.Context, run int64, pool string, now time.Time) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	var attempt int
	err := l.d.db.QueryRowContext(ctx, `SELECT attempt FROM on_demand_runs WHERE run_id = ? AND pool = ?
		AND (expires_at = 0 OR expires_at > ?)`, run, pool, expiry.NanosFloor(now)).Scan(&attempt)
	switch {
	case isNoRows(err):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("reading the on-demand mark of run %d in pool %s: %w", run, pool, err)
	}
	return attempt, nil
}
