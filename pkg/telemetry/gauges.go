package telemetry

import (
	"io"
	"sync"
	"time"
)

// Gauges record a level per pool (the jobs waiting in its room, say).
// Implementations are safe for concurrent use and never fail the caller.
type Gauges interface {
	// Gauge records v for metric name, with a Pool dimension.
	Gauge(name, pool string, v int64)
}

// DiscardGauges records nothing.
var DiscardGauges Gauges = discardGauges{}

type discardGauges struct{}

func (discardGauges) Gauge(string, string, int64) {}

// EMFGauges writes one embedded-metric-format line per level, unit Count,
// with dimensions Function and Pool.
type EMFGauges struct {
	mu sync.Mutex
	emfWriter
}

// NewEMFGauges returns Gauges writing to w under namespace.
func NewEMFGauges(w io.Writer, namespace, function string, now func() time.Time) *EMFGauges {
	return &EMFGauges{emfWriter: newEMFWriter(w, namespace, function, now)}
}

// Gauge implements Gauges.
func (e *EMFGauges) Gauge(name, pool string, v int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.writePoolMetric(name, "Count", pool, v)
}

// MemoryGauges keeps the last level of each metric and pool, for tests.
type MemoryGauges struct {
	mu sync.Mutex
	v  map[string]int64
}

// Gauge implements Gauges.
func (m *MemoryGauges) Gauge(name, pool string, v int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.v == nil {
		m.v = map[string]int64{}
	}
	m.v[name+"/"+pool] = v
}

// Get returns the last level of name for pool, and whether there is one.
func (m *MemoryGauges) Get(name, pool string) (int64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.v[name+"/"+pool]
	return v, ok
}
