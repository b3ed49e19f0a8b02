// Package telemetry counts what skiff's functions do, as CloudWatch metrics.
//
// In Lambda the counts are written to stdout in CloudWatch's embedded metric
// format (EMF): the Lambda log pipeline turns each line into metric data
// points, with no API call and no extra latency on the request path. Every
// metric has at most one variable dimension, Reason, drawn from a small fixed
// set, so the number of metric series (and the bill: each series costs as a
// custom metric) stays bounded no matter how many jobs run.
package telemetry

import (
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"strconv"
	"sync"
	"time"
)

// Counter counts named events, optionally split by a reason.
// Implementations are safe for concurrent use and never fail the caller:
// losing a count is better than losing the event it counts.
type Counter interface {
	// Count adds one to metric name. An empty reason adds no Reason dimension.
	Count(name, reason string)
}

// Discard is a Counter that counts nothing, for callers that opt out.
var Discard Counter = discard{}

type discard struct{}

func (discard) Count(string, string) {}

// FillDefaults sets the observers a service's options leave unset: the
// counter (Discard), the logger (slog.Default) and the clock (time.Now).
func FillDefaults(counter *Counter, logger **slog.Logger, now *func() time.Time) {
	if *counter == nil {
		*counter = Discard
	}
	if *logger == nil {
		*logger = slog.Default()
	}
	if *now == nil {
		*now = time.Now
	}
}

// EMF writes one embedded-metric-format line per count.
type EMF struct {
	mu sync.Mutex
	emfWriter
	buf []byte
}

// NewEMF returns a Counter writing EMF lines to w under namespace, with a
// Function dimension naming the emitting function (e.g. "webhook").
func NewEMF(w io.Writer, namespace, function string, now func() time.Time) *EMF {
	return &EMF{emfWriter: newEMFWriter(w, namespace, function, now)}
}

// emfWriter is what every EMF writer holds: where its lines go, their
// namespace and Function dimension, and the clock that stamps them.
type emfWriter struct {
	w         io.Writer
	namespace string
	function  string
	now       func() time.Time
}

// newEMFWriter is an emfWriter; a nil now is time.Now.
func newEMFWriter(w io.Writer, namespace, function string, now func() time.Time) emfWriter {
	if now == nil {
		now = time.Now
	}
	return emfWriter{w: w, namespace: namespace, function: function, now: now}
}

// Count implements Counter. Write errors are dropped on purpose (see Counter).
func (e *EMF) Count(name, reason string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	b := e.buf[:0]
	b = append(b, `{"_aws":{"Timestamp":`...)
	b = strconv.AppendInt(b, e.now().UnixMilli(), 10)
	b = append(b, `,"CloudWatchMetrics":[{"Namespace":`...)
	b = appendJSONString(b, e.namespace)
	if reason == "" {
		b = append(b, `,"Dimensions":[["Function"]]`...)
	} else {
		b = append(b, `,"Dimensions":[["Function","Reason"]]`...)
	}
	b = append(b, `,"Metrics":[{"Name":`...)
	b = appendJSONString(b, name)
	b = append(b, `,"Unit":"Count"}]}]},"Function":`...)
	b = appendJSONString(b, e.function)
	if reason != "" {
		b = append(b, `,"Reason":`...)
		b = appendJSONString(b, reason)
	}
	b = append(b, ',')
	b = appendJSONString(b, name)
	b = append(b, ":1}\n"...)
	e.buf = b
	_, _ = e.w.Write(b)
}

func appendJSONString(b []byte, s string) []byte {
	q, err := json.Marshal(s)
	if err != nil { // a string always marshals; keep the line valid regardless
		return append(b, `""`...)
	}
	return append(b, q...)
}

// Memory is a Counter that keeps counts in memory, for tests and for
// `skiff local`'s status output. Its zero value is ready to use.
type Memory struct {
	mu     sync.Mutex
	counts map[string]int
}

// Count implements Counter.
func (m *Memory) Count(name, reason string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.counts == nil {
		m.counts = map[string]int{}
	}
	m.counts[key(name, reason)]++
}

// Get returns how many times name was counted with reason ("" for none).
func (m *Memory) Get(name, reason string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.counts[key(name, reason)]
}

// Snapshot returns a copy of all counts keyed "name" or "name/reason"
// (nil before the first count).
func (m *Memory) Snapshot() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.counts)
}

func key(name, reason string) string {
	if reason == "" {
		return name
	}
	return name + "/" + reason
}
