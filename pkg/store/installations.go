package store

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// InstallationStatus is what skiff knows of a GitHub App installation,
// from the installation webhook:
//
//	created ──► active ──suspend──► suspended ──unsuspend──► active
//	              └──────────── deleted (final: GitHub never reuses an id) ◄──┘
type InstallationStatus string

// The installation statuses.
const (
	InstallationActive    InstallationStatus = "active"
	InstallationSuspended InstallationStatus = "suspended"
	InstallationDeleted   InstallationStatus = "deleted"
)

// Installation is the record of one App installation.
type Installation struct {
	ID          int64
	AppID       int64
	Account     string // the organization's or user's login
	AccountType string // "Organization" or "User"
	Status      InstallationStatus
	UpdatedAt   time.Time // when skiff received the event
}

// Installations records App installations. RecordInstallation stores an
// event's status: a deleted installation stays deleted whatever comes
// later, and otherwise the later event (by UpdatedAt) wins, so a replayed
// delivery changes nothing. Installation returns the record or
// ErrNotFound.
type Installations interface {
	RecordInstallation(ctx context.Context, in Installation) error
	Installation(ctx context.Context, id int64) (Installation, error)
}

// installationWins reports whether an event next replaces the record cur.
func installationWins(cur, next Installation) bool {
	return cur.Status != InstallationDeleted && (next.Status == InstallationDeleted || !next.UpdatedAt.Before(cur.UpdatedAt))
}

// ValidateInstallation reports a record no adapter may write: an unknown
// status or a missing id.
func ValidateInstallation(in Installation) error {
	switch in.Status {
	case InstallationActive, InstallationSuspended, InstallationDeleted:
	default:
		return fmt.Errorf("recording installation %d: status %q", in.ID, in.Status)
	}
	if in.ID <= 0 {
		return fmt.Errorf("recording installation: id %d", in.ID)
	}
	return nil
}

// InstallationsMemory is an in-memory Installations, for tests and for
// processes that keep no file.
type InstallationsMemory struct {
	mu sync.Mutex
	m  map[int64]Installation
}

// NewInstallationsMemory returns an empty InstallationsMemory.
func NewInstallationsMemory() *InstallationsMemory {
	return &InstallationsMemory{m: map[int64]Installation{}}
}

// RecordInstallation implements Installations.
func (s *InstallationsMemory) RecordInstallation(_ context.Context, in Installation) error {
	if err := ValidateInstallation(in); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.m[in.ID]; ok && !installationWins(cur, in) {
		return nil
	}
	s.m[in.ID] = in
	return nil
}

// Installation implements Installations.
func (s *InstallationsMemory) Installation(_ context.Context, id int64) (Installation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, ok := s.m[id]
	if !ok {
		return Installation{}, ErrNotFound
	}
	return in, nil
}
