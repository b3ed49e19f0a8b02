package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/store"
)

// RunSecurityEvents is the conformance suite of store.SecurityEvents: one
// event per job attempt, whatever replays it, listed oldest first.
func RunSecurityEvents(t *testing.T, newStore func(*testing.T) store.SecurityEvents) {
	t.Helper()
	ev := func(job int64, attempt, min int, reason string) store.SecurityEvent {
		return store.SecurityEvent{JobID: job, RunID: 70, Attempt: attempt, Repository: "mallory/app", Runner: "skiff-9-1",
			Pool: "cpu", Reason: reason, Detail: "the detail", At: Now.Add(time.Duration(min) * time.Minute)}
	}
	tests := []struct {
		name    string
		events  []store.SecurityEvent
		new     []bool
		since   time.Time
		want    []store.SecurityEvent
		invalid bool
	}{
		{"recorded and listed", []store.SecurityEvent{ev(1, 1, 0, "forbidden")}, []bool{true}, Now,
			[]store.SecurityEvent{ev(1, 1, 0, "forbidden")}, false},
		{"a replay is not new and changes nothing", []store.SecurityEvent{ev(1, 1, 0, "forbidden"), ev(1, 1, 3, "fork_pull_request")},
			[]bool{true, false}, Now, []store.SecurityEvent{ev(1, 1, 0, "forbidden")}, false},
		{"another attempt is another event", []store.SecurityEvent{ev(1, 1, 0, "forbidden"), ev(1, 2, 1, "forbidden")},
			[]bool{true, true}, Now, []store.SecurityEvent{ev(1, 1, 0, "forbidden"), ev(1, 2, 1, "forbidden")}, false},
		{"oldest first, older than since left out", []store.SecurityEvent{ev(3, 1, 5, "a"), ev(2, 1, 2, "b"), ev(4, 1, -1, "c")},
			[]bool{true, true, true}, Now, []store.SecurityEvent{ev(2, 1, 2, "b"), ev(3, 1, 5, "a")}, false},
		{"no job id", []store.SecurityEvent{ev(0, 1, 0, "forbidden")}, nil, Now, nil, true},
		{"no reason", []store.SecurityEvent{ev(5, 1, 0, "")}, nil, Now, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t)
			ctx := context.Background()
			for i, e := range tc.events {
				got, err := s.RecordSecurityEvent(ctx, e)
				if tc.invalid {
					if err == nil {
						t.Fatalf("event %d: recorded an invalid event", i)
					}
					return
				}
				if err != nil {
					t.Fatalf("event %d: %v", i, err)
				}
				if got != tc.new[i] {
					t.Errorf("event %d: new = %v, want %v", i, got, tc.new[i])
				}
			}
			got, err := s.SecurityEvents(ctx, tc.since)
			if err != nil {
				t.Fatal(err)
			}
			check(t, "events", got, tc.want)
		})
	}
}
