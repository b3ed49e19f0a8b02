package ghsim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// Runner group visibilities, as GitHub names them.
const (
	// GroupAll admits every repository of the organization.
	GroupAll = "all"
	// GroupSelected admits the group's selected repositories.
	GroupSelected = "selected"
	// GroupPrivate admits the organization's private (and internal) repositories.
	GroupPrivate = "private"
)

// GroupAccess is what a runner group admits, as GitHub keeps it.
type GroupAccess struct {
	// Visibility is GroupAll, GroupSelected or GroupPrivate.
	Visibility string
	// Repositories are the selected repositories' ids (GroupSelected).
	Repositories []int64
	// AllowsPublic lets public repositories use the group's runners; GitHub's
	// default is false, also for the Default group.
	AllowsPublic bool
	// RestrictedToWorkflows limits the group to SelectedWorkflows: workflow
	// references "owner/repo/.github/workflows/file.yml@ref", where ref is a
	// branch (main or refs/heads/main), a tag or a full commit SHA.
	RestrictedToWorkflows bool
	SelectedWorkflows     []string
}

// admits is GitHub's check of a run against a runner group: its repository
// (public only where allowed; then all, private or the selected ones) and,
// where the group is restricted, its workflow.
func (g *simGroup) admits(run *simRun) bool {
	repo := run.repo
	if repo.visibility == VisibilityPublic && !g.AllowsPublic {
		return false
	}
	switch g.Visibility {
	case GroupAll:
	case GroupPrivate:
		if repo.visibility == VisibilityPublic {
			return false
		}
	case GroupSelected:
		if !slices.Contains(g.Repositories, repo.id) {
			return false
		}
	default:
		return false
	}
	if !g.RestrictedToWorkflows {
		return true
	}
	for _, w := range g.SelectedWorkflows {
		if workflowMatches(w, run) {
			return true
		}
	}
	return false
}

// workflowMatches reports whether a selected workflow reference names the
// run's workflow file at the run's branch or commit.
func workflowMatches(ref string, run *simRun) bool {
	file, at, ok := strings.Cut(ref, "@")
	if !ok || !strings.EqualFold(file, run.repo.fullName()+"/"+run.path) {
		return false
	}
	return at == run.branch || at == "refs/heads/"+run.branch || at == run.sha
}

// SetRunnerGroupAccess sets what an organization's runner group (by name,
// case-insensitive) admits.
func (s *Server) SetRunnerGroupAccess(org, group string, access GroupAccess) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.accounts[strings.ToLower(org)]
	if a == nil {
		return fmt.Errorf("setting runner group access: organization %q: %w", org, ErrUnknown)
	}
	for _, g := range a.groups {
		if strings.EqualFold(g.name, group) {
			g.GroupAccess = access
			s.dispatchLocked()
			return nil
		}
	}
	return fmt.Errorf("setting runner group access: group %q of %s: %w", group, org, ErrUnknown)
}

// RunnerGroupAccess returns what an organization's runner group (by name)
// admits, and false if there is no such group.
func (s *Server) RunnerGroupAccess(org, group string) (GroupAccess, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a := s.accounts[strings.ToLower(org)]; a != nil {
		for _, g := range a.groups {
			if strings.EqualFold(g.name, group) {
				out := g.GroupAccess
				out.Repositories = slices.Clone(g.Repositories)
				out.SelectedWorkflows = slices.Clone(g.SelectedWorkflows)
				return out, true
			}
		}
	}
	return GroupAccess{}, false
}

// SetIgnoreRunnerGroups turns the runner group check of dispatch off (true)
// or on (false, the default); see Options.IgnoreRunnerGroups. Turning it on
// again does not move a job that already started.
func (s *Server) SetIgnoreRunnerGroups(ignore bool) {
	s.mu.Lock()
	s.opts.IgnoreRunnerGroups = ignore
	s.dispatchLocked()
	s.mu.Unlock()
	s.pump()
}

func (s *Server) groupLocked(a *simAccount, id int64) *simGroup {
	for _, g := range a.groups {
		if g.id == id {
			return g
		}
	}
	return nil
}

// groupBody is a create or update body: the fields GitHub describes, each
// with the JSON type it must have.
type groupBody struct {
	Name          string
	Visibility    string
	RepositoryIDs []int64
	Runners       []int64
	AllowsPublic  bool
	Restricted    bool
	Workflows     []string
	has           map[string]bool
}

// decodeGroupBody reads a runner group's create or update body; malformed
// JSON is GitHub's 400, a field of the wrong type or an unknown visibility
// its 422.
func decodeGroupBody(c *call) (groupBody, bool) {
	var b groupBody
	has, ok := decodeBody(c, []bodyField{
		{"name", "string", &b.Name},
		{"visibility", "string", &b.Visibility},
		{"selected_repository_ids", "array", &b.RepositoryIDs},
		{"runners", "array", &b.Runners},
		{"allows_public_repositories", "boolean", &b.AllowsPublic},
		{"restricted_to_workflows", "boolean", &b.Restricted},
		{"selected_workflows", "array", &b.Workflows},
	})
	if !ok {
		return groupBody{}, false
	}
	b.has = has
	switch b.Visibility {
	case "", GroupAll, GroupSelected, GroupPrivate:
	default:
		invalid(c, fmt.Sprintf("For 'properties/visibility', %q is not one of selected, all or private.", b.Visibility))
		return groupBody{}, false
	}
	return b, true
}

