// Package dryrun is the provider that launches nothing: it logs each launch
// it would make (registrations redacted) and keeps the instances it
// pretends to have launched in memory, so that scale-up, the reconciler and
// `skiff local --provider dry-run` run their whole logic against it. Like
// EC2, launching the same plan twice returns the first launch's instances.
package dryrun

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provider"
)

// Provider is the dry-run provider. Its zero value is not usable: call New.
// It is safe for concurrent use.
type Provider struct {
	log *slog.Logger
	now func() time.Time

	mu        sync.Mutex
	seq       int
	instances map[string]*provider.Instance
	order     []string
	byToken   map[string][]string
	delivered map[string]provider.Registration
	failNext  error
	queue     string // HoldInQueue's reason
}

var _ provider.Provider = (*Provider)(nil)

// New returns a dry-run provider that logs to log, with the clock now
// (time.Now when nil).
func New(log *slog.Logger, now func() time.Time) *Provider {
	if log == nil {
		log = slog.Default()
	}
	if now == nil {
		now = time.Now
	}
	return &Provider{log: log, now: now, instances: map[string]*provider.Instance{}, byToken: map[string][]string{},
		delivered: map[string]provider.Registration{}}
}

// Name implements provider.Provider.
func (p *Provider) Name() string { return "dry-run" }

// Capabilities implements provider.Provider: the dry-run provider stands in
// for any backend, so it pretends to do everything (a queue of its own
// with HoldInQueue); it measures nothing.
func (p *Provider) Capabilities() provider.Capabilities {
	return provider.Capabilities{Spot: true, DynamicSizes: true, GPUs: true, ReplayByToken: true, OwnQueue: true}
}

// HoldInQueue makes later launches stay pending in a pretended queue of
// the backend's own, with reason, as Slurm or Kubernetes would; "" launches
// them running again. Dequeue starts them.
func (p *Provider) HoldInQueue(reason string) {
	p.mu.Lock()
	p.queue = reason
	p.mu.Unlock()
}

// Dequeue starts queued runners: running from now.
func (p *Provider) Dequeue(ids ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, id := range ids {
		if in, ok := p.instances[id]; ok && in.QueueReason != "" {
			in.State, in.QueueReason, in.RunningSince = provider.Running, "", p.now().UTC()
		}
	}
}

type plan struct {
	Token   string                   `json:"token"`
	Pool    string                   `json:"pool"`
	Types   []string                 `json:"instance_types"`
	Runners []provider.RunnerRequest `json:"runners"`
	Spot    bool                     `json:"spot"`
}

// Plan implements provider.Provider.
func (p *Provider) Plan(_ context.Context, l provider.Launch) (provider.Plan, error) {
	if err := l.Check(); err != nil {
		return "", err
	}
	pn := plan{Token: l.Token, Pool: l.Spec.Pool, Runners: l.Runners}
	if e := l.Spec.EC2; e != nil {
		pn.Types, pn.Spot = e.InstanceTypes, e.Capacity != pool.CapacityOnDemand
	}
	b, err := json.Marshal(pn)
	if err != nil {
		return "", fmt.Errorf("encoding plan: %w", err)
	}
	return provider.Plan(b), nil
}

// FailNext makes the next Launch fail with err, as a backend would (tests).
func (p *Provider) FailNext(err error) {
	p.mu.Lock()
	p.failNext = err
	p.mu.Unlock()
}

// Launch implements provider.Provider: it logs what it would launch and
// records one running instance per runner (the first launch of a token;
// later ones return the same instances).
func (p *Provider) Launch(ctx context.Context, pl provider.Plan, regs []provider.Registration) (provider.Result, error) {
	var pn plan
	if err := provider.BeginLaunch(ctx, pl, &pn, "dry-run", regs, func() (bool, int) { return pn.Token != "", len(pn.Runners) }); err != nil {
		return provider.Result{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.failNext; err != nil {
		p.failNext = nil
		return provider.Result{}, err
	}
	ids, replay := p.byToken[pn.Token]
	if !replay {
		for i, r := range pn.Runners {
			p.seq++
			id := "dry-" + strconv.Itoa(p.seq)
			typ := "dry-run"
			if len(pn.Types) > 0 {
				typ = pn.Types[0]
			}
			capacity := provider.OnDemand
			if pn.Spot {
				capacity = provider.Spot
			}
			state := provider.Running
			if p.queue != "" {
				state = provider.Pending
			}
			p.instances[id] = &provider.Instance{ID: id, Pool: pn.Pool, InstanceType: typ, Zone: "local", Capacity: capacity,
				State: state, QueueReason: p.queue, LaunchedAt: p.now().UTC(), Tags: map[string]string{
					names.TagManaged: names.ManagedValue, names.TagPool: pn.Pool, names.TagLaunchToken: pn.Token,
					names.TagJobID: strconv.FormatInt(r.JobID, 10), names.TagRunID: strconv.FormatInt(r.RunID, 10),
					names.TagRunnerName: r.Name, names.TagRepository: r.Repository,
				}}
			p.order = append(p.order, id)
			ids = append(ids, id)
			var reg any = "none (replay)"
			if regs != nil {
				p.delivered[id] = regs[i]
				reg = regs[i] // logs redacted: Registration is a slog.LogValuer
			}
			p.log.Info("dry run: would launch a runner", "pool", pn.Pool, "instance_id", id, "instance_type", typ,
				"job_id", r.JobID, "runner_name", r.Name, "registration", reg)
		}
		p.byToken[pn.Token] = ids
	}
	res := provider.Result{Runners: make([]provider.Launched, len(pn.Runners))}
	for i, id := range ids {
		if i < len(res.Runners) {
			res.Runners[i].Instance = p.instances[id].Clone()
		}
	}
	return res, nil
}

// List implements provider.Provider.
func (p *Provider) List(ctx context.Context, f provider.Filter) ([]provider.Instance, error) {
	if err := ctx.Err(); err != nil {
		return nil, &provider.Error{Kind: provider.ErrTransient, Message: err.Error()}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []provider.Instance
	for _, id := range p.order {
		in := p.instances[id]
		if len(f.IDs) > 0 && !slices.Contains(f.IDs, id) || f.Pool != "" && in.Pool != f.Pool || f.AliveOnly && !in.State.Alive() {
			continue
		}
		out = append(out, in.Clone())
	}
	return out, nil
}

// Terminate implements provider.Provider.
func (p *Provider) Terminate(ctx context.Context, ids []string) error {
	if err := ctx.Err(); err != nil {
		return &provider.Error{Kind: provider.ErrTransient, Message: err.Error()}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, id := range ids {
		if in, ok := p.instances[id]; ok && in.State != provider.Terminated {
			in.State, in.QueueReason = provider.Terminated, ""
			p.log.Info("dry run: would terminate", "instance_id", id, "pool", in.Pool)
		}
	}
	return nil
}

// Delivered returns the registration delivered to an instance (tests).
func (p *Provider) Delivered(id string) (provider.Registration, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r, ok := p.delivered[id]
	return r, ok
}
