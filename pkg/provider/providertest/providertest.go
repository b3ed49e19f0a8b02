// Package providertest is the conformance suite every compute provider
// passes (like storetest for the store): launch and deliver, replay, list by
// pool and by id, idempotent termination, neutral error kinds, no
// registration secret in the logs, and the capabilities the provider states
// — stated as its backend declares them, and honoured: spot, dynamic sizes,
// GPUs, replay by token, and a runner pending in the backend's own queue.
package providertest

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provider"
)

// Harness is one fresh provider with the hooks the suite needs.
type Harness struct {
	Provider provider.Provider
	// Spec is a launch spec the provider can launch (pool "conformance").
	Spec pool.Spec
	// Delivered returns the registration the provider delivered to an
	// instance, as the instance would read it.
	Delivered func(id string) (provider.Registration, bool)
	// FailCapacity makes every later launch find no capacity.
	FailCapacity func()
	// CapacityTestedElsewhere, when FailCapacity is nil (a backend that
	// never refuses a launch for capacity but holds it in its own queue,
	// as a cluster holds a Pod it cannot place), says which of the
	// provider's own tests covers that; the no-capacity case is then
	// skipped with that reason.
	CapacityTestedElsewhere string
	// Logs returns what the provider logged so far.
	Logs func() string
	// Backend is the backend the provider serves, whose pool.Declared
	// entry it must state; "" for a stand-in of any backend (dry-run).
	Backend pool.Backend
	// HoldInQueue makes later launches wait in the backend's own queue
	// with the reason, and Dequeue starts such runners. Required when the
	// provider states OwnQueue.
	HoldInQueue func(reason string)
	Dequeue     func(ids ...string)
	// QueueTestedElsewhere, when HoldInQueue cannot be offered, says which
	// of the provider's own tests holds a runner in the backend's queue
	// instead; the queue case is then skipped with that reason.
	QueueTestedElsewhere string
	// HeldReason is the reason the backend reports for the runners
	// HoldInQueue held, where a real scheduler names its own (Slurm's
	// PartitionDown for a job in a partition that is down); empty: the
	// reason HoldInQueue was given.
	HeldReason string
	// Await waits until cond holds, for a backend whose states change in
	// its own time (a real scheduler starts a dequeued job when it next
	// schedules): it polls, bounded by a generous net of its own, and
	// returns; the suite then checks. Nil: states change at once, cond is
	// checked once.
	Await func(what string, cond func() bool)
}

// await waits for cond through h.Await (or not at all).
func (h Harness) await(what string, cond func() bool) {
	if h.Await != nil {
		h.Await(what, cond)
	}
}

// canary starts every registration secret the suite hands out.
const canary = "CANARYREG"

// Run runs the suite; newHarness returns a fresh, empty provider per case.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	for _, c := range []struct {
		name string
		run  func(*testing.T, Harness)
	}{
		{"capabilities are stated as the backend declares them", caseDeclared},
		{"spot is honoured", caseSpot},
		{"sizes and GPUs are refused where the backend cannot give them", caseSizes},
		{"a runner pending in the backend's queue says why", caseQueue},
		{"launch delivers each runner its registration", caseDelivers},
		{"replaying a plan launches nothing more", caseReplay},
		{"list by pool and by id", caseList},
		{"terminate is idempotent and spares nothing it should not", caseTerminate},
		{"an empty launch is invalid", caseEmptyLaunch},
		{"no capacity is a capacity error", caseNoCapacity},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, newHarness(t))
		})
	}
}

// caseDeclared: capabilities are stated as the backend declares them.
func caseDeclared(t *testing.T, h Harness) {
	if h.Backend == "" {
		return // a stand-in for any backend states its own
	}
	if got, want := h.Provider.Capabilities(), pool.Declared[h.Backend]; !reflect.DeepEqual(got, want) {
		t.Errorf("Capabilities() = %+v, want %s's declared %+v", got, h.Backend, want)
	}
}

// caseSpot: spot is honoured.
func caseSpot(t *testing.T, h Harness) {
	caps := h.Provider.Capabilities()
	want := provider.OnDemand
	if caps.Spot && h.Spec.EC2 != nil {
		e := *h.Spec.EC2
		e.Capacity = pool.CapacitySpot
		h.Spec.EC2 = &e
		want = provider.Spot
	} else if caps.Spot {
		return // spot is asked for in the EC2 part only
	}
	l, regs := launch(h, "tok-spot", 2)
	for i, r := range mustLaunch(t, h, l, regs).Runners {
		if r.Err != nil || r.Instance.Capacity != want {
			t.Errorf("runner %d: %s (%v), want %s capacity (provider states spot: %v)", i, r.Instance.Capacity, r.Err, want, caps.Spot)
		}
	}
}

