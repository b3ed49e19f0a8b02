package metrics

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"
	"sync"
	"time"
)

// ErrExists: a record with the same key (job id and run attempt) was
// written before. The existing record is unchanged.
var ErrExists = errors.New("metrics record exists")

// Records is the metrics record store. Every method is safe for concurrent
// use and bounded by its context.
//
// Errors: Put returns ErrExists when the key was written before (and
// changes nothing), an error wrapping ErrInvalid when the record fails the
// schema (and writes nothing); any other error is a failure of the store,
// which the caller should treat as retryable. List yields records and, at
// most once and last, an error of the store.
type Records interface {
	// Put writes the record exactly once per key (job id + run attempt),
	// with a conditional write. The record is validated first.
	Put(ctx context.Context, r Record) error
	// List yields the records that match f, in no particular order.
	List(ctx context.Context, f Filter) iter.Seq2[Record, error]
}

// Encode is what every store does before it writes r: it fails on a
// canceled context and on a record that fails the schema (ErrInvalid),
// and returns the record's JSON, the form stores keep.
func Encode(ctx context.Context, r Record) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("putting metrics record: %w", err)
	}
	if err := Validate(r); err != nil {
		return nil, fmt.Errorf("putting metrics record %s: %w", r.Key(), err)
	}
	data, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("encoding metrics record %s: %w", r.Key(), err)
	}
	return data, nil
}

// Filter selects records. Zero fields do not filter; strings compare
// case-insensitively.
type Filter struct {
	// Since keeps records of jobs that ended at or after it.
	Since        time.Time
	Repository   string
	Workflow     string
	Pool         string
	InstanceType string
}

// End is when the record's job ended: completedAt, else startedAt +
// runtime (an interrupted job), else the zero time.
func (r *Record) End() time.Time {
	switch {
	case r.CompletedAt != nil:
		return *r.CompletedAt
	case r.StartedAt != nil:
		return r.StartedAt.Add(r.Runtime.Std())
	}
	return time.Time{}
}

// Match reports whether the record passes the filter.
func (f Filter) Match(r *Record) bool {
	eq := func(want, got string) bool { return want == "" || strings.EqualFold(want, got) }
	return eq(f.Repository, r.Repository) && eq(f.Workflow, r.WorkflowName) && eq(f.Pool, r.Pool) &&
		eq(f.InstanceType, r.InstanceType) && (f.Since.IsZero() || !r.End().Before(f.Since))
}

// MemoryRecords is an in-memory Records, for tests, `skiff local` and reports over
// a file. Its zero value is ready to use.
type MemoryRecords struct {
	mu      sync.Mutex
	records map[Key]Record
	order   []Key
}

var _ Records = (*MemoryRecords)(nil)

// Put implements Records.
func (m *MemoryRecords) Put(ctx context.Context, r Record) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("putting metrics record: %w", err)
	}
	if err := Validate(r); err != nil {
		return fmt.Errorf("putting metrics record %s: %w", r.Key(), err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.records == nil {
		m.records = map[Key]Record{}
	}
	k := r.Key()
	if _, ok := m.records[k]; ok {
		return fmt.Errorf("putting metrics record %s: %w", k, ErrExists)
	}
	m.records[k] = clone(r)
	m.order = append(m.order, k)
	return nil
}

// List implements Records; it yields records in the order they were put.
func (m *MemoryRecords) List(ctx context.Context, f Filter) iter.Seq2[Record, error] {
	return func(yield func(Record, error) bool) {
		m.mu.Lock()
		snapshot := make([]Record, 0, len(m.order))
		for _, k := range m.order {
			if r := m.records[k]; f.Match(&r) {
				snapshot = append(snapshot, clone(r))
			}
		}
		m.mu.Unlock()
		for _, r := range snapshot {
			if err := ctx.Err(); err != nil {
				yield(Record{}, fmt.Errorf("listing metrics records: %w", err))
				return
			}
			if !yield(r, nil) {
				return
			}
		}
	}
}

// clone copies the record's slices, so that callers cannot change what
// the store holds. Pointed-to values are never mutated after Build.
func clone(r Record) Record {
	r.Labels = slices.Clone(r.Labels)
	r.GPUs = slices.Clone(r.GPUs)
	r.MissingSources = slices.Clone(r.MissingSources)
	return r
}
