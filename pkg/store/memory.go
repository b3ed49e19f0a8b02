package store

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/skiffci/skiff/pkg/store/expiry"
)

// Memory is a Store held in process memory, for tests and local mode. It
// implements exactly the merge, claim and expiry rules of the DynamoDB
// store: a record past its ExpiresAt (a delivery past its lease or its
// finished mark's expiry) is treated as gone, as DynamoDB's reads treat an
// item past its TTL before deleting it. Its zero value is not usable: call
// NewMemory.
type Memory struct {
	mu   sync.Mutex
	now  func() time.Time
	jobs map[int64]JobRecord
	runs map[int64]RunRecord
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty in-memory store whose clock is time.Now.
func NewMemory() *Memory {
	return &Memory{now: time.Now, jobs: map[int64]JobRecord{}, runs: map[int64]RunRecord{}}
}

// SetClock sets the clock that decides whether a record has expired.
func (m *Memory) SetClock(now func() time.Time) {
	m.mu.Lock()
	m.now = now
	m.mu.Unlock()
}

// gone reports whether a record with this expiry is gone at now, by
// DynamoDB's rule (epoch seconds, rounded up). A zero expiry never expires.
func gone(expires, now time.Time) bool { return !expiry.Live(expires, now) }

// RecordJob implements Store.
func (m *Memory) RecordJob(ctx context.Context, j JobRecord) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if err := validateJob(j); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	old, ok := m.jobs[j.ID]
	if ok && gone(old.ExpiresAt, m.now()) {
		old, ok = JobRecord{}, false // an expired record is replaced whole
	}
	if !ok || old.Status < j.Status {
		m.jobs[j.ID] = mergeJob(old, j, true)
		return true, nil
	}
	m.jobs[j.ID] = mergeJob(old, j, false)
	return false, nil
}

// Job implements Store.
func (m *Memory) Job(ctx context.Context, id int64) (JobRecord, error) {
	if err := ctx.Err(); err != nil {
		return JobRecord{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	j, ok := m.jobs[id]
	if !ok || gone(j.ExpiresAt, m.now()) {
		return JobRecord{}, ErrNotFound
	}
	j.Labels = slices.Clone(j.Labels)
	return j, nil
}

// RecordRun implements Store.
func (m *Memory) RecordRun(ctx context.Context, r RunRecord) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if r.ID <= 0 {
		return errors.New("recording run: id is required")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.runs[r.ID]; ok && old.Attempt > r.Attempt && !gone(old.ExpiresAt, m.now()) {
		return nil
	}
	m.runs[r.ID] = r
	return nil
}

// Run implements Store.
func (m *Memory) Run(ctx context.Context, id int64) (RunRecord, error) {
	if err := ctx.Err(); err != nil {
		return RunRecord{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.runs[id]
	if !ok || gone(r.ExpiresAt, m.now()) {
		return RunRecord{}, ErrNotFound
	}
	return r, nil
}

func validateJob(j JobRecord) error {
	if j.ID <= 0 {
		return errors.New("recording job: id is required")
	}
	if j.Status <= StatusUnknown || j.Status > StatusCompleted {
		return errors.New("recording job: status is required")
	}
	return nil
}

// mergeJob applies event e to record old. With advance, e's status and
// every field e knows replace old's; without, e only fills fields old lacks.
// UpdatedAt and ExpiresAt follow the latest event either way.
func mergeJob(old, e JobRecord, advance bool) JobRecord {
	out := old
	out.ID = e.ID
	if advance {
		out.Status = e.Status
	}
	setInt := func(dst *int64, v int64) {
		if v != 0 && (advance || *dst == 0) {
			*dst = v
		}
	}
	setStr := func(dst *string, v string) {
		if v != "" && (advance || *dst == "") {
			*dst = v
		}
	}
	setTime := func(dst *time.Time, v time.Time) {
		if !v.IsZero() && (advance || dst.IsZero()) {
			*dst = v
		}
	}
	setInt(&out.RunID, e.RunID)
	attempt := int64(out.Attempt)
	setInt(&attempt, int64(e.Attempt))
	out.Attempt = int(attempt)
	setStr(&out.Repository, e.Repository)
	setStr(&out.Owner, e.Owner)
	setInt(&out.InstallationID, e.InstallationID)
	if len(e.Labels) > 0 && (advance || len(out.Labels) == 0) {
		out.Labels = slices.Clone(e.Labels)
	}
	setStr(&out.Pool, e.Pool)
	setStr(&out.WorkflowName, e.WorkflowName)
	setStr(&out.JobName, e.JobName)
	setStr(&out.Branch, e.Branch)
	setTime(&out.QueuedAt, e.QueuedAt)
	setTime(&out.StartedAt, e.StartedAt)
	setTime(&out.CompletedAt, e.CompletedAt)
	setStr(&out.RunnerName, e.RunnerName)
	setInt(&out.RunnerID, e.RunnerID)
	setStr(&out.Conclusion, e.Conclusion)
	if e.UpdatedAt.After(out.UpdatedAt) {
		out.UpdatedAt = e.UpdatedAt
	}
	if e.ExpiresAt.After(out.ExpiresAt) {
		out.ExpiresAt = e.ExpiresAt
	}
	return out
}
