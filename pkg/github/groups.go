package github

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	gh "github.com/google/go-github/v62/github"
)

// GroupSettings is what a runner group admits, as skiff sets it
// (POST and PATCH /orgs/{org}/actions/runner-groups[/{id}]).
type GroupSettings struct {
	// Visibility is "all" (every repository of the organization) or
	// "selected" (RepositoryIDs).
	Visibility string
	// RepositoryIDs are the selected repositories (Visibility "selected");
	// set on creation, and by SetRunnerGroupRepositories.
	RepositoryIDs []int64
	// AllowsPublic lets public repositories use the group's runners.
	AllowsPublic bool
	// Workflows, if any, restrict the group to these workflow references
	// ("owner/repo/.github/workflows/file.yml@ref").
	Workflows []string
}

// groupRequest is the body of the runner group create and update calls.
// go-github v62's request types omit an empty selected_workflows, which
// an update that lifts a restriction must send.
type groupRequest struct {
	Name         string   `json:"name"`
	Visibility   string   `json:"visibility"`
	RepoIDs      []int64  `json:"selected_repository_ids,omitempty"`
	AllowsPublic bool     `json:"allows_public_repositories"`
	Restricted   bool     `json:"restricted_to_workflows"`
	Workflows    []string `json:"selected_workflows"`
}

func newGroupRequest(name string, s GroupSettings) groupRequest {
	wf := s.Workflows
	if wf == nil {
		wf = []string{}
	}
	return groupRequest{Name: name, Visibility: s.Visibility, AllowsPublic: s.AllowsPublic,
		Restricted: len(s.Workflows) > 0, Workflows: wf}
}

func groupFrom(g *gh.RunnerGroup) RunnerGroup {
	return RunnerGroup{ID: g.GetID(), Name: g.GetName(), Visibility: g.GetVisibility(), Default: g.GetDefault(),
		AllowsPublic: g.GetAllowsPublicRepositories(), RestrictedToWorkflows: g.GetRestrictedToWorkflows(),
		SelectedWorkflows: g.SelectedWorkflows}
}

// CreateRunnerGroup creates a runner group in an organization
// (POST /orgs/{org}/actions/runner-groups). A name already taken gives an
// error matching ErrConflict.
func (c *Client) CreateRunnerGroup(ctx context.Context, inst int64, org, name string, s GroupSettings) (RunnerGroup, error) {
	in, err := c.installFor(ctx, inst, org, "")
	if err != nil {
		return RunnerGroup{}, fmt.Errorf("creating runner group: %w", err)
	}
	ctx, rq := asInstallation(ctx, "create_runner_group", in)
	body := newGroupRequest(name, s)
	if s.Visibility == "selected" {
		body.RepoIDs = s.RepositoryIDs
	}
	var out gh.RunnerGroup
	if _, err := c.do(ctx, rq, http.MethodPost, "orgs/"+seg(org)+"/actions/runner-groups", body, &out); err != nil {
		return RunnerGroup{}, fmt.Errorf("creating runner group %q in %s: %w", name, org, err)
	}
	// The new group goes straight into the id cache: a lookup right after
	// (scale-up's, once the keeper created its group) must not join a
	// listing that started before the group existed.
	g := groupFrom(&out)
	c.mu.Lock()
	c.groups[normalizeOwner(org)+"/"+strings.ToLower(g.Name)] = groupEntry{id: g.ID, fetched: c.now()}
	c.mu.Unlock()
	return g, nil
}

// UpdateRunnerGroup sets a runner group's name, visibility, public flag and
// workflows (PATCH /orgs/{org}/actions/runner-groups/{runner_group_id});
// its selected repositories are set by SetRunnerGroupRepositories.
func (c *Client) UpdateRunnerGroup(ctx context.Context, inst int64, org string, id int64, name string, s GroupSettings) (RunnerGroup, error) {
	in, err := c.installFor(ctx, inst, org, "")
	if err != nil {
		return RunnerGroup{}, fmt.Errorf("updating runner group: %w", err)
	}
	ctx, rq := asInstallation(ctx, "update_runner_group", in)
	var out gh.RunnerGroup
	path := "orgs/" + seg(org) + "/actions/runner-groups/" + strconv.FormatInt(id, 10)
	if _, err := c.do(ctx, rq, http.MethodPatch, path, newGroupRequest(name, s), &out); err != nil {
		return RunnerGroup{}, fmt.Errorf("updating runner group %d of %s: %w", id, org, err)
	}
	return groupFrom(&out), nil
}

