package telemetry

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestEMFLines(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, metric, reason string
		wantDims             []string
	}{
		{name: "without reason", metric: "WebhookAccepted", wantDims: []string{"Function"}},
		{name: "with reason", metric: "WebhookRejected", reason: "signature", wantDims: []string{"Function", "Reason"}},
		{name: "quotes escaped", metric: "Odd\"Name", reason: `a"b`, wantDims: []string{"Function", "Reason"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			at := time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC)
			e := NewEMF(&buf, "Skiff", "webhook", func() time.Time { return at })
			e.Count(tc.metric, tc.reason)
			if !strings.HasSuffix(buf.String(), "\n") || strings.Count(buf.String(), "\n") != 1 {
				t.Fatalf("want exactly one line, got %q", buf.String())
			}
			var doc struct {
				AWS struct {
					Timestamp         int64
					CloudWatchMetrics []struct {
						Namespace  string
						Dimensions [][]string
						Metrics    []struct{ Name, Unit string }
					}
				} `json:"_aws"`
			}
			if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
				t.Fatalf("line is not JSON: %v: %s", err, buf.String())
			}
			var flat map[string]any
			_ = json.Unmarshal(buf.Bytes(), &flat)
			cw := doc.AWS.CloudWatchMetrics[0]
			if doc.AWS.Timestamp != at.UnixMilli() || cw.Namespace != "Skiff" || cw.Metrics[0].Name != tc.metric || cw.Metrics[0].Unit != "Count" {
				t.Errorf("unexpected EMF header: %+v", doc.AWS)
			}
			if strings.Join(cw.Dimensions[0], ",") != strings.Join(tc.wantDims, ",") {
				t.Errorf("dimensions = %v, want %v", cw.Dimensions[0], tc.wantDims)
			}
			if flat["Function"] != "webhook" || flat[tc.metric] != float64(1) {
				t.Errorf("dimension or value missing: %v", flat)
			}
			if tc.reason != "" && flat["Reason"] != tc.reason {
				t.Errorf("Reason = %v, want %q", flat["Reason"], tc.reason)
			}
		})
	}
}

func TestMemoryCounts(t *testing.T) {
	t.Parallel()
	var m Memory
	m.Count("a", "")
	m.Count("a", "")
	m.Count("a", "x")
	if m.Get("a", "") != 2 || m.Get("a", "x") != 1 || m.Get("b", "") != 0 {
		t.Fatalf("counts = %v", m.Snapshot())
	}
	Discard.Count("a", "") // must not panic
}

func TestEMFTimings(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	at := time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC)
	NewEMFTimings(&buf, "Skiff", "scaleup", func() time.Time { return at }).Observe("ScaleUpLaunchLatency", "gpu", 1500*time.Millisecond)
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("not JSON: %v: %s", err, buf.String())
	}
	if line["ScaleUpLaunchLatency"] != float64(1500) || line["Pool"] != "gpu" || line["Function"] != "scaleup" {
		t.Errorf("line = %v", line)
	}
	if !strings.Contains(buf.String(), `"Unit":"Milliseconds"`) || !strings.Contains(buf.String(), `[["Function","Pool"]]`) {
		t.Errorf("EMF header = %s", buf.String())
	}
	var m MemoryTimings
	m.Observe("x", "p", time.Second)
	DiscardTimings.Observe("x", "p", time.Second)
	if got := m.Get("x", "p"); len(got) != 1 || got[0] != time.Second {
		t.Errorf("memory timings = %v", got)
	}
}

// TestFillDefaults: unset observers get the defaults, set ones stay.
func TestFillDefaults(t *testing.T) {
	t.Parallel()
	var c Counter
	var l *slog.Logger
	var now func() time.Time
	FillDefaults(&c, &l, &now)
	if c != Discard || l != slog.Default() || now == nil {
		t.Fatalf("unset: counter %v, logger %p (default %p), clock set %t", c, l, slog.Default(), now != nil)
	}
	m, own, at := &Memory{}, slog.New(slog.DiscardHandler), time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	c, l, now = m, own, func() time.Time { return at }
	FillDefaults(&c, &l, &now)
	if c != Counter(m) || l != own || !now().Equal(at) {
		t.Errorf("set: counter %v, logger %p (own %p), clock %v", c, l, own, now())
	}
}
