package fanout_test

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/skiffci/skiff/pkg/fanout"
)

func TestConcurrentRunsEveryCallWithinTheLimit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ n, limit, most int }{{0, 3, 0}, {1, 3, 1}, {20, 3, 3}, {5, 0, 5}, {4, 10, 4}} {
		var running, peak atomic.Int64
		var mu sync.Mutex
		var seen []int
		fanout.Concurrent{}.Run(tc.n, tc.limit, func(i int) {
			now := running.Add(1)
			for {
				p := peak.Load()
				if now <= p || peak.CompareAndSwap(p, now) {
					break
				}
			}
			mu.Lock()
			seen = append(seen, i)
			mu.Unlock()
			running.Add(-1)
		})
		slices.Sort(seen)
		if len(seen) != tc.n || (tc.n > 0 && (seen[0] != 0 || seen[tc.n-1] != tc.n-1)) {
			t.Errorf("n %d: calls %v", tc.n, seen)
		}
		if int(peak.Load()) > tc.most {
			t.Errorf("n %d, limit %d: %d calls at once", tc.n, tc.limit, peak.Load())
		}
	}
}

// TestSeededOrderFollowsTheSeed: the same seed gives the same orders, run
// after run, nested batches included; another seed another order.
func TestSeededOrderFollowsTheSeed(t *testing.T) {
	t.Parallel()
	orders := func(seed uint64) []int {
		e := fanout.NewSeeded(seed)
		var out []int
		for range 3 {
			e.Run(8, 2, func(i int) {
				out = append(out, i)
				e.Run(3, 0, func(j int) { out = append(out, 100+j) })
			})
		}
		return out
	}
	a, b, c := orders(7), orders(7), orders(8)
	if !slices.Equal(a, b) {
		t.Errorf("seed 7 twice: %v and %v", a, b)
	}
	if slices.Equal(a, c) {
		t.Errorf("seeds 7 and 8 gave the same order %v", a)
	}
	if len(a) != 3*8*4 {
		t.Errorf("%d calls, want %d", len(a), 3*8*4)
	}
}
