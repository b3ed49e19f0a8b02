package scaledown

import (
	"context"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/scaledown/decide"
)

// pass is one reconcile pass's state.
type pass struct {
	s         *Service
	now       time.Time
	log       *slog.Logger
	jobChecks atomic.Int64
	ghCalls   atomic.Int64 // GitHub calls made this pass (MaxGitHubCalls)
	deletes   atomic.Int64 // runner deletions asked for this pass
	mu        sync.Mutex
	rep       Report
	instances map[string]provider.Instance
}

func (p *pass) count(name, reason string) { p.s.o.Counter.Count(name, reason) }

func (p *pass) fail(step string, err error, args ...any) {
	p.count(MetricErrors, step)
	p.log.Error(step, append(args, "err", err)...)
	p.mu.Lock()
	p.rep.Errors++
	p.mu.Unlock()
}

func (p *pass) defer1(bound string, args ...any) {
	p.count(MetricDeferred, bound)
	p.log.Info("left for the next pass", append(args, "bound", bound)...)
	p.mu.Lock()
	p.rep.Deferred++
	p.mu.Unlock()
}

// takeDelete takes one runner deletion from the pass's GitHub budget,
// leaving room for the job checks that come after the deletions; the first
// MinDeletes always go.
func (p *pass) takeDelete() bool {
	if p.deletes.Add(1) <= int64(p.s.o.MinDeletes) {
		p.ghCalls.Add(1)
		return true
	}
	return takeWithin(&p.ghCalls, 1, int64(p.s.o.MaxGitHubCalls-p.s.o.MaxJobChecks))
}

// takeWithin adds n to *used if the sum stays within limit, and reports
// whether it did: a budget shared by a pass's concurrent actions.
func takeWithin(used *atomic.Int64, n, limit int64) bool {
	for {
		u := used.Load()
		if u+n > limit {
			return false
		}
		if used.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

// takeJobCheck takes one GitHub job read from the pass's budget for the
// action of runner, and remembers when it did.
func (p *pass) takeJobCheck(runner string) bool { return p.takeJobChecks(runner, 1) }

// takeJobChecks takes n reads at once, or none.
func (p *pass) takeJobChecks(runner string, n int) bool {
	if !takeWithin(&p.jobChecks, int64(n), int64(p.s.o.MaxJobChecks)) {
		return false
	}
	p.ghCalls.Add(int64(n))
	p.s.mu.Lock()
	if p.s.checked == nil {
		p.s.checked = map[string]time.Time{}
	}
	p.s.checked[runner] = p.now
	p.s.mu.Unlock()
	return true
}

// fairOrder puts first the actions that terminate a live instance, then,
// within each, those whose job checks waited longest (never checked
// first), keeping the decided order otherwise; it forgets checks older
// than an hour.
func (p *pass) fairOrder(actions []decide.Action) {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	for r, at := range p.s.checked {
		if p.now.Sub(at) > time.Hour {
			delete(p.s.checked, r)
		}
	}
	// Within the GitHub budget, runners whose instance still runs (and
	// costs) come before runners already gone, which cost nothing but a line
	// in GitHub's list (and GitHub removes an ephemeral runner offline for a
	// day itself).
	rank := func(a decide.Action) int {
		if a.Terminate {
			return 0
		}
		return 1
	}
	sort.SliceStable(actions, func(i, j int) bool {
		if ri, rj := rank(actions[i]), rank(actions[j]); ri != rj {
			return ri < rj
		}
		return p.s.checked[actions[i].Runner].Before(p.s.checked[actions[j].Runner])
	})
}

func (p *pass) late(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < p.s.o.DeadlineMargin {
		return true
	}
	return false
}

// each runs fn(0..n-1) with the pass's concurrency; none starts once ctx is done.
func (p *pass) each(ctx context.Context, n int, fn func(i int)) {
	p.s.o.Executor.Run(n, p.s.o.Concurrency, func(i int) {
		if ctx.Err() == nil {
			fn(i)
		}
	})
}
