package webhook

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// TestEventLogWritesWhatWithWrites: a line written through eventLog is the
// line slog.Logger.With would have written, With leaves its receiver as it
// was, and the source is the line that logged.
func TestEventLogWritesWhatWithWrites(t *testing.T) {
	t.Parallel()
	var got, want bytes.Buffer
	opts := &slog.HandlerOptions{Level: slog.LevelDebug, AddSource: true,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			switch a.Key {
			case slog.TimeKey:
				return slog.Attr{}
			case slog.SourceKey:
				a.Value = slog.StringValue("source")
			}
			return a
		}}
	l := newEventLog(slog.New(slog.NewJSONHandler(&got, opts)), "delivery_id", "d1", "event", "workflow_job")
	s := slog.New(slog.NewJSONHandler(&want, opts)).With("delivery_id", "d1", "event", "workflow_job")
	job := l.With("job_id", int64(7), "repository", "o/r")
	_ = l.With("job_id", int64(8)) // a second With from l leaves job's attributes alone
	job.With("pool", "linux").Info("accepted", "n", 1)
	s.With("job_id", int64(7), "repository", "o/r").With("pool", "linux").Info("accepted", "n", 1)
	l.Warn("failed", "err", "boom")
	s.Warn("failed", "err", "boom")
	job.Debug("ignored")
	s.With("job_id", int64(7), "repository", "o/r").Debug("ignored")
	job.Error("bad")
	s.With("job_id", int64(7), "repository", "o/r").Error("bad")
	if got.String() != want.String() {
		t.Errorf("eventLog wrote\n%s\nslog.Logger.With writes\n%s", got.String(), want.String())
	}

	var src bytes.Buffer
	newEventLog(slog.New(slog.NewTextHandler(&src, &slog.HandlerOptions{AddSource: true}))).Info("here")
	if !strings.Contains(src.String(), "eventlog_test.go") {
		t.Errorf("source %q, want this file", src.String())
	}
}
