package loadtest

import (
	"context"
	"errors"
	"time"

	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/instanceevents"
	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/queue"
	"github.com/skiffci/skiff/pkg/scaledown"
)

// flagBlindGitHub is PlantIgnoreBusyFlag: the reconciler's runner listings
// show every runner idle.
type flagBlindGitHub struct{ scaledown.GitHub }

func (g flagBlindGitHub) ListRunners(ctx context.Context, inst int64, scope github.Scope, name string) ([]github.Runner, error) {
	rs, err := g.GitHub.ListRunners(ctx, inst, scope, name)
	for i := range rs {
		rs[i].Busy = false
	}
	return rs, err
}

// startBlindLedger is PlantIgnoreLedgerStart: the reconciler reads every
// runner as if the ledger never saw its job start.
type startBlindLedger struct{ ledger.Ledger }

func (b startBlindLedger) LiveRunners(ctx context.Context, pool string) ([]ledger.Runner, error) {
	rs, err := b.Ledger.LiveRunners(ctx, pool)
	for i := range rs {
		if rs[i].State == ledger.StateJobStarted {
			rs[i].State = ledger.StateRegistered
			if rs[i].RegisteredAt.IsZero() {
				rs[i].RegisteredAt = rs[i].StartedAt
			}
		}
	}
	return rs, err
}

// tagBlindProvider is PlantIgnoreHookTag: the hooks' job tags are not read.
type tagBlindProvider struct{ provider.Provider }

func (p tagBlindProvider) List(ctx context.Context, f provider.Filter) ([]provider.Instance, error) {
	out, err := p.Provider.List(ctx, f)
	for i := range out {
		tags := map[string]string{}
		for k, v := range out[i].Tags {
			if k != names.TagJobStarted && k != names.TagJobCompleted {
				tags[k] = v
			}
		}
		out[i].Tags = tags
	}
	return out, err
}

// withWarmer is a provider's wrapper with the warm methods of the provider
// it wraps: the services find provider.Warmer by type assertion, which a
// wrapper embedding provider.Provider alone would hide (and so turn warm
// pools off without a word).
type withWarmer struct {
	provider.Provider
	provider.Warmer
}

// keepWarmer is outer, wrapping inner, with inner's warm methods when
// inner has them.
func keepWarmer(outer, inner provider.Provider) provider.Provider {
	if wm, ok := inner.(provider.Warmer); ok {
		return withWarmer{outer, wm}
	}
	return outer
}

// refusalBlindGitHub is PlantIgnoreRefusal: GitHub's refusal to delete a
// runner that runs a job is taken for a deletion.
type refusalBlindGitHub struct{ scaledown.GitHub }

func (g refusalBlindGitHub) DeleteRunner(ctx context.Context, inst int64, scope github.Scope, id int64) error {
	if err := g.GitHub.DeleteRunner(ctx, inst, scope, id); err != nil && !errors.Is(err, github.ErrRunnerBusy) {
		return err
	}
	return nil
}

// interruptBlindLedger is PlantEndInterrupted: the EC2 events read every
// runner as if no spot warning had marked it.
type interruptBlindLedger struct{ instanceevents.Ledger }

func (l interruptBlindLedger) RunnerByInstance(ctx context.Context, instanceID string) (ledger.Runner, error) {
	r, err := l.Ledger.RunnerByInstance(ctx, instanceID)
	r.InterruptedAt = time.Time{}
	return r, err
}

// lostSends is PlantLoseReplacements: a queue that accepts and drops.
type lostSends struct{}

func (lostSends) Send(context.Context, queue.Job) error { return nil }

// takeBlindLedger is PlantTakeWithoutEnd: scale-up's end of a warm
// machine's record answers "ended by this call" and writes nothing.
type takeBlindLedger struct{ ledger.Ledger }

func (l takeBlindLedger) End(ctx context.Context, name string, at time.Time, reason string) (bool, error) {
	if ledger.IsWarm(name) {
		return true, nil
	}
	return l.Ledger.End(ctx, name, at, reason)
}

// blindClaims is PlantIgnoreClaims: scale-up sees no launch claim.
type blindClaims struct{ ledger.Launches }

func (blindClaims) LaunchClaims(context.Context, []int64, time.Time) (map[int64]ledger.Claim, error) {
	return map[int64]ledger.Claim{}, nil
}
