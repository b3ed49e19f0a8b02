package ghsim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

func (s *Server) createInstallationToken(c *call) {
	// The body is optional; when sent it is an object (repositories,
	// repository_ids, permissions), which the simulator accepts and ignores:
	// its tokens reach every repository of the installation.
	b, err := io.ReadAll(c.r.Body)
	if err != nil {
		c.fail(http.StatusBadRequest, "Problems parsing JSON")
		return
	}
	if len(bytes.TrimSpace(b)) > 0 {
		var body map[string]json.RawMessage
		if err := json.Unmarshal(b, &body); err != nil || body == nil {
			var syn *json.SyntaxError
			if errors.As(err, &syn) {
				c.fail(http.StatusBadRequest, "Problems parsing JSON")
			} else {
				invalid(c, "Invalid input: the body is not an object.")
			}
			return
		}
	}
	id, _ := strconv.ParseInt(c.r.PathValue("installation_id"), 10, 64)
	s.mu.Lock()
	defer s.mu.Unlock()
	in := s.installs[id]
	if in == nil || in.app != c.app {
		c.fail(http.StatusNotFound, "Not Found")
		return
	}
	if !in.suspendedAt.IsZero() {
		c.fail(http.StatusForbidden, "This installation has been suspended")
		return
	}
	now := s.now()
	t := &simToken{value: s.tokenLocked("ghs_", 36, alnum), inst: in, expires: now.Add(s.opts.TokenTTL).Truncate(time.Second)}
	s.tokens[t.value] = t
	in.minted++
	c.json(http.StatusCreated, obj{"token": t.value, "expires_at": ts(t.expires),
		"permissions": obj{"actions": "read", "administration": "write", "metadata": "read",
			"organization_self_hosted_runners": "write"},
		"repository_selection": "all"})
}

func (s *Server) getOrgInstallation(c *call) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.accounts[strings.ToLower(c.r.PathValue("org"))]
	s.answerInstallationLocked(c, a, a != nil && a.typ == "Organization")
}

func (s *Server) getRepoInstallation(c *call) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.repos[strings.ToLower(c.r.PathValue("owner")+"/"+c.r.PathValue("repo"))]
	if r == nil {
		c.fail(http.StatusNotFound, "Not Found")
		return
	}
	s.answerInstallationLocked(c, r.owner, true)
}

func (s *Server) answerInstallationLocked(c *call, a *simAccount, ok bool) {
	if ok {
		for _, in := range s.installs {
			if in.account == a && in.app == c.app {
				c.json(http.StatusOK, s.installationJSON(in))
				return
			}
		}
	}
	c.fail(http.StatusNotFound, "Not Found")
}

// scopeLocked resolves the {org} or {owner}/{repo} of a runner endpoint.
func (s *Server) scopeLocked(c *call) (*simAccount, *simRepo, bool) {
	if org := c.r.PathValue("org"); org != "" {
		a := s.accounts[strings.ToLower(org)]
		if a == nil || a.typ != "Organization" {
			c.fail(http.StatusNotFound, "Not Found")
			return nil, nil, false
		}
		return a, nil, true
	}
	r := s.repos[strings.ToLower(c.r.PathValue("owner")+"/"+c.r.PathValue("repo"))]
	if r == nil {
		c.fail(http.StatusNotFound, "Not Found")
		return nil, nil, false
	}
	return r.owner, r, true
}

// jitRequest is the body of generate-jitconfig as GitHub describes it:
// name, runner_group_id and labels required, work_folder optional.
type jitRequest struct {
	Name          string
	RunnerGroupID int64
	Labels        []string
	WorkFolder    string
	has           map[string]bool
}

// bodyField is one member of a request body as GitHub describes it: its
// name, its JSON type in the words of GitHub's 422 message, and where it
// decodes to.
type bodyField struct {
	name, typ string
	dst       any
}

// decodeBody reads a JSON object body into fields and returns which of
// them were present. Malformed JSON is GitHub's 400; a body that is not an
// object, or a field of the wrong type (null included), is its 422 naming
// the field.
func decodeBody(c *call, fields []bodyField) (map[string]bool, bool) {
	var raw map[string]json.RawMessage
	if err := json.NewDecoder(c.r.Body).Decode(&raw); err != nil || raw == nil {
		var syn *json.SyntaxError
		if errors.As(err, &syn) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			c.fail(http.StatusBadRequest, "Problems parsing JSON")
		} else {
			invalid(c, "Invalid input: the body is not an object.")
		}
		return nil, false
	}
	has := map[string]bool{}
	for _, f := range fields {
		v, ok := raw[f.name]
		if !ok {
			continue
		}
		if err := json.Unmarshal(v, f.dst); err != nil || string(v) == "null" {
			invalid(c, fmt.Sprintf("For 'properties/%s', %s is not %s.", f.name, v, article(f.typ)))
			return nil, false
		}
		has[f.name] = true
	}
	return has, true
}

