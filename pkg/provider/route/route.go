// Package route is the provider of a daemon that serves pools of several
// backends at once: each pool's launches, listings and ends go to the
// provider its section names (process, Slurm, Kubernetes, container), so
// one ledger, one waiting room per pool and one reconciler pass cover them
// all.
//
//	scale-up / reconciler ──► Router ──┬─ pool cpu  (process:)  ──► process provider
//	                                   ├─ pool hpc  (slurm:)    ──► Slurm provider
//	                                   └─ pool k8s  (kubernetes:) ─► Kubernetes provider
//
// The router's plan names its member ("route:<member>\n" before the
// member's own plan), so a launch replayed after a crash goes back to the
// provider that planned it. An instance id is routed to the member that
// listed or launched it; an id no member has shown yet goes to every
// member, which the Provider contract allows (an unknown id is not an
// error, and never spares the others).
package route

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provider"
)

// planPrefix starts a routed plan; a member's own plan follows its name
// and a newline.
const planPrefix = "route:"

// Router dispatches provider calls to the member serving each pool. It is
// safe for concurrent use.
type Router struct {
	members map[string]provider.Provider // by Name
	order   []string                     // member names, sorted
	byPool  map[string]string            // pool → member name
	def     string                       // the member of a pool not in byPool

	mu    sync.Mutex
	owner map[string]string // instance id → member name, as listed or launched

	endedOnce sync.Once
	ended     chan struct{}
	closeOnce sync.Once
	closed    chan struct{} // closed by Close: the end notices' forwarders stop
}

var (
	_ provider.Provider = (*Router)(nil)
	_ provider.Placer   = (*Router)(nil)
)

// New returns a router over members (by their Name): pools maps each pool
// to its member's name; def names the member of any other pool.
func New(members []provider.Provider, pools map[string]string, def string) (*Router, error) {
	r := &Router{members: map[string]provider.Provider{}, byPool: map[string]string{}, def: def, owner: map[string]string{},
		closed: make(chan struct{})}
	for _, m := range members {
		name := m.Name()
		if _, dup := r.members[name]; dup || strings.ContainsAny(name, "\n") || name == "" {
			return nil, fmt.Errorf("routing providers: provider name %q is empty, repeated or has a newline", name)
		}
		r.members[name] = m
		r.order = append(r.order, name)
	}
	slices.Sort(r.order)
	if _, ok := r.members[def]; !ok {
		return nil, fmt.Errorf("routing providers: the default provider %q is not among %v", def, r.order)
	}
	for p, m := range pools {
		if _, ok := r.members[m]; !ok {
			return nil, fmt.Errorf("routing providers: pool %s goes to provider %q, which is not among %v", p, m, r.order)
		}
		r.byPool[p] = m
	}
	return r, nil
}

// Members returns the member providers, ordered by name.
func (r *Router) Members() []provider.Provider {
	out := make([]provider.Provider, 0, len(r.order))
	for _, n := range r.order {
		out = append(out, r.members[n])
	}
	return out
}

// For returns the provider serving pool.
func (r *Router) For(pool string) provider.Provider { return r.members[r.memberOf(pool)] }

func (r *Router) memberOf(pool string) string {
	if m, ok := r.byPool[pool]; ok {
		return m
	}
	return r.def
}

// Name implements provider.Provider: the members' names joined by "+"
// ("process+slurm"). A metrics record names its own pool's member.
func (r *Router) Name() string { return strings.Join(r.order, "+") }

// Capabilities implements provider.Provider with the default member's:
// each pool's are its backend's (pool.Declared), which is what validate and
// plan check.
func (r *Router) Capabilities() provider.Capabilities { return r.members[r.def].Capabilities() }

// Place implements provider.Placer with the pool's member's places.
func (r *Router) Place(spec pool.Spec) string { return provider.PlaceOf(r.For(spec.Pool), spec) }

// Plan implements provider.Provider: the pool's member plans, and the
// plan names it.
func (r *Router) Plan(ctx context.Context, l provider.Launch) (provider.Plan, error) {
	m := r.memberOf(l.Spec.Pool)
	p, err := r.members[m].Plan(ctx, l)
	if err != nil {
		return "", err
	}
	return provider.Plan(planPrefix + m + "\n" + string(p)), nil
}

