package scaleup

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/scaleup/decide"
	"github.com/skiffci/skiff/pkg/store"
)

// triggerCacheSize bounds the runs whose trigger scale-up remembers after
// asking GitHub: a burst's jobs share few runs, and an entry is a few
// dozen bytes.
const triggerCacheSize = 4096

// Bounds of the cache of users' write access to repositories, which the
// collaborators fork policy asks GitHub about.
const (
	// permissionTTL is how long an answer is trusted: long enough that a
	// burst of a pull request's jobs, and its next pushes, cost one call;
	// short enough that removing someone's write access (or granting it to
	// a first-time contributor, whose refused jobs need a re-run) takes
	// effect within minutes.
	permissionTTL = 10 * time.Minute
	// permissionCacheSize bounds the (repository, user) pairs remembered:
	// far more than the fork authors active in ten minutes, at a few dozen
	// bytes each.
	permissionCacheSize = 4096
)

// Association values scale-up gives a fork's author after checking the
// author's permission (pool.Trigger.AuthorAssociation).
const (
	associationWriter = "COLLABORATOR" // write, maintain or admin
	associationNone   = "NONE"
)

// admit applies each job's pool policy on who may run: the repository's
// visibility (as the webhook saw it) and, unless the pool allows pull
// requests from forks, the run's trigger — from the workflow_run record the
// webhook keeps, or one GitHub call when it has not arrived yet (cached).
// For a run from a fork under a pool that admits collaborators, the run's
// actor's permission on the repository decides (one GitHub call per
// repository and user, cached for permissionTTL).
// A refused job is skipped with its reason (public_repository,
// fork_pull_request), never launched. A trigger or permission that cannot
// be learnt now is retried: launching blind would fail open.
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
			collaborators := policy.ForkPullRequests == pool.ForkCollaborators
			rt, err := s.trigger(ctx, w, collaborators)
			if err != nil {
				w.log.Warn("could not learn the run's trigger; retrying later", "err", err)
				w.finish(decide.OutcomeRetry, "trigger_unknown")
				continue
			}
			tr := rt.Trigger // a copy: the cached trigger is shared
			if collaborators && tr.Fork && tr.AuthorAssociation == "" && rt.actor != "" {
				assoc, err := s.association(ctx, w, rt.actor)
				if err != nil {
					w.log.Warn("could not learn the fork author's permission; retrying later", "actor", rt.actor, "err", err)
					w.finish(decide.OutcomeRetry, "permission_unknown")
					continue
				}
				tr.AuthorAssociation = assoc
			}
			facts.Trigger = &tr
		}
		if err := policy.Admit(facts); err != nil {
			reason := pool.Reason(err)
			s.o.Counter.Count(MetricSkipped, reason)
			w.log.Warn("not launching: the pool does not admit this job", "reason", reason, "err", err)
			w.finish(decide.OutcomeSkipped, reason)
		}
	}
}

// runTrigger is what admission knows of a run: its trigger, and the login
// of who triggered it ("" when unknown).
type runTrigger struct {
	pool.Trigger
	actor string
}

// trigger returns what is known of the job's run: the webhook's
// workflow_run record, else the cache, else GitHub's answer. needActor asks
// for the actor of a run from a fork: a record without one (kept before
// the webhook recorded actors) is then completed from GitHub.
func (s *Service) trigger(ctx context.Context, w *work, needActor bool) (runTrigger, error) {
	run, err := s.o.Jobs.Run(ctx, w.job.RunID)
	switch {
	case err == nil && run.Event != "" && (!needActor || !run.FromFork || run.Actor != ""):
		return runTrigger{Trigger: pool.Trigger{Event: run.Event, Fork: run.FromFork}, actor: run.Actor}, nil
	case err != nil && !errors.Is(err, store.ErrNotFound):
		w.log.Warn("reading the run's record; asking GitHub", "err", err)
	}
	if rt, ok := s.triggers.get(w.job.RunID); ok {
		return rt, nil
	}
	owner, repo, _ := strings.Cut(w.job.Repository, "/")
	r, err := s.o.GitHub.GetWorkflowRun(ctx, w.job.InstallationID, owner, repo, w.job.RunID)
	if err != nil {
		return runTrigger{}, err
	}
	// An unknown head repository (the fork was deleted) is a fork's, as
	// the webhook reads it: failing closed.
	rt := runTrigger{Trigger: pool.Trigger{Event: r.Event, Fork: !strings.EqualFold(r.HeadRepository.FullName, w.job.Repository)},
		actor: r.TriggeringActor}
	s.triggers.put(w.job.RunID, rt)
	return rt, nil
}

// association returns the author association the fork policy reads for
// actor on the job's repository: COLLABORATOR for write, maintain or admin,
// NONE otherwise (GitHub's answer for a user who is not a collaborator
// included), from the cache or one GitHub call.
func (s *Service) association(ctx context.Context, w *work, actor string) (string, error) {
	key := strings.ToLower(w.job.Repository) + "\x00" + strings.ToLower(actor)
	now := s.o.Now()
	if assoc, ok := s.perms.get(key, now); ok {
		return assoc, nil
	}
	owner, repo, _ := strings.Cut(w.job.Repository, "/")
	p, err := s.o.GitHub.GetPermissionLevel(ctx, w.job.InstallationID, owner, repo, actor)
	if err != nil {
		return "", fmt.Errorf("checking %s's permission on %s: %w", actor, w.job.Repository, err)
	}
	assoc := associationNone
	if p.CanWrite() {
		assoc = associationWriter
	}
	s.perms.put(key, assoc, now.Add(permissionTTL))
	w.log.Info("checked a fork author's permission", "actor", actor, "permission", p.Permission, "role", p.RoleName)
	return assoc, nil
}

// triggerCache remembers run triggers learnt from GitHub, evicting the
// oldest entry when full. A run's trigger never changes.
type triggerCache struct {
	mu    sync.Mutex
	max   int
	m     map[int64]runTrigger
	order []int64
}

func newTriggerCache(max int) *triggerCache {
	return &triggerCache{max: max, m: map[int64]runTrigger{}}
}

func (c *triggerCache) get(run int64) (runTrigger, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	rt, ok := c.m[run]
	return rt, ok
}

func (c *triggerCache) put(run int64, rt runTrigger) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[run]; ok {
		return
	}
	if len(c.order) >= c.max {
		delete(c.m, c.order[0])
		c.order = c.order[1:]
	}
	c.m[run] = rt
	c.order = append(c.order, run)
}

// permissionCache remembers author associations per (repository, user)
// until each entry expires, evicting the oldest entry when full.
type permissionCache struct {
	mu    sync.Mutex
	max   int
	m     map[string]permissionEntry
	order []string // keys in insertion order, each once
}

type permissionEntry struct {
	assoc   string
	expires time.Time
}

func newPermissionCache(max int) *permissionCache {
	return &permissionCache{max: max, m: map[string]permissionEntry{}}
}

func (c *permissionCache) get(key string, now time.Time) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	if !ok || !now.Before(e.expires) {
		return "", false
	}
	return e.assoc, true
}

func (c *permissionCache) put(key, assoc string, expires time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[key]; !ok {
		for len(c.m) >= c.max && len(c.order) > 0 {
			delete(c.m, c.order[0])
			c.order = c.order[1:]
		}
		c.order = append(c.order, key)
	}
	c.m[key] = permissionEntry{assoc: assoc, expires: expires}
}
