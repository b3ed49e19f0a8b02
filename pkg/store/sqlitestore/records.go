package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"iter"

	"github.com/skiffci/skiff/pkg/metrics"
)

const recordsSchema = `
CREATE TABLE IF NOT EXISTS metrics_records (
	job_id      INTEGER NOT NULL,
	run_attempt INTEGER NOT NULL,
	record      TEXT    NOT NULL,
	PRIMARY KEY (job_id, run_attempt)
);
`

// MetricsRecords is local mode's metrics.Records: each record as its JSON
// (the schema's own form) in the SQLite file, once per job and attempt.
type MetricsRecords struct {
	d *DB
}

var _ metrics.Records = (*MetricsRecords)(nil)

// NewMetricsRecords returns the record store over d.
func NewMetricsRecords(d *DB) *MetricsRecords { return &MetricsRecords{d: d} }

// Put implements metrics.Records: validated, then written unless the key
// was written before (metrics.ErrExists).
func (m *MetricsRecords) Put(ctx context.Context, r metrics.Record) error {
	data, err := metrics.Encode(ctx, r)
	if err != nil {
		return err
	}
	return m.d.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO metrics_records (job_id, run_attempt, record) VALUES (?, ?, ?)
			ON CONFLICT (job_id, run_attempt) DO NOTHING`, r.JobID, r.RunAttempt, string(data))
		if err != nil {
			return fmt.Errorf("putting metrics record %s: %w", r.Key(), err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("putting metrics record %s: %w", r.Key(), metrics.ErrExists)
		}
		return nil
	})
}

// List implements metrics.Records, in the order the records were put.
func (m *MetricsRecords) List(ctx context.Context, f metrics.Filter) iter.Seq2[metrics.Record, error] {
	return func(yield func(metrics.Record, error) bool) {
		rows, err := m.d.db.QueryContext(ctx, "SELECT record FROM metrics_records ORDER BY rowid")
		if err != nil {
			yield(metrics.Record{}, fmt.Errorf("listing metrics records: %w", err))
			return
		}
		defer rows.Close()
		for rows.Next() {
			var data string
			if err := rows.Scan(&data); err != nil {
				yield(metrics.Record{}, fmt.Errorf("listing metrics records: %w", err))
				return
			}
			var r metrics.Record
			if err := json.Unmarshal([]byte(data), &r); err != nil {
				yield(metrics.Record{}, fmt.Errorf("listing metrics records: %w", err))
				return
			}
			if f.Match(&r) && !yield(r, nil) {
				return
			}
		}
		if err := rows.Err(); err != nil {
			yield(metrics.Record{}, fmt.Errorf("listing metrics records: %w", err))
		}
	}
}
