package github

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	gh "github.com/google/go-github/v62/github"
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
	body := &gh.GenerateJITConfigRequest{Name: req.Name, RunnerGroupID: req.RunnerGroupID, Labels: req.Labels}
	if req.WorkFolder != "" {
		body.WorkFolder = gh.String(req.WorkFolder)
	}
	// go-github's GenerateOrgJITConfig/GenerateRepoJITConfig decode into its
	// v62 Runner, which lacks runner_group_id, ephemeral and version: the same
	// request goes through NewRequest/Do into ghRunner instead.
	path := scope.prefix() + "/actions/runners/generate-jitconfig"
	var out jitAnswer
	ctx1, rq := asInstallation(ctx, "generate_jit_config", in)
	_, err = c.do(ctx1, rq, http.MethodPost, path, body, &out)
	if errors.Is(err, ErrConflict) && rq.uncertain {
		// An earlier attempt of this very call created the runner, and its answer, the
		// only copy of that JIT config, was lost. Replace the orphan once.
		if rerr := c.deleteOrphan(ctx, in.id, scope, req.Name); rerr != nil {
			err = fmt.Errorf("%w (replacing the runner whose JIT config was lost: %w)", err, rerr)
		} else {
			ctx1, rq = asInstallation(ctx, "generate_jit_config", in)
			out = jitAnswer{}
			_, err = c.do(ctx1, rq, http.MethodPost, path, body, &out)
		}
	}
	if errors.Is(err, ErrNotFound) && scope.IsOrg() {
		c.forgetGroups(scope.Owner) // the group may be gone
	}
	if err != nil {
		return nil, fmt.Errorf("generating JIT config for %s: %w", scope, err)
	}
	if out.EncodedJITConfig == "" || out.Runner == nil {
		return nil, fmt.Errorf("generating JIT config for %s: answer has no encoded_jit_config", scope)
	}
	return &JITConfig{Runner: out.Runner.runner(), EncodedJITConfig: Secret(out.EncodedJITConfig)}, nil
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
	v, err := shared(ctx, &c.flights, "groups/"+key, mintTimeout, func(ctx context.Context) (any, error) {
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
	ctx, rq := asInstallation(ctx, "list_runner_groups", in)
	groups, err := readPages("runner groups of "+org, func(p int) ([]*gh.RunnerGroup, int, int, error) {
		opts := &gh.ListOrgRunnerGroupOptions{ListOptions: gh.ListOptions{PerPage: perPage, Page: p}}
		page, resp, err := c.gh.Actions.ListOrganizationRunnerGroups(ctx, seg(org), opts)
		if err != nil {
			return nil, 0, 0, fmt.Errorf("listing runner groups of %s: %w", org, callError(rq, err))
		}
		return page.RunnerGroups, page.TotalCount, resp.NextPage, nil
	})
	if err != nil {
		return nil, err
	}
	return convertAll(groups, groupFrom), nil
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
	v, err := shared(ctx, &c.flights, "regtoken/"+key, mintTimeout, func(ctx context.Context) (any, error) {
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
		ctx, rq := asInstallation(ctx, "create_registration_token", in)
		var tok *gh.RegistrationToken
		if scope.IsOrg() {
			tok, _, err = c.gh.Actions.CreateOrganizationRegistrationToken(ctx, seg(scope.Owner))
		} else {
			tok, _, err = c.gh.Actions.CreateRegistrationToken(ctx, seg(scope.Owner), seg(scope.Repo))
		}
		if err != nil {
			return nil, callError(rq, err)
		}
		if tok.GetToken() == "" {
			return nil, fmt.Errorf("github %s: answer has no token", rq.op)
		}
		t := RegistrationToken{Token: Secret(tok.GetToken()), ExpiresAt: tok.GetExpiresAt().Time}
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
	ctx, rq, err := c.scopeCall(ctx, inst, scope, "list_runners", "listing runners")
	if err != nil {
		return nil, err
	}
	q := url.Values{"per_page": {strconv.Itoa(perPage)}}
	if name != "" {
		q.Set("name", name)
	}
	runners, err := readPages("runners of "+scope.String(), func(p int) ([]*ghRunner, int, int, error) {
		if p > 0 {
			q.Set("page", strconv.Itoa(p))
		}
		// Actions.ListRunners/ListOrganizationRunners decode into go-github
		// v62's Runner, which lacks runner_group_id, ephemeral and version.
		var page struct {
			TotalCount int         `json:"total_count"`
			Runners    []*ghRunner `json:"runners"`
		}
		resp, err := c.do(ctx, rq, http.MethodGet, scope.prefix()+"/actions/runners?"+q.Encode(), nil, &page)
		if err != nil {
			return nil, 0, 0, fmt.Errorf("listing runners of %s: %w", scope, err)
		}
		return page.Runners, page.TotalCount, resp.NextPage, nil
	})
	if err != nil {
		return nil, err
	}
	return convertAll(runners, (*ghRunner).runner), nil
}

// scopeCall checks scope and returns ctx carrying call op, acting as the
// installation that reaches scope; doing names the call in the error of a
// failed lookup.
func (c *Client) scopeCall(ctx context.Context, inst int64, scope Scope, op, doing string) (context.Context, *call, error) {
	if err := scope.validate(); err != nil {
		return nil, nil, err
	}
	in, err := c.installFor(ctx, inst, scope.Owner, scope.Repo)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", doing, err)
	}
	ctx, rq := asInstallation(ctx, op, in)
	return ctx, rq, nil
}

// GetRunner returns one runner; an unknown id matches ErrNotFound.
func (c *Client) GetRunner(ctx context.Context, inst int64, scope Scope, id int64) (*Runner, error) {
	ctx, rq, err := c.scopeCall(ctx, inst, scope, "get_runner", "getting runner")
	if err != nil {
		return nil, err
	}
	var r ghRunner
	if _, err := c.do(ctx, rq, http.MethodGet, scope.prefix()+"/actions/runners/"+strconv.FormatInt(id, 10), nil, &r); err != nil {
		return nil, fmt.Errorf("getting runner %d of %s: %w", id, scope, err)
	}
	out := r.runner()
	return &out, nil
}

// DeleteRunner removes a runner. A runner already gone is not an error; a
// runner running a job gives an error matching ErrRunnerBusy (GitHub's 422),
// so the caller can leave it and try again after its job.
func (c *Client) DeleteRunner(ctx context.Context, inst int64, scope Scope, id int64) error {
	ctx, rq, err := c.scopeCall(ctx, inst, scope, "delete_runner", "deleting runner")
	if err != nil {
		return err
	}
	if scope.IsOrg() {
		_, err = c.gh.Actions.RemoveOrganizationRunner(ctx, seg(scope.Owner), id)
	} else {
		_, err = c.gh.Actions.RemoveRunner(ctx, seg(scope.Owner), seg(scope.Repo), id)
	}
	if err != nil {
		err = callError(rq, err)
	}
	switch {
	case err == nil, errors.Is(err, ErrNotFound):
		return nil
	case errors.Is(err, ErrValidation):
		return fmt.Errorf("deleting runner %d of %s: %w: %w", id, scope, ErrRunnerBusy, err)
	}
	return fmt.Errorf("deleting runner %d of %s: %w", id, scope, err)
}

// GetJob returns a workflow job (GET /repos/{owner}/{repo}/actions/jobs/{job_id}).
func (c *Client) GetJob(ctx context.Context, inst int64, owner, repo string, jobID int64) (*WorkflowJob, error) {
	in, err := c.installFor(ctx, inst, owner, repo)
	if err != nil {
		return nil, fmt.Errorf("getting job: %w", err)
	}
	ctx, rq := asInstallation(ctx, "get_job", in)
	j, _, err := c.gh.Actions.GetWorkflowJobByID(ctx, seg(owner), seg(repo), jobID)
	if err != nil {
		return nil, fmt.Errorf("getting job %d of %s/%s: %w", jobID, owner, repo, callError(rq, err))
	}
	return jobFrom(j), nil
}

// RunJobs lists the jobs of a workflow run's latest attempt (GET
// /repos/{owner}/{repo}/actions/runs/{run_id}/jobs), every page: how the
// scale-set listener finds the workflow job of a message whose jobId is
// the scale-set service's own opaque id.
func (c *Client) RunJobs(ctx context.Context, inst int64, owner, repo string, runID int64) ([]WorkflowJob, error) {
	in, err := c.installFor(ctx, inst, owner, repo)
	if err != nil {
		return nil, fmt.Errorf("listing run jobs: %w", err)
	}
	ctx, rq := asInstallation(ctx, "list_run_jobs", in)
	jobs, err := readPages("jobs of run "+strconv.FormatInt(runID, 10), func(p int) ([]*gh.WorkflowJob, int, int, error) {
		opts := &gh.ListWorkflowJobsOptions{Filter: "latest", ListOptions: gh.ListOptions{PerPage: perPage, Page: p}}
		page, resp, err := c.gh.Actions.ListWorkflowJobs(ctx, seg(owner), seg(repo), runID, opts)
		if err != nil {
			return nil, 0, 0, fmt.Errorf("listing jobs of run %d of %s/%s: %w", runID, owner, repo, callError(rq, err))
		}
		return page.Jobs, page.GetTotalCount(), resp.NextPage, nil
	})
	if err != nil {
		return nil, err
	}
	return convertAll(jobs, func(j *gh.WorkflowJob) WorkflowJob { return *jobFrom(j) }), nil
}

// GetWorkflowRun returns a workflow run, whose Event is the trigger the
// metrics record needs (GET /repos/{owner}/{repo}/actions/runs/{run_id}).
func (c *Client) GetWorkflowRun(ctx context.Context, inst int64, owner, repo string, runID int64) (*WorkflowRun, error) {
	in, err := c.installFor(ctx, inst, owner, repo)
	if err != nil {
		return nil, fmt.Errorf("getting workflow run: %w", err)
	}
	ctx, rq := asInstallation(ctx, "get_workflow_run", in)
	// Actions.GetWorkflowRunByID takes no query: exclude_pull_requests keeps
	// the answer small, and v62's WorkflowRun lacks path.
	var r ghWorkflowRun
	path := RepoScope(owner, repo).prefix() + "/actions/runs/" + strconv.FormatInt(runID, 10) + "?exclude_pull_requests=true"
	if _, err := c.do(ctx, rq, http.MethodGet, path, nil, &r); err != nil {
		return nil, fmt.Errorf("getting workflow run %d of %s/%s: %w", runID, owner, repo, err)
	}
	return r.run(), nil
}
