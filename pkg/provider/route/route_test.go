package route

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/provider/providertest"
)

// member is a provider that records what it was asked and lists the
// instances it launched; its plans and ids carry its name.
type member struct {
	name    string
	mu      sync.Mutex
	planned []string // pools
	ended   []string // ids Terminate was given
	live    []provider.Instance
	listErr error
	endErr  error
	notify  chan struct{}
}

func (m *member) Name() string                        { return m.name }
func (m *member) Capabilities() provider.Capabilities { return pool.Declared[pool.Backend(m.name)] }

func (m *member) Plan(_ context.Context, l provider.Launch) (provider.Plan, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.planned = append(m.planned, l.Spec.Pool)
	return provider.Plan(m.name + "-plan:" + l.Spec.Pool + ":" + l.Token), nil
}

func (m *member) Launch(_ context.Context, plan provider.Plan, _ []provider.Registration) (provider.Result, error) {
	p, ok := strings.CutPrefix(string(plan), m.name+"-plan:")
	if !ok {
		return provider.Result{}, fmt.Errorf("%s was given plan %q", m.name, plan)
	}
	pl, token, _ := strings.Cut(p, ":")
	in := provider.Instance{ID: m.name + "-" + token, Pool: pl, State: provider.Running}
	m.mu.Lock()
	m.live = append(m.live, in)
	m.mu.Unlock()
	return provider.Result{Runners: []provider.Launched{{Instance: in}}}, nil
}

func (m *member) List(_ context.Context, f provider.Filter) ([]provider.Instance, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.listErr != nil {
		return nil, m.listErr
	}
	var out []provider.Instance
	for _, in := range m.live {
		if f.Pool == "" || f.Pool == in.Pool {
			out = append(out, in)
		}
	}
	return out, nil
}

func (m *member) Terminate(_ context.Context, ids []string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ended = append(m.ended, ids...)
	return m.endErr
}

type notifying struct{ *member }

func (n notifying) Ended() <-chan struct{} { return n.notify }

func newRouter(t *testing.T) (*Router, *member, *member) {
	t.Helper()
	proc := &member{name: "process", notify: make(chan struct{}, 1)}
	hpc := &member{name: "slurm"}
	r, err := New([]provider.Provider{notifying{proc}, hpc}, map[string]string{"hpc": "slurm", "lab": "process"}, "process")
	if err != nil {
		t.Fatal(err)
	}
	return r, proc, hpc
}

func launch(t *testing.T, r *Router, pl, token string) provider.Instance {
	t.Helper()
	_, res := providertest.PlanAndLaunch(t, r, provider.Launch{Token: token, Spec: pool.Spec{Shared: pool.Shared{Pool: pl}},
		Runners: []provider.RunnerRequest{{Name: "r-" + token}}}, nil)
	return res.Runners[0].Instance
}

// TestRoutesByPool: each pool's launch goes to the provider its section
// names, a pool the map does not name to the default, and the plan brings
// a replay back to the provider that planned it.
func TestRoutesByPool(t *testing.T) {
	t.Parallel()
	r, proc, hpc := newRouter(t)
	if got := launch(t, r, "hpc", "t1").ID; got != "slurm-t1" {
		t.Errorf("pool hpc launched %s, want a slurm runner", got)
	}
	if got := launch(t, r, "lab", "t2").ID; got != "process-t2" {
		t.Errorf("pool lab launched %s, want a process runner", got)
	}
	if got := launch(t, r, "unnamed", "t3").ID; got != "process-t3" {
		t.Errorf("a pool with no section launched %s, want the default's runner", got)
	}
	if !slices.Equal(hpc.planned, []string{"hpc"}) || !slices.Equal(proc.planned, []string{"lab", "unnamed"}) {
		t.Errorf("planned: slurm %v, process %v", hpc.planned, proc.planned)
	}
	if r.Name() != "process+slurm" {
		t.Errorf("Name %q", r.Name())
	}
	// A plan stored before the daemon routed is the default's.
	if res, err := r.Launch(context.Background(), "process-plan:lab:old", nil); err != nil || res.Runners[0].Instance.ID != "process-old" {
		t.Errorf("an unrouted plan: %+v %v", res, err)
	}
	// A plan of a provider this daemon no longer runs is final, not retried.
	_, err := r.Launch(context.Background(), "route:kubernetes\nx", nil)
	var pe *provider.Error
	if !errors.As(err, &pe) || pe.Kind != provider.ErrInvalid || !pe.Final {
		t.Errorf("a plan of an absent provider: %v, want a final ErrInvalid", err)
	}
}

// TestListAndTerminate: a listing covers every provider (or the pool's
// one), a provider that cannot list fails the listing, and each id ends on
// the provider that has it; an id nobody showed goes to all.
func TestListAndTerminate(t *testing.T) {
	t.Parallel()
	r, proc, hpc := newRouter(t)
	a, b := launch(t, r, "hpc", "a"), launch(t, r, "lab", "b")
	ins, err := r.List(context.Background(), provider.Filter{})
	if err != nil || len(ins) != 2 {
		t.Fatalf("List: %+v %v", ins, err)
	}
	if ins, _ := r.List(context.Background(), provider.Filter{Pool: "hpc"}); len(ins) != 1 || ins[0].ID != a.ID {
		t.Errorf("pool hpc's listing: %+v", ins)
	}
	if err := r.Terminate(context.Background(), []string{a.ID, b.ID, "stranger"}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(hpc.ended, []string{a.ID, "stranger"}) || !slices.Equal(proc.ended, []string{b.ID, "stranger"}) {
		t.Errorf("ended: slurm %v, process %v; want each its own, and the unknown id on both", hpc.ended, proc.ended)
	}
	hpc.endErr = errors.New("scancel failed")
	proc.ended = nil
	if err := r.Terminate(context.Background(), []string{a.ID, b.ID}); err == nil || !slices.Equal(proc.ended, []string{b.ID}) {
		t.Errorf("with slurm failing: %v, process ended %v; want the error and process's end done", err, proc.ended)
	}
	// A runner no member lists any more is forgotten at the next full
	// listing: its id goes to every member again.
	proc.mu.Lock()
	proc.live, proc.ended = nil, nil
	proc.mu.Unlock()
	hpc.endErr, hpc.ended = nil, nil
	if _, err := r.List(context.Background(), provider.Filter{}); err != nil {
		t.Fatal(err)
	}
	if err := r.Terminate(context.Background(), []string{a.ID, b.ID}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(hpc.ended, []string{a.ID, b.ID}) || !slices.Equal(proc.ended, []string{b.ID}) {
		t.Errorf("after b left the listing: slurm ended %v, process %v; want a on slurm only, b on both", hpc.ended, proc.ended)
	}
	hpc.listErr = errors.New("squeue: connection refused")
	if _, err := r.List(context.Background(), provider.Filter{}); err == nil {
		t.Error("a listing missing slurm's runners succeeded")
	}
}

// TestEnded: the process provider's end notices come through; a member
// that gives none makes AllEndsTold false (the caller polls).
func TestEnded(t *testing.T) {
	t.Parallel()
	r, proc, _ := newRouter(t)
	c := r.Ended()
	proc.notify <- struct{}{}
	<-c
	if r.AllEndsTold() {
		t.Error("AllEndsTold with a Slurm member that tells nothing")
	}
	if _, err := New([]provider.Provider{proc}, map[string]string{"hpc": "slurm"}, "process"); err == nil {
		t.Error("a pool routed to a provider the router lacks was accepted")
	}
}
