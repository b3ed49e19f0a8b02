package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/skiffci/skiff/pkg/store"
)

const installationsSchema = `
CREATE TABLE IF NOT EXISTS installations (
	id           INTEGER PRIMARY KEY,
	app_id       INTEGER NOT NULL,
	account      TEXT    NOT NULL,
	account_type TEXT    NOT NULL,
	status       TEXT    NOT NULL,
	updated_at   INTEGER NOT NULL
);
`

// Installations is local mode's store.Installations in the SQLite file.
type Installations struct {
	d *DB
}

var _ store.Installations = (*Installations)(nil)

// NewInstallations returns the installation records in d.
func NewInstallations(d *DB) *Installations { return &Installations{d: d} }

// RecordInstallation implements store.Installations: one upsert whose
// condition keeps a deletion final and an older event from replacing a
// newer one.
func (s *Installations) RecordInstallation(ctx context.Context, in store.Installation) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	switch in.Status {
	case store.InstallationActive, store.InstallationSuspended, store.InstallationDeleted:
	default:
		return fmt.Errorf("recording installation %d: status %q", in.ID, in.Status)
	}
	if in.ID <= 0 {
		return fmt.Errorf("recording installation: id %d", in.ID)
	}
	return s.d.tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO installations (id, app_id, account, account_type, status, updated_at)
			VALUES (?, ?, ?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET app_id = excluded.app_id, account = excluded.account,
				account_type = excluded.account_type, status = excluded.status, updated_at = excluded.updated_at
			WHERE installations.status <> 'deleted'
				AND (excluded.status = 'deleted' OR installations.updated_at <= excluded.updated_at)`,
			in.ID, in.AppID, in.Account, in.AccountType, string(in.Status), in.UpdatedAt.UnixNano()); err != nil {
			return fmt.Errorf("recording installation %d: %w", in.ID, err)
		}
		return nil
	})
}

// Installation implements store.Installations.
func (s *Installations) Installation(ctx context.Context, id int64) (store.Installation, error) {
	in := store.Installation{ID: id}
	var status string
	var updated int64
	err := s.d.db.QueryRowContext(ctx, "SELECT app_id, account, account_type, status, updated_at FROM installations WHERE id = ?", id).
		Scan(&in.AppID, &in.Account, &in.AccountType, &status, &updated)
	if isNoRows(err) {
		return store.Installation{}, store.ErrNotFound
	}
	if err != nil {
		return store.Installation{}, fmt.Errorf("reading installation %d: %w", id, err)
	}
	in.Status, in.UpdatedAt = store.InstallationStatus(status), time.Unix(0, updated).UTC()
	return in, nil
}
