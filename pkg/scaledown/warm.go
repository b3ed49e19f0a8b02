package scaledown

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/runnerversion"
	"github.com/skiffci/skiff/pkg/scaledown/decide"
)

// MetricWarm counts the pass's warm actions, Reason = decide.WarmDo
// (launch, ready, stop, retire, end, orphan), or launch_refused when the
// pool had no room or the launch failed.
const MetricWarm = "ScaleDownWarm"

// warmSlack is how long past its pool's maxAge a warm machine still waits
// for a registration on its own: the reconciler retires it at maxAge, the
// machine's own bound only catches a reconciler that stopped.
const warmSlack = 30 * time.Minute

// RunnerDownloads names the runner package a boot downloads for a pool
// (freshness.Service); warm machines install it ahead.
type RunnerDownloads interface {
	Download(ctx context.Context, s pool.Shared) (runnerversion.Download, error)
}

// warmPool is one warm pool's settings for the pass.
type warmPool struct {
	spec     pool.Spec
	download runnerversion.Download
}

// keepWarm runs the pass's warm step: it decides each warm pool's
// machines (decide.DecideWarm) and acts on them. Only a provider that can
// keep machines waiting (provider.Warmer) has warm pools.
func (p *pass) keepWarm(ctx context.Context, in decide.Inputs) {
	warmer, ok := p.s.o.Provider.(provider.Warmer)
	if !ok {
		return
	}
	wi := decide.WarmInputs{Now: p.now, Instances: in.Instances, InstancesComplete: in.InstancesComplete,
		ListLag: in.ListLag, OrphanGrace: in.Default.OrphanGrace}
	pools := map[string]warmPool{}
	live := map[string]int{}
	for _, r := range in.Ledger {
		live[r.Pool]++
	}
	for _, pl := range p.s.o.Pools.Pools {
		spec, ok := p.s.o.Pools.WarmSpec(pl.Name)
		if !ok {
			continue
		}
		var d runnerversion.Download
		if rd, ok := p.s.o.Runners.(RunnerDownloads); ok {
			if got, err := rd.Download(ctx, spec.Shared); err == nil {
				d = got
			} else {
				p.log.Warn("resolving the warm machines' runner; they install none", "pool", pl.Name, "err", err)
			}
		}
		pools[pl.Name] = warmPool{spec: spec, download: d}
		stopped, hot := pl.Warm.Counts(p.now)
		wi.Pools = append(wi.Pools, decide.WarmPool{Pool: pl.Name, Key: spec.WarmKey(d.Version), Stopped: stopped, Hot: hot,
			MaxAge: pl.Warm.MaxAge, MaxRunners: pl.MaxRunners, BootTimeout: pl.BootTimeout, Live: live[pl.Name]})
	}
	if len(wi.Pools) == 0 {
		return
	}
	for _, r := range in.Ledger {
		if _, ok := pools[r.Pool]; ok {
			wi.Ledger = append(wi.Ledger, r)
		}
	}
	// When each unheld warm machine's record ended: a job that took it
	// records its own runner on it a moment later.
	wi.Ended = map[string]time.Time{}
	for _, inst := range decide.WarmOrphans(in.Instances, in.Ledger) {
		r, err := p.s.o.Ledger.Runner(ctx, inst.Tags[names.TagRunnerName])
		switch {
		case err == nil && r.State.Live():
			wi.Ended[inst.ID] = p.now // its record has not learnt its instance yet
		case err == nil:
			wi.Ended[inst.ID] = r.EndedAt
		}
	}
	for _, a := range decide.DecideWarm(wi) {
		if p.late(ctx) {
			p.defer1("deadline", "warm", a.Do)
			return
		}
		p.warmAct(ctx, warmer, a, pools[a.Pool])
	}
}

