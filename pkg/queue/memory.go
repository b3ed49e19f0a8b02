package queue

import (
	"context"
	"sync"
)

// Memory is an in-process Sender for tests and local mode. It keeps every
// job it accepted in order. Its zero value is ready to use.
type Memory struct {
	mu   sync.Mutex
	jobs []Job
	err  error // returned by Send instead of accepting, see SetErr
}

var _ Sender = (*Memory)(nil)

// Send records the job, or returns the error set by SetErr.
func (m *Memory) Send(ctx context.Context, job Job) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := job.Validate(); err != nil {
		return invalid(err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return m.err
	}
	job.Labels = append([]string(nil), job.Labels...)
	m.jobs = append(m.jobs, job)
	return nil
}

// Jobs returns a copy of the jobs sent so far, in order.
func (m *Memory) Jobs() []Job {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Job, len(m.jobs))
	for i, j := range m.jobs {
		j.Labels = append([]string(nil), j.Labels...)
		out[i] = j
	}
	return out
}

// SetErr makes Send fail with err, to exercise callers' failure paths;
// nil makes Send accept jobs again.
func (m *Memory) SetErr(err error) {
	m.mu.Lock()
	m.err = err
	m.mu.Unlock()
}

// Reset forgets every job and the injected error.
func (m *Memory) Reset() {
	m.mu.Lock()
	m.jobs, m.err = nil, nil
	m.mu.Unlock()
}
