package scaledown_test

import (
	"context"
	"testing"
	"time"

	skiffnames "github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/scaledown"
)

// TestReplacementLimit: a job whose runners never boot gets a replacement
// for each failed runner, up to the limit (3: the original and three
// replacements in all), then no more however many passes follow; the
// limit is counted.
func TestReplacementLimit(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 51, func(o *scaledown.Options) { o.MaxReplacements = 3 })
	ctx := context.Background()
	job, _, _ := w.launchOne(ctx, time.Minute) // its runners never connect
	for range 12 {
		w.clock.Advance(11 * time.Minute) // past the boot timeout
		if _, err := w.down.Reconcile(ctx); err != nil {
			t.Fatal(err)
		}
		w.scaleUp(ctx)
	}
	all, _ := w.dry.List(ctx, provider.Filter{})
	var names []string
	for _, in := range all {
		names = append(names, in.Tags[skiffnames.TagRunnerName])
	}
	if len(all) != 4 {
		t.Errorf("%d runners launched for job %d (%v), want 4: the original and 3 replacements", len(all), job, names)
	}
	if got := w.counter.Get(scaledown.MetricReplacements, "boot_timeout"); got != 3 {
		t.Errorf("%d replacements counted, want 3", got)
	}
	if w.counter.Get(scaledown.MetricReplacements, "limit") == 0 {
		t.Error("the limit was never counted")
	}
	// A replacement moves the claim one generation past the lost runner
	// and scale-up's next attempt takes the one after: gens 1, 3, 5, 7.
	for i, name := range names {
		if want := skiffnames.RunnerName("", job, 2*i+1); name != want {
			t.Errorf("runner %d is %s, want %s", i+1, name, want)
		}
	}
}