// caseSizes: sizes and GPUs are refused where the backend cannot give them.
func caseSizes(t *testing.T, h Harness) {
	caps := h.Provider.Capabilities()
	for _, tc := range []struct {
		name  string
		sizes pool.Sizes
		can   bool
	}{
		{"sizes", pool.Sizes{VCPU: 2, MemoryGiB: 4}, caps.DynamicSizes},
		{"GPUs", pool.Sizes{GPUs: 1}, caps.GPUs && caps.DynamicSizes},
	} {
		l, regs := launch(h, "tok-"+strings.ToLower(tc.name), 1)
		l.Spec.Sizes = tc.sizes
		plan, err := h.Provider.Plan(context.Background(), l)
		if !tc.can {
			if !errors.Is(err, provider.ErrInvalid) || !provider.Permanent(err) {
				t.Errorf("%s: Plan = %v, want a permanent ErrInvalid from a provider that cannot give them", tc.name, err)
			}
			continue
		}
		if tc.sizes.GPUs > 0 {
			continue // launching GPUs needs a GPU spec of the backend's own
		}
		if err != nil {
			t.Fatalf("%s: Plan = %v from a provider with dynamic sizes", tc.name, err)
		}
		if res, err := h.Provider.Launch(context.Background(), plan, regs); err != nil || res.Runners[0].Err != nil {
			t.Errorf("%s: Launch = %+v, %v", tc.name, res, err)
		}
	}
}

// caseQueue: a runner pending in the backend's queue says why.
func caseQueue(t *testing.T, h Harness) {
	if !h.Provider.Capabilities().OwnQueue {
		checkNoQueue(t, h)
		return
	}
	if h.HoldInQueue == nil || h.Dequeue == nil {
		if h.QueueTestedElsewhere != "" {
			t.Skip(h.QueueTestedElsewhere)
		}
		t.Fatal("the provider states a queue of its own but the harness cannot hold a launch in it")
	}
	h.HoldInQueue("Resources")
	reason := h.HeldReason
	if reason == "" {
		reason = "Resources"
	}
	l, regs := launch(h, "tok-queued", 2)
	res := mustLaunch(t, h, l, regs)
	queued := func() bool {
		for _, in := range list(t, h, provider.Filter{Pool: h.Spec.Pool, AliveOnly: true}) {
			if in.State != provider.Pending || in.QueueReason != reason {
				return false
			}
		}
		return true
	}
	h.await("the launched runners to wait for "+reason, queued)
	for _, in := range list(t, h, provider.Filter{Pool: h.Spec.Pool, AliveOnly: true}) {
		if in.State != provider.Pending || in.QueueReason != reason {
			t.Errorf("queued instance %s: %s, reason %q; want pending for %s", in.ID, in.State, in.QueueReason, reason)
		}
	}
	started, held := res.Runners[0].Instance.ID, res.Runners[1].Instance.ID
	h.Dequeue(started)
	h.await("the dequeued runner to run", func() bool {
		got := list(t, h, provider.Filter{IDs: []string{started}})
		return len(got) == 1 && got[0].State == provider.Running
	})
	for _, in := range list(t, h, provider.Filter{IDs: []string{started, held}}) {
		switch in.ID {
		case started:
			if in.State != provider.Running || in.QueueReason != "" || in.RunningSince.IsZero() {
				t.Errorf("dequeued instance %s: %s, reason %q, running since %v", in.ID, in.State, in.QueueReason, in.RunningSince)
			}
		case held:
			if in.QueueReason == "" {
				t.Errorf("instance %s left the queue with the other", in.ID)
			}
		}
	}
	if err := h.Provider.Terminate(context.Background(), []string{held}); err != nil {
		t.Fatal(err)
	}
	h.await("the queued runner's end", func() bool {
		got := list(t, h, provider.Filter{IDs: []string{held}})
		return len(got) == 1 && !got[0].State.Alive()
	})
	for _, in := range list(t, h, provider.Filter{IDs: []string{held}}) {
		if in.State.Alive() {
			t.Errorf("a queued runner survived its termination: %s", in.State)
		}
	}
}

// checkNoQueue checks that a runner of a backend without a queue of its own
// never names a queue: pending there is booting.
func checkNoQueue(t *testing.T, h Harness) {
	l, regs := launch(h, "tok-noqueue", 2)
	mustLaunch(t, h, l, regs)
	for _, in := range list(t, h, provider.Filter{Pool: h.Spec.Pool}) {
		if in.QueueReason != "" || !in.RunningSince.IsZero() {
			t.Errorf("instance %s of a backend without a queue reports queue reason %q, running since %v", in.ID, in.QueueReason, in.RunningSince)
		}
	}
}

