package scaledown_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/scaledown"
)

// listHook runs after once, after the first listing of instances returns.
type listHook struct {
	provider.Provider
	once  *sync.Once
	after func()
}

func (l listHook) List(ctx context.Context, f provider.Filter) ([]provider.Instance, error) {
	out, err := l.Provider.List(ctx, f)
	l.once.Do(l.after)
	return out, err
}

// TestLaunchDuringAPass: scale-up reserves a runner, registers it on GitHub
// and launches it while a reconcile pass is under way — after the pass read
// the ledger and listed the instances, before it listed GitHub's runners.
// The pass sees an offline runner it has no record or instance of; it must
// not take it for a ghost and delete the registration the new runner is
// about to use.
func TestLaunchDuringAPass(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var w *world
	w = newWorld(t, 43, func(o *scaledown.Options) {
		o.Provider = listHook{Provider: o.Provider, once: &sync.Once{}, after: func() {
			w.webhook(ctx)
			w.scaleUp(ctx)
		}}
	})
	info, err := w.sim.StartRun(ghsim.RunSpec{Repo: "acme/app", Jobs: []ghsim.JobSpec{{Labels: []string{"self-hosted", "linux", "x64"},
		Duration: time.Hour}}})
	if err != nil {
		t.Fatal(err)
	}
	w.jobs[info.JobIDs[0]] = &simJob{id: info.JobIDs[0]}
	if _, err := w.down.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	live, _ := w.dry.List(ctx, provider.Filter{AliveOnly: true})
	if len(live) != 1 {
		t.Fatalf("%d instances, want the one launched during the pass", len(live))
	}
	var names []string
	for _, r := range w.sim.Runners() {
		names = append(names, r.Name)
	}
	if len(names) != 1 || !strings.HasPrefix(names[0], "skiff-") {
		t.Errorf("GitHub's runners after the pass: %v; want the new runner's registration kept", names)
	}
	if n := w.counter.Get(scaledown.MetricActions, "ghost"); n != 0 {
		t.Errorf("%d ghosts deleted, want 0", n)
	}
}
