package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/store"
)

// RunInstallations is the conformance suite of store.Installations: what
// one implementation records, every implementation records.
func RunInstallations(t *testing.T, newStore func(*testing.T) store.Installations) {
	t.Helper()
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	at := func(min int) time.Time { return t0.Add(time.Duration(min) * time.Minute) }
	ev := func(id int64, st store.InstallationStatus, min int) store.Installation {
		return store.Installation{ID: id, AppID: 7, Account: "acme", AccountType: "Organization", Status: st, UpdatedAt: at(min)}
	}
	tests := []struct {
		name   string
		events []store.Installation
		want   store.InstallationStatus
	}{
		{"created", []store.Installation{ev(1, store.InstallationActive, 0)}, store.InstallationActive},
		{"suspended", []store.Installation{ev(1, store.InstallationActive, 0), ev(1, store.InstallationSuspended, 1)}, store.InstallationSuspended},
		{"unsuspended", []store.Installation{ev(1, store.InstallationActive, 0), ev(1, store.InstallationSuspended, 1),
			ev(1, store.InstallationActive, 2)}, store.InstallationActive},
		{"an older event arriving late changes nothing", []store.Installation{ev(1, store.InstallationSuspended, 5),
			ev(1, store.InstallationActive, 1)}, store.InstallationSuspended},
		{"replayed", []store.Installation{ev(1, store.InstallationActive, 0), ev(1, store.InstallationActive, 0)}, store.InstallationActive},
		{"deleted", []store.Installation{ev(1, store.InstallationActive, 0), ev(1, store.InstallationDeleted, 1)}, store.InstallationDeleted},
		{"deleted is final, even for a later created", []store.Installation{ev(1, store.InstallationDeleted, 1),
			ev(1, store.InstallationActive, 9)}, store.InstallationDeleted},
		{"deleted wins over a newer suspend", []store.Installation{ev(1, store.InstallationSuspended, 9),
			ev(1, store.InstallationDeleted, 1)}, store.InstallationDeleted},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t)
			ctx := context.Background()
			for _, e := range tc.events {
				if err := s.RecordInstallation(ctx, e); err != nil {
					t.Fatal(err)
				}
			}
			got, err := s.Installation(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			if got.Status != tc.want || got.Account != "acme" || got.AccountType != "Organization" || got.AppID != 7 {
				t.Errorf("record %+v, want status %s", got, tc.want)
			}
		})
	}
	t.Run("unknown", func(t *testing.T) {
		t.Parallel()
		if _, err := newStore(t).Installation(context.Background(), 404); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("err %v, want ErrNotFound", err)
		}
	})
	t.Run("bad status", func(t *testing.T) {
		t.Parallel()
		if err := newStore(t).RecordInstallation(context.Background(), store.Installation{ID: 1, Status: "gone"}); err == nil {
			t.Error("a made-up status was recorded")
		}
	})
}
