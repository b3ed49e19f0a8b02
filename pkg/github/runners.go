package github

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// groupTTL: runner groups change by hand, rarely; an hour-old id is fine, and
// a deleted group shows up as a 404 from the JIT call, which drops the cache.
const groupTTL = time.Hour

type groupEntry struct {
	id      int64
	fetched time.Time
}

// GenerateJITConfig creates a just-in-time runner in scope and returns its
// single-use configuration (POST .../actions/runners/generate-jitconfig).
// inst is the installation id from the webhook, or 0 to look it up.
// A runner with the same name in the scope gives an error matching ErrConflict.
func (c *Client) GenerateJITConfig(ctx context.Context, inst int64, scope Scope, req JITRequest) (*JITConfig, error) {
	if err := scope.validate(); err != nil {
		return nil, err
	}
	if err := req.validate(); err != nil {
		return nil, err
	}
	in, err := c.installFor(ctx, inst, scope.Owner, scope.Repo)
	if err != nil {
		return nil, fmt.Errorf("generating JIT config: %w", err)
	}
	rq := &request{op: "generate_jit_config", method: "POST", path: scope.prefix() + "/actions/runners/generate-jitconfig",
		body: req, inst: in}
	resp, err := c.send(ctx, rq)
	if errors.Is(err, ErrConflict) && rq.uncertain {
		// An earlier attempt of this very call created the runner, and its answer, the
		// only copy of that JIT config, was lost. Replace the orphan once.
		if rerr := c.deleteOrphan(ctx, in.id, scope, req.Name); rerr != nil {
			err = fmt.Errorf("%w (replacing the runner whose JIT config was lost: %w)", err, rerr)
		} else {
			rq = &request{op: rq.op, method: rq.method, path: rq.path, body: req, inst: in}
			resp, err = c.send(ctx, rq)
		}
	}
	if errors.Is(err, ErrNotFound) && scope.IsOrg() {
		c.forgetGroups(scope.Owner) // the group may be gone
	}
	if err != nil {
		return nil, fmt.Errorf("generating JIT config for %s: %w", scope, err)
	}
	var out struct {
		Runner           Runner `json:"runner"`
		EncodedJITConfig string `json:"encoded_jit_config"`
	}
	if err := decode(rq.op, resp, &out); err != nil {
		return nil, err
	}
	if out.EncodedJITConfig == "" {
		return nil, fmt.Errorf("generating JIT config for %s: answer has no encoded_jit_config", scope)
	}
	return &JITConfig{Runner: out.Runner, EncodedJITConfig: Secret(out.EncodedJITConfig)}, nil
}

// deleteOrphan deletes the runner named name in scope if it never took a job: offline
// and idle, as a JIT runner is until its config is used. A runner that connected is
// someone's, and is left alone (ErrConflict stands).
func (c *Client) deleteOrphan(ctx context.Context, inst int64, scope Scope, name string) error {
	rs, err := c.ListRunners(ctx, inst, scope, name)
	if err != nil {
		return err
	}
	for _, r := range rs {
		if r.Name != name {
			continue
		}
		if r.Status != "offline" || r.Busy {
			return fmt.Errorf("runner %d %q is %s (busy=%v): %w", r.ID, name, r.Status, r.Busy, ErrConflict)
		}
		c.log.Warn("replacing a runner whose JIT config was lost in transit", "runner_id", r.ID, "runner_name", name, "scope", scope.String())
		return c.DeleteRunner(ctx, inst, scope, r.ID)
	}
	return nil // gone meanwhile: generate again
}

// RunnerGroupID returns the id of the organization's runner group with the
// given name (case-insensitive), cached for an hour. Repository-level runners
// always use the default group, id 1. An unknown name matches ErrNotFound.
func (c *Client) RunnerGroupID(ctx context.Context, inst int64, org, name string) (int64, error) {
	key := normalizeOwner(org) + "/" + strings.ToLower(name)
	c.mu.Lock()
	if e, ok := c.groups[key]; ok && c.now().Sub(e.fetched) < groupTTL {
		c.mu.Unlock()
		return e.id, nil
	}
	c.mu.Unlock()
	v, err := c.flights.do(ctx, "groups/"+key, mintTimeout, func(ctx context.Context) (any, error) {
		groups, err := c.ListRunnerGroups(ctx, inst, org)
		if err != nil {
			return nil, err
		}
		now := c.now()
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, g := range groups {
			c.groups[normalizeOwner(org)+"/"+strings.ToLower(g.Name)] = groupEntry{id: g.ID, fetched: now}
		}
		if e, ok := c.groups[key]; ok && e.fetched.Equal(now) {
			return e.id, nil
		}
		return nil, fmt.Errorf("runner group %q in %s: %w", name, org, ErrNotFound)
	})
	if err != nil {
		return 0, fmt.Errorf("finding runner group: %w", err)
	}
	return v.(int64), nil
}

