package scaleup

import (
	"context"
	"errors"
	"strings"
	"sync"

	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/scaler"
	"github.com/skiffci/skiff/pkg/store"
)

// triggerCacheSize bounds the runs whose trigger scale-up remembers after
// asking GitHub: a burst's jobs share few runs, and an entry is a few
// dozen bytes.
const triggerCacheSize = 4096

// admit applies each job's pool policy on who may run: the repository's
// visibility (as the webhook saw it) and, unless the pool allows pull
// requests from forks, the run's trigger — from the workflow_run record the
// webhook keeps, or one GitHub call when it has not arrived yet (cached).
// A refused job is skipped with its reason (public_repository,
// fork_pull_request), never launched. A trigger that cannot be learnt now
// is retried: the pool refuses forks, so launching blind would fail open.
func (s *Service) admit(ctx context.Context, items []*work) {
	for _, w := range live(items) {
		policy := w.spec.Policy
		facts := pool.Facts{Visibility: pool.Visibility(w.job.Visibility)}
		if facts.Visibility == "" {
			// Messages from before the webhook sent the visibility: the
			// webhook admitted it then, with the same policy.
			facts.Visibility = pool.VisibilityPrivate
		}
		if policy.NeedsTrigger() {
			tr, err := s.trigger(ctx, w)
			if err != nil {
				w.log.Warn("could not learn the run's trigger; retrying later", "err", err)
				w.finish(scaler.OutcomeRetry, "trigger_unknown")
				continue
			}
			facts.Trigger = tr
		}
		if err := policy.Admit(facts); err != nil {
			reason := pool.Reason(err)
			s.o.Counter.Count(MetricSkipped, reason)
			w.log.Warn("not launching: the pool does not admit this job", "reason", reason, "err", err)
			w.finish(scaler.OutcomeSkipped, reason)
		}
	}
}

// trigger returns what is known of the job's run: the webhook's
// workflow_run record, else the cache, else GitHub's answer.
func (s *Service) trigger(ctx context.Context, w *work) (*pool.Trigger, error) {
	run, err := s.o.Records.Run(ctx, w.job.RunID)
	switch {
	case err == nil && run.Event != "":
		return &pool.Trigger{Event: run.Event, Fork: run.FromFork}, nil
	case err != nil && !errors.Is(err, store.ErrNotFound):
		w.log.Warn("reading the run's record; asking GitHub", "err", err)
	}
	if tr, ok := s.triggers.get(w.job.RunID); ok {
		return tr, nil
	}
	owner, repo, _ := strings.Cut(w.job.Repository, "/")
	r, err := s.o.GitHub.GetWorkflowRun(ctx, w.job.InstallationID, owner, repo, w.job.RunID)
	if err != nil {
		return nil, err
	}
	head := r.HeadRepository.FullName
	tr := &pool.Trigger{Event: r.Event, Fork: head != "" && !strings.EqualFold(head, w.job.Repository)}
	s.triggers.put(w.job.RunID, tr)
	return tr, nil
}

// triggerCache remembers run triggers learnt from GitHub, evicting the
// oldest entry when full. A run's trigger never changes.
type triggerCache struct {
	mu    sync.Mutex
	max   int
	m     map[int64]*pool.Trigger
	order []int64
}

func newTriggerCache(max int) *triggerCache {
	return &triggerCache{max: max, m: map[int64]*pool.Trigger{}}
}

func (c *triggerCache) get(run int64) (*pool.Trigger, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	tr, ok := c.m[run]
	return tr, ok
}

func (c *triggerCache) put(run int64, tr *pool.Trigger) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[run]; ok {
		return
	}
	if len(c.order) >= c.max {
		delete(c.m, c.order[0])
		c.order = c.order[1:]
	}
	c.m[run] = tr
	c.order = append(c.order, run)
}
