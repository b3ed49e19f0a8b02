package scaleset_test

import (
	"errors"
	"testing"

	"github.com/skiffci/skiff/pkg/github/scaleset"
)

// TestParseMessage: the envelope's body is a JSON string of job messages;
// unknown job types are skipped; anything else malformed is a
// MalformedError naming the message when its id could be read.
func TestParseMessage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		in     string
		jobs   int
		wantID int64 // of the MalformedError; -1: no error
	}{
		{"a batch", `{"messageId":7,"messageType":"RunnerScaleSetJobMessages","statistics":{"totalAssignedJobs":2},` +
			`"body":"[{\"messageType\":\"JobAvailable\",\"runnerRequestId\":3,\"jobId\":\"12\"},{\"messageType\":\"JobSomethingNew\"}]"}`, 1, -1},
		{"no body", `{"messageId":8,"messageType":"RunnerScaleSetJobMessages","statistics":{}}`, 0, -1},
		{"not JSON", `{"messageId":`, 0, 0},
		{"another type", `{"messageId":9,"messageType":"Other","statistics":{}}`, 0, 9},
		{"no statistics", `{"messageId":10,"messageType":"RunnerScaleSetJobMessages"}`, 0, 10},
		{"a body that is not JSON", `{"messageId":11,"messageType":"RunnerScaleSetJobMessages","statistics":{},"body":"[{"}`, 0, 11},
		{"a job message of the wrong shape", `{"messageId":12,"messageType":"RunnerScaleSetJobMessages","statistics":{},` +
			`"body":"[{\"messageType\":\"JobAvailable\",\"runnerRequestId\":\"x\"}]"}`, 0, 12},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, err := scaleset.ParseMessage([]byte(tt.in))
			if tt.wantID < 0 {
				if err != nil || len(m.Jobs) != tt.jobs {
					t.Fatalf("ParseMessage: %+v, %v; want %d jobs", m, err, tt.jobs)
				}
				return
			}
			var bad *scaleset.MalformedError
			if !errors.As(err, &bad) || !errors.Is(err, scaleset.ErrMalformed) || bad.ID != tt.wantID {
				t.Fatalf("ParseMessage: %v; want a MalformedError of message %d", err, tt.wantID)
			}
		})
	}
}

// FuzzParseMessage: no input panics, and a message parses or is a
// MalformedError.
func FuzzParseMessage(f *testing.F) {
	f.Add([]byte(`{"messageId":7,"messageType":"RunnerScaleSetJobMessages","statistics":{},"body":"[{\"messageType\":\"JobStarted\"}]"}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := scaleset.ParseMessage(b)
		if err == nil && m == nil {
			t.Fatal("no message and no error")
		}
		if err != nil && !errors.Is(err, scaleset.ErrMalformed) {
			t.Fatalf("an error that is not ErrMalformed: %v", err)
		}
	})
}