func (c *Client) forgetGroups(org string) {
	prefix := normalizeOwner(org) + "/"
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.groups {
		if strings.HasPrefix(k, prefix) {
			delete(c.groups, k)
		}
	}
}

// ListRunnerGroups lists every runner group of an organization (all pages).
func (c *Client) ListRunnerGroups(ctx context.Context, inst int64, org string) ([]RunnerGroup, error) {
	in, err := c.installFor(ctx, inst, org, "")
	if err != nil {
		return nil, fmt.Errorf("listing runner groups: %w", err)
	}
	var all []RunnerGroup
	rq := &request{op: "list_runner_groups", method: "GET", path: OrgScope(org).prefix() + "/actions/runner-groups",
		query: url.Values{"per_page": {"100"}}, inst: in}
	err = c.paginate(ctx, rq, func(resp *response) (bool, error) {
		var page struct {
			RunnerGroups []RunnerGroup `json:"runner_groups"`
		}
		if err := decode(rq.op, resp, &page); err != nil {
			return false, err
		}
		all = append(all, page.RunnerGroups...)
		return len(page.RunnerGroups) > 0, nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing runner groups of %s: %w", org, err)
	}
	return all, nil
}

// RegistrationToken returns a token for `config.sh --token` in scope
// (POST .../actions/runners/registration-token). The token is cached until
// five minutes before it expires, so a burst of launches costs one call.
func (c *Client) RegistrationToken(ctx context.Context, inst int64, scope Scope) (RegistrationToken, error) {
	if err := scope.validate(); err != nil {
		return RegistrationToken{}, err
	}
	key := strings.ToLower(scope.String())
	c.mu.Lock()
	if t, ok := c.regTokens[key]; ok && c.now().Before(t.ExpiresAt.Add(-tokenMargin)) {
		c.mu.Unlock()
		return t, nil
	}
	c.mu.Unlock()
	v, err := c.flights.do(ctx, "regtoken/"+key, mintTimeout, func(ctx context.Context) (any, error) {
		c.mu.Lock()
		if t, ok := c.regTokens[key]; ok && c.now().Before(t.ExpiresAt.Add(-tokenMargin)) {
			c.mu.Unlock()
			return t, nil
		}
		c.mu.Unlock()
		in, err := c.installFor(ctx, inst, scope.Owner, scope.Repo)
		if err != nil {
			return nil, err
		}
		rq := &request{op: "create_registration_token", method: "POST",
			path: scope.prefix() + "/actions/runners/registration-token", inst: in}
		resp, err := c.send(ctx, rq)
		if err != nil {
			return nil, err
		}
		var out struct {
			Token     string    `json:"token"`
			ExpiresAt time.Time `json:"expires_at"`
		}
		if err := decode(rq.op, resp, &out); err != nil {
			return nil, err
		}
		if out.Token == "" {
			return nil, fmt.Errorf("github %s: answer has no token", rq.op)
		}
		t := RegistrationToken{Token: Secret(out.Token), ExpiresAt: out.ExpiresAt}
		c.mu.Lock()
		c.regTokens[key] = t
		c.mu.Unlock()
		return t, nil
	})
	if err != nil {
		return RegistrationToken{}, fmt.Errorf("creating registration token for %s: %w", scope, err)
	}
	return v.(RegistrationToken), nil
}

// ListRunners lists every self-hosted runner in scope (all pages). A non-empty
// name filters on the exact runner name, as GitHub's `name` parameter does.
func (c *Client) ListRunners(ctx context.Context, inst int64, scope Scope, name string) ([]Runner, error) {
	if err := scope.validate(); err != nil {
		return nil, err
	}
	in, err := c.installFor(ctx, inst, scope.Owner, scope.Repo)
	if err != nil {
		return nil, fmt.Errorf("listing runners: %w", err)
	}
	q := url.Values{"per_page": {"100"}}
	if name != "" {
		q.Set("name", name)
	}
	var all []Runner
	rq := &request{op: "list_runners", method: "GET", path: scope.prefix() + "/actions/runners", query: q, inst: in}
	err = c.paginate(ctx, rq, func(resp *response) (bool, error) {
		var page struct {
			Runners []Runner `json:"runners"`
		}
		if err := decode(rq.op, resp, &page); err != nil {
			return false, err
		}
		all = append(all, page.Runners...)
		return len(page.Runners) > 0, nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing runners of %s: %w", scope, err)
	}
	return all, nil
}

// GetRunner returns one runner; an unknown id matches ErrNotFound.
func (c *Client) GetRunner(ctx context.Context, inst int64, scope Scope, id int64) (*Runner, error) {
	if err := scope.validate(); err != nil {
		return nil, err
	}
	in, err := c.installFor(ctx, inst, scope.Owner, scope.Repo)
	if err != nil {
		return nil, fmt.Errorf("getting runner: %w", err)
	}
	rq := &request{op: "get_runner", method: "GET", path: scope.prefix() + "/actions/runners/" + strconv.FormatInt(id, 10), inst: in}
	resp, err := c.send(ctx, rq)
	if err != nil {
		return nil, fmt.Errorf("getting runner %d of %s: %w", id, scope, err)
	}
	var r Runner
	if err := decode(rq.op, resp, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// DeleteRunner removes a runner. A runner already gone is not an error; a
// runner running a job gives an error matching ErrRunnerBusy (GitHub's 422),
// so the caller can leave it and try again after its job.
func (c *Client) DeleteRunner(ctx context.Context, inst int64, scope Scope, id int64) error {
	if err := scope.validate(); err != nil {
		return err
	}
	in, err := c.installFor(ctx, inst, scope.Owner, scope.Repo)
	if err != nil {
		return fmt.Errorf("deleting runner: %w", err)
	}
	rq := &request{op: "delete_runner", method: "DELETE", path: scope.prefix() + "/actions/runners/" + strconv.FormatInt(id, 10), inst: in}
	_, err = c.send(ctx, rq)
	switch {
	case err == nil, errors.Is(err, ErrNotFound):
		return nil
	case errors.Is(err, ErrValidation):
		return fmt.Errorf("deleting runner %d of %s: %w: %w", id, scope, ErrRunnerBusy, err)
	}
	return fmt.Errorf("deleting runner %d of %s: %w", id, scope, err)
}

// GetJob returns a workflow job (GET /repos/{owner}/{repo}/actions/jobs/{job_id}).
func (c *Client) GetJob(ctx context.Context, inst int64, owner, repo string, jobID int64) (*Job, error) {
	in, err := c.installFor(ctx, inst, owner, repo)
	if err != nil {
		return nil, fmt.Errorf("getting job: %w", err)
	}
	rq := &request{op: "get_job", method: "GET",
		path: RepoScope(owner, repo).prefix() + "/actions/jobs/" + strconv.FormatInt(jobID, 10), inst: in}
	resp, err := c.send(ctx, rq)
	if err != nil {
		return nil, fmt.Errorf("getting job %d of %s/%s: %w", jobID, owner, repo, err)
	}
	var j Job
	if err := decode(rq.op, resp, &j); err != nil {
		return nil, err
	}
	return &j, nil
}

// GetWorkflowRun returns a workflow run, whose Event is the trigger the
// metrics record needs (GET /repos/{owner}/{repo}/actions/runs/{run_id}).
func (c *Client) GetWorkflowRun(ctx context.Context, inst int64, owner, repo string, runID int64) (*WorkflowRun, error) {
	in, err := c.installFor(ctx, inst, owner, repo)
	if err != nil {
		return nil, fmt.Errorf("getting workflow run: %w", err)
	}
	rq := &request{op: "get_workflow_run", method: "GET",
		path:  RepoScope(owner, repo).prefix() + "/actions/runs/" + strconv.FormatInt(runID, 10),
		query: url.Values{"exclude_pull_requests": {"true"}}, inst: in}
	resp, err := c.send(ctx, rq)
	if err != nil {
		return nil, fmt.Errorf("getting workflow run %d of %s/%s: %w", runID, owner, repo, err)
	}
	var r WorkflowRun
	if err := decode(rq.op, resp, &r); err != nil {
		return nil, err
	}
	return &r, nil
}