// decodeJITRequest reads a generate-jitconfig body (decodeBody).
func decodeJITRequest(c *call) (jitRequest, bool) {
	var r jitRequest
	has, ok := decodeBody(c, []bodyField{
		{"name", "string", &r.Name},
		{"runner_group_id", "integer", &r.RunnerGroupID},
		{"labels", "array", &r.Labels},
		{"work_folder", "string", &r.WorkFolder},
	})
	r.has = has
	return r, ok
}

func article(typ string) string {
	if strings.IndexByte("aeiou", typ[0]) >= 0 {
		return "an " + typ
	}
	return "a " + typ
}

func (s *Server) generateJITConfig(c *call) {
	body, ok := decodeJITRequest(c)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	a, repo, ok := s.scopeLocked(c)
	if !ok {
		return
	}
	switch {
	case !body.has["name"] || body.Name == "":
		invalid(c, `"name" wasn't supplied.`)
		return
	case !body.has["runner_group_id"]:
		invalid(c, `"runner_group_id" wasn't supplied.`)
		return
	case len(body.Labels) == 0 || len(body.Labels) > 100:
		invalid(c, `"labels" must have between 1 and 100 items.`)
		return
	}
	found := false
	for _, g := range a.groups {
		found = found || g.id == body.RunnerGroupID
	}
	if !found && !(repo != nil && body.RunnerGroupID == 1) {
		c.fail(http.StatusNotFound, "Not Found")
		return
	}
	if s.runnerByNameLocked(a, repo, body.Name) != nil {
		c.fail(http.StatusConflict, fmt.Sprintf("Already exists - A runner with the name %s already exists.", body.Name))
		return
	}
	r := s.newRunnerLocked(a, repo, body.Name, body.RunnerGroupID, body.Labels)
	r.ephemeral, r.jit = true, true
	c.json(http.StatusCreated, obj{"runner": s.runnerJSON(r), "encoded_jit_config": s.encodeJITLocked(r)})
}

func invalid(c *call, msg string) {
	c.json(http.StatusUnprocessableEntity, obj{"message": "Invalid request.\n\n" + msg, "documentation_url": docsURL})
}

// pageOf is the page c asks for of items, each as render answers it; the
// Link header names the other pages.
func pageOf[T any](s *Server, c *call, items []T, render func(T) obj) []obj {
	lo, hi := s.page(c, len(items))
	out := make([]obj, 0, hi-lo)
	for _, it := range items[lo:hi] {
		out = append(out, render(it))
	}
	return out
}

// page applies per_page/page to n items and sets the Link header; it
// returns the slice bounds.
func (s *Server) page(c *call, n int) (int, int) {
	q := c.r.URL.Query()
	per, err := strconv.Atoi(q.Get("per_page"))
	if err != nil || per <= 0 {
		per = 30
	}
	per = min(per, 100)
	p, err := strconv.Atoi(q.Get("page"))
	if err != nil || p <= 0 {
		p = 1
	}
	lo, hi := min((p-1)*per, n), min(p*per, n)
	last := max((n+per-1)/per, 1)
	link := func(page int, rel string) string {
		v := url.Values{}
		for k, vs := range q {
			v[k] = vs
		}
		v.Set("per_page", strconv.Itoa(per))
		v.Set("page", strconv.Itoa(page))
		return fmt.Sprintf(`<%s%s?%s>; rel="%s"`, s.webBase, c.r.URL.Path, v.Encode(), rel)
	}
	var links []string
	if p < last {
		links = append(links, link(p+1, "next"), link(last, "last"))
	}
	if p > 1 {
		links = append(links, link(1, "first"), link(p-1, "prev"))
	}
	if len(links) > 0 {
		c.w.Header().Set("Link", strings.Join(links, ", "))
	}
	return lo, hi
}

