package telemetry

import (
	"encoding/json"
	"io"
	"strconv"
	"sync"
	"time"
)

// Timings records durations. Implementations are safe for concurrent use
// and never fail the caller.
type Timings interface {
	// Observe records d for metric name, with a Pool dimension.
	Observe(name, pool string, d time.Duration)
}

// DiscardTimings records nothing.
var DiscardTimings Timings = discardTimings{}

type discardTimings struct{}

func (discardTimings) Observe(string, string, time.Duration) {}

// EMFTimings writes one CloudWatch embedded-metric-format line per
// observation, in milliseconds, with dimensions Function and Pool (pool
// names are few, so series stay bounded).
type EMFTimings struct {
	mu sync.Mutex
	emfWriter
}

// NewEMFTimings returns Timings writing to w under namespace.
func NewEMFTimings(w io.Writer, namespace, function string, now func() time.Time) *EMFTimings {
	return &EMFTimings{emfWriter: newEMFWriter(w, namespace, function, now)}
}

// Observe implements Timings; write errors are dropped on purpose.
func (e *EMFTimings) Observe(name, pool string, d time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.writePoolMetric(name, "Milliseconds", pool, d.Milliseconds())
}

// writePoolMetric writes one embedded-metric-format line of one value with
// dimensions Function and Pool; write errors are dropped on purpose.
func (e emfWriter) writePoolMetric(name, unit, pool string, v int64) {
	line := map[string]any{
		"_aws": map[string]any{
			"Timestamp": e.now().UnixMilli(),
			"CloudWatchMetrics": []any{map[string]any{
				"Namespace":  e.namespace,
				"Dimensions": [][]string{{"Function", "Pool"}},
				"Metrics":    []any{map[string]string{"Name": name, "Unit": unit}},
			}},
		},
		"Function": e.function,
		"Pool":     pool,
		name:       json.Number(strconv.FormatInt(v, 10)),
	}
	b, err := json.Marshal(line)
	if err != nil {
		return
	}
	_, _ = e.w.Write(append(b, '\n'))
}

// MemoryTimings keeps observations in memory, for tests and local mode.
type MemoryTimings struct {
	mu  sync.Mutex
	obs map[string][]time.Duration
}

// Observe implements Timings.
func (m *MemoryTimings) Observe(name, pool string, d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.obs == nil {
		m.obs = map[string][]time.Duration{}
	}
	m.obs[name+"/"+pool] = append(m.obs[name+"/"+pool], d)
}

// Get returns the observations of name for pool.
func (m *MemoryTimings) Get(name, pool string) []time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]time.Duration(nil), m.obs[name+"/"+pool]...)
}
