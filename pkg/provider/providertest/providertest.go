// Package providertest is the conformance suite every compute provider
// passes (like storetest for the store): launch and deliver, replay, list by
// pool and by id, idempotent termination, neutral error kinds, and no
// registration secret in the logs.
package providertest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/userdata"
)

// Harness is one fresh provider with the hooks the suite needs.
type Harness struct {
	Provider provider.Provider
	// Spec is a launch spec the provider can launch (pool "conformance").
	Spec pool.Spec
	// Delivered returns the registration the provider delivered to an
	// instance, as the instance would read it.
	Delivered func(id string) (userdata.Registration, bool)
	// FailCapacity makes every later launch find no capacity. Nil for a
	// backend that holds a launch without capacity pending in its own
	// queue (an unschedulable Pod) instead of refusing it: the case is
	// skipped, and the provider's own tests cover its pending state.
	FailCapacity func()
	// Logs returns what the provider logged so far.
	Logs func() string
}

// canary starts every registration secret the suite hands out.
const canary = "CANARYREG"

// Run runs the suite; newHarness returns a fresh, empty provider per case.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	t.Run("launch delivers each runner its registration", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		l, regs := launch(h, "tok-launch", 3)
		res := mustLaunch(t, h, l, regs)
		seen := map[string]bool{}
		for i, r := range res.Runners {
			in := r.Instance
			if r.Err != nil || in.ID == "" || seen[in.ID] {
				t.Fatalf("runner %d: %+v (err %v), want a new instance", i, in, r.Err)
			}
			seen[in.ID] = true
			if in.Pool != h.Spec.Pool || in.InstanceType == "" || in.Zone == "" || in.LaunchedAt.IsZero() || !in.State.Alive() ||
				(in.Capacity != provider.Spot && in.Capacity != provider.OnDemand) {
				t.Errorf("runner %d: instance %+v lacks pool, type, zone, capacity, state or launch time", i, in)
			}
			got, ok := h.Delivered(in.ID)
			if !ok || got.JITConfig != regs[i].JITConfig || got.RunnerName != regs[i].RunnerName {
				t.Errorf("runner %d: instance %s got registration %v (%v), want runner %s's", i, in.ID, got, ok, regs[i].RunnerName)
			}
		}
		if logs := h.Logs(); strings.Contains(logs, canary) {
			t.Error("a registration secret reached the provider's logs")
		}
	})

	t.Run("replaying a plan launches nothing more", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		l, regs := launch(h, "tok-replay", 2)
		plan, err := h.Provider.Plan(context.Background(), l)
		if err != nil {
			t.Fatal(err)
		}
		first, err := h.Provider.Launch(context.Background(), plan, regs)
		if err != nil {
			t.Fatal(err)
		}
		again, err := h.Provider.Launch(context.Background(), plan, nil)
		if err != nil {
			t.Fatal(err)
		}
		if ids(first) != ids(again) {
			t.Errorf("replay returned %s, want the first launch's %s", ids(again), ids(first))
		}
		if all := list(t, h, provider.Filter{Pool: h.Spec.Pool}); len(all) != 2 {
			t.Errorf("%d instances after a replay, want 2", len(all))
		}
	})

	t.Run("list by pool and by id", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		l, regs := launch(h, "tok-list", 2)
		res := mustLaunch(t, h, l, regs)
		got := list(t, h, provider.Filter{Pool: h.Spec.Pool, AliveOnly: true})
		if len(got) != 2 {
			t.Fatalf("List(pool) = %d instances, want 2", len(got))
		}
		for _, in := range got {
			if in.Tags[names.TagManaged] != names.ManagedValue || in.Tags[names.TagPool] != h.Spec.Pool || in.Tags[names.TagRunnerName] == "" {
				t.Errorf("instance %s tags %v lack skiff's", in.ID, in.Tags)
			}
		}
		one := res.Runners[1].Instance.ID
		if got := list(t, h, provider.Filter{IDs: []string{one}}); len(got) != 1 || got[0].ID != one {
			t.Errorf("List(id %s) = %+v", one, got)
		}
		if got := list(t, h, provider.Filter{Pool: "no-such-pool"}); len(got) != 0 {
			t.Errorf("List(other pool) = %+v, want none", got)
		}
	})

	t.Run("terminate is idempotent and spares nothing it should not", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		l, regs := launch(h, "tok-term", 2)
		res := mustLaunch(t, h, l, regs)
		gone, kept := res.Runners[0].Instance.ID, res.Runners[1].Instance.ID
		for range 2 {
			if err := h.Provider.Terminate(context.Background(), []string{gone, "i-0000000000000dead"}); err != nil {
				t.Fatalf("Terminate: %v", err)
			}
		}
		alive := list(t, h, provider.Filter{Pool: h.Spec.Pool, AliveOnly: true})
		if len(alive) != 1 || alive[0].ID != kept {
			t.Errorf("alive after terminating %s: %+v, want only %s", gone, alive, kept)
		}
		for _, in := range list(t, h, provider.Filter{IDs: []string{gone}}) {
			if in.State.Alive() {
				t.Errorf("terminated instance %s is %s", gone, in.State)
			}
		}
		if err := h.Provider.Terminate(context.Background(), nil); err != nil {
			t.Errorf("Terminate(nothing) = %v", err)
		}
	})

	t.Run("an empty launch is invalid", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		_, err := h.Provider.Plan(context.Background(), provider.Launch{Token: "tok-empty", Spec: h.Spec})
		if !errors.Is(err, provider.ErrInvalid) || !provider.Permanent(err) {
			t.Errorf("Plan(no runners) = %v, want a permanent ErrInvalid", err)
		}
	})

	t.Run("no capacity is a capacity error", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		if h.FailCapacity == nil {
			t.Skip("the backend queues a launch without capacity: it is pending, not refused")
		}
		h.FailCapacity()
		l, regs := launch(h, "tok-capacity", 2)
		plan, err := h.Provider.Plan(context.Background(), l)
		if err != nil {
			t.Fatal(err)
		}
		res, err := h.Provider.Launch(context.Background(), plan, regs)
		var errs []error
		if err != nil {
			errs = append(errs, err)
		}
		for _, r := range res.Runners {
			if r.Err == nil {
				t.Errorf("runner launched on %s despite no capacity", r.Instance.ID)
			}
			errs = append(errs, r.Err)
		}
		for _, e := range errs {
			if !errors.Is(e, provider.ErrCapacity) || provider.Permanent(e) || provider.Reason(e) != "capacity" {
				t.Errorf("error %v: want a retryable ErrCapacity", e)
			}
		}
		if len(errs) == 0 {
			t.Error("no error for a launch without capacity")
		}
		if alive := list(t, h, provider.Filter{Pool: h.Spec.Pool, AliveOnly: true}); len(alive) != 0 {
			t.Errorf("%d instances alive after a failed launch", len(alive))
		}
	})
}