// warmAct does one warm action.
func (p *pass) warmAct(ctx context.Context, warmer provider.Warmer, a decide.WarmAction, wp warmPool) {
	log := p.log.With("pool", a.Pool, "warm", a.Record, "instance_id", a.InstanceID, "warm_kind", a.Kind, "reason", a.Reason)
	var err error
	switch a.Do {
	case decide.WarmEnd:
		_, err = p.s.o.Ledger.End(ctx, a.Record, p.now, a.Reason)
	case decide.WarmRetire:
		// Ending first: a job that took the machine ended its record
		// before, and keeps it.
		var ended bool
		if ended, err = p.s.o.Ledger.End(ctx, a.Record, p.now, "retired: "+a.Reason); err == nil && ended && a.InstanceID != "" {
			err = p.s.o.Provider.Terminate(ctx, []string{a.InstanceID})
		}
	case decide.WarmStop:
		err = warmer.Stop(ctx, []string{a.InstanceID})
	case decide.WarmReady:
		err = p.s.o.Ledger.Advance(ctx, a.Record, ledger.StateRegistered, p.now, 0)
	case decide.WarmOrphan:
		err = p.s.o.Provider.Terminate(ctx, []string{a.InstanceID})
	case decide.WarmLaunch:
		if !p.launchWarm(ctx, a, wp) {
			p.count(MetricWarm, "launch_refused")
			return
		}
	}
	if err != nil {
		p.fail("warm "+string(a.Do), err, "pool", a.Pool, "warm", a.Record, "instance_id", a.InstanceID)
		return
	}
	log.Info("warm machine: " + string(a.Do))
	p.count(MetricWarm, string(a.Do))
	p.mu.Lock()
	if p.rep.Warm == nil {
		p.rep.Warm = map[decide.WarmDo]int{}
	}
	p.rep.Warm[a.Do]++
	p.mu.Unlock()
}

// launchWarm reserves a warm record within the pool's maxRunners and
// launches its machine, whose registration tells it to prepare and wait
// until the pool's maxAge (and a slack) has passed. False: no room, or
// nothing launched (the record is ended).
func (p *pass) launchWarm(ctx context.Context, a decide.WarmAction, wp warmPool) bool {
	spec := wp.spec
	id := make([]byte, 4)
	_, _ = rand.Read(id)
	name := names.WarmRunnerName(p.s.o.Deployment, a.Kind, spec.WarmKey(wp.download.Version), hex.EncodeToString(id))
	n, err := p.s.o.Ledger.Reserve(ctx, spec.Pool, spec.MaxRunners, []ledger.Runner{{Name: name, Pool: spec.Pool, ReservedAt: p.now}})
	if err != nil || n == 0 {
		if err != nil {
			p.fail("warm reserve", err, "pool", spec.Pool)
		}
		return false
	}
	end := func(reason string) {
		if _, err := p.s.o.Ledger.End(ctx, name, p.s.o.Now(), reason); err != nil {
			p.fail("warm release", err, "warm", name)
		}
	}
	sum := sha256.Sum256([]byte(name))
	l := provider.Launch{Token: "skiff-warm-" + hex.EncodeToString(sum[:16]), Spec: spec,
		Runners: []provider.RunnerRequest{{Name: name, Warm: pool.WarmKind(a.Kind)}}}
	plan, err := p.s.o.Provider.Plan(ctx, l)
	if err != nil {
		p.fail("warm plan", err, "pool", spec.Pool)
		end("not_launched")
		return false
	}
	reg := provider.Registration{Mode: provider.ModeWarm, RunnerName: name, WarmKind: a.Kind,
		WarmUntil: p.now.Add(spec.Warm.MaxAge + warmSlack), RunnerVersion: wp.download.Version, RunnerSHA256: wp.download.SHA256}
	res, err := p.s.o.Provider.Launch(ctx, plan, []provider.Registration{reg})
	if err == nil && (len(res.Runners) != 1 || res.Runners[0].Err != nil) {
		err = provider.Errorf(provider.ErrCapacity, "the warm launch got no machine")
		if len(res.Runners) == 1 {
			err = res.Runners[0].Err
		}
	}
	if err != nil {
		// The launch's token makes a lost answer's launch findable; the
		// machine, tagged with the warm name, is an orphan the runner rules
		// reap if it was launched after all.
		p.fail("warm launch", err, "pool", spec.Pool)
		end("not_launched")
		return false
	}
	in := res.Runners[0].Instance
	if err := p.s.o.Ledger.Launched(ctx, name, ledger.LaunchReport{InstanceID: in.ID, InstanceType: in.InstanceType, Zone: in.Zone,
		Spot: in.Capacity == provider.Spot, At: in.LaunchedAt}); err != nil {
		p.fail("warm launched", err, "warm", name, "instance_id", in.ID)
	}
	return true
}
