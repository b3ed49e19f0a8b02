package scaleup_test

import (
	"context"
	"github.com/skiffci/skiff/pkg/ledger"
	"sync"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/scaleup"
)

// hookLaunches runs a hook before the wrapped store's ClaimLaunch or
// PutLaunch, once each, to order two invocations step by step.
type hookLaunches struct {
	ledger.Launches
	beforeClaim, beforeIntent func()
	claimOnce, intentOnce     sync.Once
}

func (h *hookLaunches) ClaimLaunch(ctx context.Context, c ledger.Claim, prev int, now time.Time) error {
	if h.beforeClaim != nil {
		h.claimOnce.Do(h.beforeClaim)
	}
	return h.Launches.ClaimLaunch(ctx, c, prev, now)
}

func (h *hookLaunches) PutLaunch(ctx context.Context, f ledger.Launch) error {
	if h.beforeIntent != nil && f.State == ledger.LaunchIntent {
		h.intentOnce.Do(h.beforeIntent)
	}
	return h.Launches.PutLaunch(ctx, f)
}

// TestDuplicateLoserLeavesTheWinnersLaunch: two invocations get the same
// job, so both derive the same launch token. The loser reads no claim, then
// loses the claim to the winner, and finishes while the winner is between
// its claim and its launch intent. The loser must leave the token alone: the
// winner launches in its own invocation with the one registration it made,
// and the loser's message is retried as a claim conflict (counted).
func TestDuplicateLoserLeavesTheWinnersLaunch(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	atIntent, release := make(chan struct{}), make(chan struct{})

	wo := e.opts
	wo.Launches = &hookLaunches{Launches: e.store, beforeIntent: func() {
		close(atIntent) // the winner has its claim
		<-release       // and waits until the loser is done
	}}
	winner, err := scaleup.New(wo)
	if err != nil {
		t.Fatal(err)
	}
	var winnerResp response
	done := make(chan struct{})
	lo := e.opts
	lo.Launches = &hookLaunches{Launches: e.store, beforeClaim: func() {
		// The loser has read no claim; now the winner claims first.
		go func() {
			defer close(done)
			winnerResp = e.handle(context.Background(), winner, message(job(4242), 1))
		}()
		<-atIntent
	}}
	loser, err := scaleup.New(lo)
	if err != nil {
		t.Fatal(err)
	}

	loserResp := e.handle(context.Background(), loser, message(job(4242), 1))
	close(release)
	<-done

	if len(winnerResp.BatchItemFailures) != 0 {
		t.Errorf("the claim holder did not launch in its invocation: %+v\nlogs:\n%s", winnerResp, e.logs.String())
	}
	if len(loserResp.BatchItemFailures) != 1 {
		t.Errorf("the loser's message: %+v, want it retried", loserResp)
	}
	if got := e.counter.Get(scaleup.MetricDuplicates, "claim_conflict"); got != 1 {
		t.Errorf("claim conflicts counted: %d, want 1", got)
	}
	if got := len(e.ec2.Live()); got != 1 {
		t.Errorf("%d live instances, want 1", got)
	}
	if got := e.sim.Requests(ghsim.OpGenerateOrgJITConfig); got != 1 {
		t.Errorf("%d JIT configurations, want 1 (none orphaned)", got)
	}
	if got, _ := e.ledger.Live(context.Background(), "cpu"); got != 1 {
		t.Errorf("runner count %d, want 1", got)
	}
}
