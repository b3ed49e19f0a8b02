package webhook

import (
	"sync"
	"sync/atomic"
	"testing"
)

// TestWorkers checks that every function handed to workers runs exactly
// once, whether a kept worker takes it or a goroutine of its own does, and
// that no more than maxKeptWorkers goroutines are kept.
func TestWorkers(t *testing.T) {
	tests := []struct {
		name       string
		concurrent int // functions running at once
	}{
		{"one at a time", 1},
		{"as many as are kept", maxKeptWorkers},
		{"more than are kept", 3 * maxKeptWorkers},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorkers()
			const rounds = 20
			var ran [rounds][]atomic.Int32
			for r := range ran {
				ran[r] = make([]atomic.Int32, tc.concurrent)
			}
			for r := range rounds {
				// Every function of a round blocks until all have started,
				// so the round needs tc.concurrent goroutines at once.
				var started, done sync.WaitGroup
				started.Add(tc.concurrent)
				done.Add(tc.concurrent)
				for i := range tc.concurrent {
					w.do(func() {
						defer done.Done()
						started.Done()
						started.Wait()
						ran[r][i].Add(1)
					})
				}
				done.Wait()
			}
			for r := range ran {
				for i := range ran[r] {
					if n := ran[r][i].Load(); n != 1 {
						t.Fatalf("round %d, function %d ran %d times, want 1", r, i, n)
					}
				}
			}
			// A worker that has not parked again when the next function
			// comes leaves that one to a new goroutine, so the count kept
			// depends on timing; its bounds do not.
			if k := w.kept.Load(); k < 1 || k > maxKeptWorkers {
				t.Errorf("kept %d workers, want 1 to %d", k, maxKeptWorkers)
			}
		})
	}
}
