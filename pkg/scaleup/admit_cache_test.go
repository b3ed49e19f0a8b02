package scaleup

import (
	"testing"
	"time"
)

// TestPermissionCache: entries expire, and the cache never holds more than
// its bound, evicting the oldest; refreshing a key does not grow it.
func TestPermissionCache(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		puts []string // keys put at t0, each expiring at t0+1m
		at   time.Duration
		want map[string]bool // key → present
	}{
		{"fresh", []string{"a", "b"}, 0, map[string]bool{"a": true, "b": true}},
		{"expired", []string{"a"}, time.Minute, map[string]bool{"a": false}},
		{"bounded: the oldest goes", []string{"a", "b", "c"}, 0, map[string]bool{"a": false, "b": true, "c": true}},
		{"a refresh does not grow it", []string{"a", "a", "a", "b"}, 0, map[string]bool{"a": true, "b": true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newPermissionCache(2)
			for _, k := range tt.puts {
				c.put(k, associationWriter, t0.Add(time.Minute))
			}
			for k, want := range tt.want {
				if _, ok := c.get(k, t0.Add(tt.at)); ok != want {
					t.Errorf("%s present %v, want %v", k, ok, want)
				}
			}
			if len(c.m) > 2 || len(c.order) != len(c.m) {
				t.Errorf("%d entries, %d in order; bound 2", len(c.m), len(c.order))
			}
		})
	}
}
