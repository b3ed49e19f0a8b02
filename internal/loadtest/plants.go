package loadtest

import (
	"context"

	"github.com/skiffci/skiff/pkg/launch"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/store"
)

// busyBlindLedger is half of PlantBusyBlind: the reconciler reads every
// runner as if the ledger never saw its job start.
type busyBlindLedger struct{ store.Ledger }

func (b busyBlindLedger) LiveRunners(ctx context.Context, pool string) ([]launch.Runner, error) {
	rs, err := b.Ledger.LiveRunners(ctx, pool)
	for i := range rs {
		if rs[i].State == launch.StateJobStarted {
			rs[i].State = launch.StateRegistered
		}
	}
	return rs, err
}

// tagBlindProvider is the other half: the hooks' job tags are not read.
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