// caseDelivers: launch delivers each runner its registration.
func caseDelivers(t *testing.T, h Harness) {
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
}

// caseReplay: replaying a plan launches nothing more.
func caseReplay(t *testing.T, h Harness) {
	l, regs := launch(h, "tok-replay", 2)
	plan, first := PlanAndLaunch(t, h.Provider, l, regs)
	again, err := h.Provider.Launch(context.Background(), plan, nil)
	switch {
	case h.Provider.Capabilities().ReplayByToken && err != nil:
		t.Fatalf("replay of a provider that replays by token: %v", err)
	case h.Provider.Capabilities().ReplayByToken && ids(first) != ids(again):
		t.Errorf("replay returned %s, want the first launch's %s", ids(again), ids(first))
	}
	if all := list(t, h, provider.Filter{Pool: h.Spec.Pool}); len(all) != 2 {
		t.Errorf("%d instances after a replay, want 2", len(all))
	}
}

// caseList: list by pool and by id.
func caseList(t *testing.T, h Harness) {
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
}

// caseTerminate: terminate is idempotent and spares nothing it should not.
func caseTerminate(t *testing.T, h Harness) {
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
}

// caseEmptyLaunch: an empty launch is invalid.
func caseEmptyLaunch(t *testing.T, h Harness) {
	_, err := h.Provider.Plan(context.Background(), provider.Launch{Token: "tok-empty", Spec: h.Spec})
	if !errors.Is(err, provider.ErrInvalid) || !provider.Permanent(err) {
		t.Errorf("Plan(no runners) = %v, want a permanent ErrInvalid", err)
	}
}

// caseNoCapacity: no capacity is a capacity error.
func caseNoCapacity(t *testing.T, h Harness) {
	if h.FailCapacity == nil {
		if h.CapacityTestedElsewhere == "" {
			t.Fatal("the harness can neither make the provider find no capacity nor names the test that covers it")
		}
		t.Skip(h.CapacityTestedElsewhere)
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
}

// launch is a launch of n runners of h.Spec with a registration each.
func launch(h Harness, token string, n int) (provider.Launch, []provider.Registration) {
	l := provider.Launch{Token: token, Spec: h.Spec}
	var regs []provider.Registration
	for i := range n {
		name := "skiff-" + token + "-" + string(rune('a'+i))
		l.Runners = append(l.Runners, provider.RunnerRequest{Name: name, JobID: int64(100 + i), RunID: 7, Repository: "acme/app", Owner: "acme"})
		regs = append(regs, provider.Registration{Mode: provider.ModeJIT, JITConfig: canary + token + string(rune('a'+i)), RunnerName: name})
	}
	return l, regs
}

func mustLaunch(t *testing.T, h Harness, l provider.Launch, regs []provider.Registration) provider.Result {
	t.Helper()
	_, res := PlanAndLaunch(t, h.Provider, l, regs)
	if len(res.Runners) != len(l.Runners) {
		t.Fatalf("Launch answered %d runners for %d", len(res.Runners), len(l.Runners))
	}
	return res
}

// PlanAndLaunch plans l with p and launches the plan with regs, failing tb
// on an error of either step; a runner's own error stays in the Result for
// the caller to judge.
func PlanAndLaunch(tb testing.TB, p provider.Provider, l provider.Launch, regs []provider.Registration) (provider.Plan, provider.Result) {
	tb.Helper()
	plan, err := p.Plan(context.Background(), l)
	if err != nil {
		tb.Fatalf("Plan: %v", err)
	}
	res, err := p.Launch(context.Background(), plan, regs)
	if err != nil {
		tb.Fatalf("Launch: %v", err)
	}
	return plan, res
}

// ListByID is what p lists for f, by instance id, failing tb on an error.
func ListByID(tb testing.TB, p provider.Provider, f provider.Filter) map[string]provider.Instance {
	tb.Helper()
	got, err := p.List(context.Background(), f)
	if err != nil {
		tb.Fatalf("List(%+v): %v", f, err)
	}
	byID := map[string]provider.Instance{}
	for _, in := range got {
		byID[in.ID] = in
	}
	return byID
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

// TerminateAtCleanup terminates, when t ends, every instance of p that f
// lists: a test's runners do not outlive it (and a cluster's stop is quick).
func TerminateAtCleanup(t testing.TB, p provider.Provider, f provider.Filter) {
	t.Cleanup(func() {
		all, _ := p.List(context.Background(), f)
		var ids []string
		for _, in := range all {
			ids = append(ids, in.ID)
		}
		_ = p.Terminate(context.Background(), ids)
	})
}