// knownReposLocked reports whether every id is a repository of a.
func (s *Server) knownReposLocked(a *simAccount, ids []int64) bool {
	for _, id := range ids {
		found := false
		for _, r := range s.repos {
			found = found || r.id == id && r.owner == a
		}
		if !found {
			return false
		}
	}
	return true
}

func (s *Server) createRunnerGroup(c *call) {
	b, ok := decodeGroupBody(c)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	a, _, ok := s.scopeLocked(c)
	if !ok {
		return
	}
	switch {
	case b.Name == "":
		invalid(c, `"name" wasn't supplied.`)
		return
	case !s.knownReposLocked(a, b.RepositoryIDs):
		invalid(c, "selected_repository_ids: a repository was not found.")
		return
	}
	if nameTakenLocked(c, a, b.Name, nil) {
		return
	}
	access := GroupAccess{Visibility: def(b.Visibility, GroupAll), AllowsPublic: b.AllowsPublic,
		RestrictedToWorkflows: b.Restricted, SelectedWorkflows: b.Workflows}
	if access.Visibility == GroupSelected {
		access.Repositories = b.RepositoryIDs
	}
	g := s.addGroupLocked(a, b.Name, access)
	c.json(http.StatusCreated, s.groupJSON(a, g))
}

// nameTakenLocked answers GitHub's 409 when a group of a other than self
// has the name (names compare case-insensitively).
func nameTakenLocked(c *call, a *simAccount, name string, self *simGroup) bool {
	for _, g := range a.groups {
		if g != self && strings.EqualFold(g.name, name) {
			c.fail(http.StatusConflict, "Name has already been taken")
			return true
		}
	}
	return false
}

// groupOfPathLocked finds the path's organization and runner group,
// answering 404 for either unknown.
func (s *Server) groupOfPathLocked(c *call) (*simAccount, *simGroup, bool) {
	a, _, ok := s.scopeLocked(c)
	if !ok {
		return nil, nil, false
	}
	id, err := strconv.ParseInt(c.r.PathValue("runner_group_id"), 10, 64)
	g := s.groupLocked(a, id)
	if err != nil || g == nil {
		c.fail(http.StatusNotFound, "Not Found")
		return nil, nil, false
	}
	return a, g, true
}

func (s *Server) getRunnerGroup(c *call) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a, g, ok := s.groupOfPathLocked(c); ok {
		c.json(http.StatusOK, s.groupJSON(a, g))
	}
}

func (s *Server) updateRunnerGroup(c *call) {
	b, ok := decodeGroupBody(c)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	a, g, ok := s.groupOfPathLocked(c)
	if !ok {
		return
	}
	if !b.has["name"] || b.Name == "" {
		invalid(c, `"name" wasn't supplied.`)
		return
	}
	if nameTakenLocked(c, a, b.Name, g) {
		return
	}
	if g.id == 1 && !strings.EqualFold(b.Name, g.name) {
		invalid(c, "The default runner group cannot be renamed.")
		return
	}
	g.name = b.Name
	if b.Visibility != "" {
		g.Visibility = b.Visibility
	}
	if b.has["allows_public_repositories"] {
		g.AllowsPublic = b.AllowsPublic
	}
	if b.has["restricted_to_workflows"] {
		g.RestrictedToWorkflows = b.Restricted
	}
	if b.has["selected_workflows"] {
		g.SelectedWorkflows = b.Workflows
	}
	s.dispatchLocked()
	c.json(http.StatusOK, s.groupJSON(a, g))
}

func (s *Server) listGroupRepositories(c *call) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, g, ok := s.groupOfPathLocked(c)
	if !ok {
		return
	}
	n, out := s.repoPageLocked(c, func(r *simRepo) bool { return slices.Contains(g.Repositories, r.id) })
	c.json(http.StatusOK, obj{"total_count": n, "repositories": out})
}

// repoPageLocked answers a repository listing: of the repositories keep
// selects, by id, how many there are and the page c asks for.
func (s *Server) repoPageLocked(c *call, keep func(*simRepo) bool) (int, []obj) {
	var repos []*simRepo
	for _, r := range s.repos {
		if keep(r) {
			repos = append(repos, r)
		}
	}
	slices.SortFunc(repos, func(x, y *simRepo) int { return int(x.id - y.id) })
	return len(repos), pageOf(s, c, repos, s.repoJSON)
}

type repoIDsBody struct {
	IDs *[]int64 `json:"selected_repository_ids"`
}

func (s *Server) setGroupRepositories(c *call) {
	var b repoIDsBody
	if err := json.NewDecoder(c.r.Body).Decode(&b); err != nil {
		invalid(c, "Invalid input: the body is not an object with selected_repository_ids.")
		return
	}
	if b.IDs == nil {
		invalid(c, `"selected_repository_ids" wasn't supplied.`)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	a, g, ok := s.groupOfPathLocked(c)
	if !ok {
		return
	}
	if !s.knownReposLocked(a, *b.IDs) {
		invalid(c, "selected_repository_ids: a repository was not found.")
		return
	}
	g.Repositories = slices.Clone(*b.IDs)
	s.dispatchLocked()
	c.noContent()
}

// listInstallationRepositories lists the repositories of the token's
// installation: every repository of its account (the simulator's
// installations have repository_selection all).
func (s *Server) listInstallationRepositories(c *call) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, out := s.repoPageLocked(c, func(r *simRepo) bool { return r.owner == c.inst.account })
	c.json(http.StatusOK, obj{"total_count": n, "repository_selection": "all", "repositories": out})
}