// member splits a routed plan into its member and the member's plan. A
// plan without the prefix (stored before this daemon served several
// backends) is the default member's.
func (r *Router) member(plan provider.Plan) (string, provider.Plan, error) {
	rest, ok := strings.CutPrefix(string(plan), planPrefix)
	if !ok {
		return r.def, plan, nil
	}
	m, inner, ok := strings.Cut(rest, "\n")
	if _, known := r.members[m]; !ok || !known {
		return "", "", &provider.Error{Kind: provider.ErrInvalid, Code: "UnknownProvider", Final: true,
			Message: fmt.Sprintf("the plan names provider %q, which this daemon does not run (%v)", m, r.order)}
	}
	return m, provider.Plan(inner), nil
}

// Launch implements provider.Provider through the member the plan names.
func (r *Router) Launch(ctx context.Context, plan provider.Plan, regs []provider.Registration) (provider.Result, error) {
	m, inner, err := r.member(plan)
	if err != nil {
		return provider.Result{}, err
	}
	res, err := r.members[m].Launch(ctx, inner, regs)
	var ids []string
	for _, l := range res.Runners {
		if l.Instance.ID != "" {
			ids = append(ids, l.Instance.ID)
		}
	}
	r.own(m, ids)
	return res, err
}

func (r *Router) own(member string, ids []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range ids {
		r.owner[id] = member
	}
}

// List implements provider.Provider: the pool's member for a pool's
// listing, every member otherwise. A member that fails fails the whole
// listing: a reconciler that saw only part would take the rest for gone.
// A listing of every runner (no pool, no ids) replaces what the router
// knows of the ids' members, so it keeps no id its members no longer list
// (a daemon runs for months).
func (r *Router) List(ctx context.Context, f provider.Filter) ([]provider.Instance, error) {
	names := r.order
	if f.Pool != "" {
		names = []string{r.memberOf(f.Pool)}
	}
	var out []provider.Instance
	listed := map[string]string{}
	for _, m := range names {
		ins, err := r.members[m].List(ctx, f)
		if err != nil {
			return nil, fmt.Errorf("listing %s runners: %w", m, err)
		}
		for _, in := range ins {
			listed[in.ID] = m
		}
		out = append(out, ins...)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if f.Pool == "" && len(f.IDs) == 0 {
		r.owner = listed
		return out, nil
	}
	for id, m := range listed {
		r.owner[id] = m
	}
	return out, nil
}

// Terminate implements provider.Provider: each id goes to the member that
// listed or launched it, an id none has shown to every member. Every
// member is asked even when another fails.
func (r *Router) Terminate(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	per := map[string][]string{}
	r.mu.Lock()
	for _, id := range ids {
		if m, ok := r.owner[id]; ok {
			per[m] = append(per[m], id)
			continue
		}
		for _, m := range r.order {
			per[m] = append(per[m], id)
		}
	}
	r.mu.Unlock()
	var errs []error
	for _, m := range r.order {
		if len(per[m]) == 0 {
			continue
		}
		if err := r.members[m].Terminate(ctx, per[m]); err != nil {
			errs = append(errs, fmt.Errorf("ending %s runners: %w", m, err))
		}
	}
	return errors.Join(errs...)
}

// endNotifier is a member that tells when one of its runners ended (the
// process provider).
type endNotifier interface{ Ended() <-chan struct{} }

// Ended merges the end notices of the members that give them: one value
// waits after any of them told of an end (coalesced). AllEndsTold says
// whether every member tells.
func (r *Router) Ended() <-chan struct{} {
	r.endedOnce.Do(func() {
		r.ended = make(chan struct{}, 1)
		for _, m := range r.Members() {
			n, ok := m.(endNotifier)
			if !ok {
				continue
			}
			go func(c <-chan struct{}) {
				for {
					select {
					case <-r.closed:
						return
					case _, ok := <-c:
						if !ok {
							return
						}
					}
					select {
					case r.ended <- struct{}{}:
					default:
					}
				}
			}(n.Ended())
		}
	})
	return r.ended
}

// AllEndsTold reports whether every member tells of its runners' ends:
// otherwise the caller lists the runners on a short period for the others.
func (r *Router) AllEndsTold() bool {
	for _, m := range r.members {
		if _, ok := m.(endNotifier); !ok {
			return false
		}
	}
	return true
}

// closer is a member with something to end when the daemon stops (the
// process provider's runners).
type closer interface {
	Close(ctx context.Context) error
}

// Close closes every member that has a Close, and stops forwarding end
// notices.
func (r *Router) Close(ctx context.Context) error {
	r.closeOnce.Do(func() { close(r.closed) })
	var errs []error
	for _, m := range r.Members() {
		if c, ok := m.(closer); ok {
			errs = append(errs, c.Close(ctx))
		}
	}
	return errors.Join(errs...)
}