// SetRunnerGroupRepositories replaces the selected repositories of a runner
// group (PUT /orgs/{org}/actions/runner-groups/{runner_group_id}/repositories).
func (c *Client) SetRunnerGroupRepositories(ctx context.Context, inst int64, org string, id int64, repoIDs []int64) error {
	in, err := c.installFor(ctx, inst, org, "")
	if err != nil {
		return fmt.Errorf("setting runner group repositories: %w", err)
	}
	ctx, rq := asInstallation(ctx, "set_runner_group_repositories", in)
	if repoIDs == nil {
		repoIDs = []int64{}
	}
	_, err = c.gh.Actions.SetRepositoryAccessRunnerGroup(ctx, seg(org), id, gh.SetRepoAccessRunnerGroupRequest{SelectedRepositoryIDs: repoIDs})
	if err != nil {
		return fmt.Errorf("setting the repositories of runner group %d of %s: %w", id, org, callError(rq, err))
	}
	return nil
}

// ListRunnerGroupRepositories lists the ids of a runner group's selected
// repositories (all pages).
func (c *Client) ListRunnerGroupRepositories(ctx context.Context, inst int64, org string, id int64) ([]int64, error) {
	in, err := c.installFor(ctx, inst, org, "")
	if err != nil {
		return nil, fmt.Errorf("listing runner group repositories: %w", err)
	}
	ctx, rq := asInstallation(ctx, "list_runner_group_repositories", in)
	repos, err := allRepositories(rq, fmt.Sprintf("repositories of runner group %d of %s", id, org),
		func(opts *gh.ListOptions) (*gh.ListRepositories, *gh.Response, error) {
			return c.gh.Actions.ListRepositoryAccessRunnerGroup(ctx, seg(org), id, opts)
		})
	if err != nil {
		return nil, err
	}
	return convertAll(repos, (*gh.Repository).GetID), nil
}

// InstallationRepository is a repository an installation can reach.
type InstallationRepository struct {
	ID         int64
	FullName   string // owner/name
	Visibility string // public, private or internal
}

// ListInstallationRepositories lists the repositories of the installation
// of owner (GET /installation/repositories, all pages): the names an
// allow-list gives, with the ids a runner group takes.
func (c *Client) ListInstallationRepositories(ctx context.Context, inst int64, owner string) ([]InstallationRepository, error) {
	in, err := c.installFor(ctx, inst, owner, "")
	if err != nil {
		return nil, fmt.Errorf("listing installation repositories: %w", err)
	}
	ctx, rq := asInstallation(ctx, "list_installation_repositories", in)
	repos, err := allRepositories(rq, "repositories of the installation of "+owner,
		func(opts *gh.ListOptions) (*gh.ListRepositories, *gh.Response, error) {
			return c.gh.Apps.ListRepos(ctx, opts)
		})
	if err != nil {
		return nil, err
	}
	return convertAll(repos, func(r *gh.Repository) InstallationRepository {
		return InstallationRepository{ID: r.GetID(), FullName: r.GetFullName(), Visibility: r.GetVisibility()}
	}), nil
}

// allRepositories reads every page of the repository listing what (its
// pages asked for by list, under rq), each repository once.
func allRepositories(rq *call, what string, list func(*gh.ListOptions) (*gh.ListRepositories, *gh.Response, error)) ([]*gh.Repository, error) {
	return readPages(what, func(p int) ([]*gh.Repository, int, int, error) {
		page, resp, err := list(&gh.ListOptions{PerPage: perPage, Page: p})
		if err != nil {
			return nil, 0, 0, fmt.Errorf("listing the %s: %w", what, callError(rq, err))
		}
		return page.Repositories, page.GetTotalCount(), resp.NextPage, nil
	})
}