func (s *Server) listRunnerGroups(c *call) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, _, ok := s.scopeLocked(c)
	if !ok {
		return
	}
	out := pageOf(s, c, a.groups, func(g *simGroup) obj { return s.groupJSON(a, g) })
	c.json(http.StatusOK, obj{"total_count": len(a.groups), "runner_groups": out})
}

func (s *Server) createRegToken(c *call) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, repo, ok := s.scopeLocked(c)
	if !ok {
		return
	}
	t := &simRegToken{value: s.tokenLocked("", 29, upper), account: a, repo: repo,
		expires: s.now().Add(time.Hour).Truncate(time.Second)}
	s.regTokens[t.value] = t
	c.json(http.StatusCreated, obj{"token": t.value, "expires_at": ts(t.expires)})
}

func (s *Server) scopedRunnersLocked(a *simAccount, repo *simRepo) []*simRunner {
	var out []*simRunner
	for _, r := range s.runners {
		if r.account == a && r.repo == repo {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

func (s *Server) listRunners(c *call) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, repo, ok := s.scopeLocked(c)
	if !ok {
		return
	}
	all := s.scopedRunnersLocked(a, repo)
	if name := c.r.URL.Query().Get("name"); name != "" {
		kept := all[:0]
		for _, r := range all {
			if r.name == name {
				kept = append(kept, r)
			}
		}
		all = kept
	}
	c.json(http.StatusOK, obj{"total_count": len(all), "runners": pageOf(s, c, all, s.runnerJSON)})
}

func (s *Server) runnerLocked(c *call) *simRunner {
	a, repo, ok := s.scopeLocked(c)
	if !ok {
		return nil
	}
	id, _ := strconv.ParseInt(c.r.PathValue("runner_id"), 10, 64)
	r := s.runners[id]
	if r == nil || r.account != a || r.repo != repo {
		c.fail(http.StatusNotFound, "Not Found")
		return nil
	}
	return r
}

func (s *Server) getRunner(c *call) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.runnerLocked(c); r != nil {
		c.json(http.StatusOK, s.runnerJSON(r))
	}
}

func (s *Server) deleteRunner(c *call) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.runnerLocked(c)
	if r == nil {
		return
	}
	if r.job != nil && !s.opts.DeleteBusy {
		c.json(http.StatusUnprocessableEntity, obj{
			"message":           fmt.Sprintf("Bad request - Runner %q is still running a job\"", r.name),
			"documentation_url": docsURL})
		return
	}
	delete(s.runners, r.id)
	for k, id := range s.jitSecrets {
		if id == r.id {
			delete(s.jitSecrets, k)
		}
	}
	c.noContent()
}

func (s *Server) getJob(c *call) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id, _ := strconv.ParseInt(c.r.PathValue("job_id"), 10, 64)
	j := s.jobs[id]
	if j == nil || !strings.EqualFold(j.run.repo.fullName(), c.r.PathValue("owner")+"/"+c.r.PathValue("repo")) {
		c.fail(http.StatusNotFound, "Not Found")
		return
	}
	c.json(http.StatusOK, s.jobJSON(j))
}

// listRunJobs lists a run's jobs (GET .../actions/runs/{run_id}/jobs):
// those of its latest attempt (filter=latest, GitHub's default), or of
// every attempt with filter=all; paginated.
func (s *Server) listRunJobs(c *call) {
	s.mu.Lock()
	defer s.mu.Unlock()
	run := s.pathRunLocked(c)
	if run == nil {
		return
	}
	all := c.r.URL.Query().Get("filter") == "all"
	var jobs []*simJob
	for _, j := range run.jobs {
		if all || j.attempt == run.attempt {
			jobs = append(jobs, j)
		}
	}
	c.json(http.StatusOK, obj{"total_count": len(jobs), "jobs": pageOf(s, c, jobs, s.jobJSON)})
}

func (s *Server) getWorkflowRun(c *call) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if run := s.pathRunLocked(c); run != nil {
		c.json(http.StatusOK, s.runJSON(run))
	}
}

// pathRunLocked is the run the path's owner, repo and run_id name, or nil
// after answering 404.
func (s *Server) pathRunLocked(c *call) *simRun {
	id, _ := strconv.ParseInt(c.r.PathValue("run_id"), 10, 64)
	run := s.runs[id]
	if run == nil || !strings.EqualFold(run.repo.fullName(), c.r.PathValue("owner")+"/"+c.r.PathValue("repo")) {
		c.fail(http.StatusNotFound, "Not Found")
		return nil
	}
	return run
}