// launch is a launch of n runners of h.Spec with a registration each.
func launch(h Harness, token string, n int) (provider.Launch, []userdata.Registration) {
	l := provider.Launch{Token: token, Spec: h.Spec}
	var regs []userdata.Registration
	for i := range n {
		name := "skiff-" + token + "-" + string(rune('a'+i))
		l.Runners = append(l.Runners, provider.Runner{Name: name, JobID: int64(100 + i), RunID: 7, Repository: "acme/app", Owner: "acme"})
		regs = append(regs, userdata.Registration{Mode: userdata.ModeJIT, JITConfig: canary + token + string(rune('a'+i)), RunnerName: name})
	}
	return l, regs
}

func mustLaunch(t *testing.T, h Harness, l provider.Launch, regs []userdata.Registration) provider.Result {
	t.Helper()
	plan, err := h.Provider.Plan(context.Background(), l)
	if err != nil {
		t.Fatalf("Plan: %v", err)
	}
	res, err := h.Provider.Launch(context.Background(), plan, regs)
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	if len(res.Runners) != len(l.Runners) {
		t.Fatalf("Launch answered %d runners for %d", len(res.Runners), len(l.Runners))
	}
	return res
}

func list(t *testing.T, h Harness, f provider.Filter) []provider.Instance {
	t.Helper()
	got, err := h.Provider.List(context.Background(), f)
	if err != nil {
		t.Fatalf("List(%+v): %v", f, err)
	}
	return got
}

func ids(r provider.Result) string {
	var out []string
	for _, l := range r.Runners {
		out = append(out, l.Instance.ID)
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}
