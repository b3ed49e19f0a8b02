package testenv

import (
	"maps"
	"sync"
	"testing"
)

// TestOpCount: counts by operation from many goroutines; Snapshot keeps
// counting on, Take starts again from zero.
func TestOpCount(t *testing.T) {
	t.Parallel()
	var c OpCount
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				c.Add("PutItem")
			}
			c.Add("Query")
		})
	}
	wg.Wait()
	want := map[string]int{"PutItem": 800, "Query": 8}
	if got := c.Snapshot(); !maps.Equal(got, want) || c.Total() != 808 {
		t.Fatalf("Snapshot %v, Total %d; want %v, 808", got, c.Total(), want)
	}
	c.Add("Query")
	if got := c.Take(); got["Query"] != 9 || got["PutItem"] != 800 {
		t.Errorf("Take after Snapshot: %v, want the counts kept on", got)
	}
	if got := c.Total(); got != 0 || len(c.Snapshot()) != 0 {
		t.Errorf("after Take: Total %d, Snapshot %v; want nothing", got, c.Snapshot())
	}
}
