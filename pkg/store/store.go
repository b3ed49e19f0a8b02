// Package store keeps skiff's state: webhook delivery dedupe marks, the
// lifecycle of every workflow job, and each workflow run's triggering event.
//
// A job's status only moves forward:
//
//	waiting ──▶ queued ──▶ in_progress ──▶ completed
//
// GitHub delivers webhooks at least once and in no guaranteed order, so
// RecordJob merges: an event with a later status advances the record; an
// event with the same or an earlier status only fills fields the record
// still lacks (a late in_progress after completed adds the runner and start
// time, and never reopens the job).
//
// In AWS the store is one DynamoDB table (package dynamostore, whose doc
// holds the key design); in tests it is in memory, in local mode SQLite
// (package sqlite).
package store

import (
	"context"
	"time"

	"github.com/skiffci/skiff/pkg/ledger"
)

// Status is where a workflow job is in its lifecycle. The order of the
// constants is the order a job moves through.
type Status int

// The job statuses, in lifecycle order.
const (
	StatusUnknown Status = iota
	StatusWaiting
	StatusQueued
	StatusInProgress
	StatusCompleted
)

var statusNames = [...]string{"unknown", "waiting", "queued", "in_progress", "completed"}

// String returns GitHub's name for the status (the workflow_job action).
func (s Status) String() string {
	if s < 0 || int(s) >= len(statusNames) {
		return "unknown"
	}
	return statusNames[s]
}

// ParseStatus maps a workflow_job action to its status.
func ParseStatus(action string) (Status, bool) {
	for i, n := range statusNames[1:] {
		if n == action {
			return Status(i + 1), true
		}
	}
	return StatusUnknown, false
}

// JobRecord is the record of one workflow job. Zero values mean "not known yet".
type JobRecord struct {
	ID             int64
	RunID          int64
	Attempt        int
	Repository     string // owner/name
	Owner          string
	InstallationID int64
	Status         Status
	Labels         []string
	Pool           string
	WorkflowName   string
	JobName        string
	Branch         string
	QueuedAt       time.Time
	StartedAt      time.Time
	CompletedAt    time.Time
	RunnerName     string
	RunnerID       int64
	Conclusion     string
	UpdatedAt      time.Time
	// ExpiresAt is when the store may forget the record (DynamoDB TTL).
	ExpiresAt time.Time
}

// RunRecord is what skiff keeps of a workflow run: the event that triggered it,
// which workflow_job payloads lack and the metrics record needs.
type RunRecord struct {
	ID           int64
	Attempt      int
	Event        string // push, pull_request, schedule, workflow_dispatch, ...
	WorkflowName string
	Repository   string
	UpdatedAt    time.Time
	ExpiresAt    time.Time

	// What the fork policy of a pool needs (pool.Trigger), from workflow_run.

	// HeadRepository is the run's head repository (owner/name), where its
	// code comes from; "" when GitHub sent none (the fork was deleted).
	HeadRepository string
	// FromFork reports that the run's code comes from another repository
	// than Repository (a pull request from a fork, or a chain started by one).
	FromFork bool
	// Actor is the login of who triggered the run (triggering_actor, else actor).
	Actor string
}

// Errors a Store returns; callers test them with errors.Is.
var (
	// ErrNotFound: no record with that key. It is ledger.ErrNotFound, so
	// that one errors.Is serves every port of the store.
	ErrNotFound = ledger.ErrNotFound
	// ErrConflict: a conditional write lost to a concurrent writer. It is
	// ledger.ErrConflict.
	ErrConflict = ledger.ErrConflict
)

// Store is skiff's state. Every method is safe for concurrent use and
// bounded by its context. An error other than ErrNotFound is a
// failure of the store itself, which the caller should surface as retryable.
type Store interface {
	// RecordJob merges a lifecycle event into the job's record (see the
	// package doc). It reports whether the event advanced the status; an
	// event that did not advance it may still have filled missing fields.
	// j.ID and j.Status are required.
	RecordJob(ctx context.Context, j JobRecord) (advanced bool, err error)
	// Job returns the job's record, or ErrNotFound.
	Job(ctx context.Context, id int64) (JobRecord, error)

	// RecordRun stores a workflow run's trigger, replacing an older attempt's.
	RecordRun(ctx context.Context, r RunRecord) error
	// Run returns the run's record, or ErrNotFound.
	Run(ctx context.Context, id int64) (RunRecord, error)
}
