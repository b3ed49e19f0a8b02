package github_test

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/github/internal/apispec"
)

// TestRunnerGroupCallsMatchGitHubSpec drives the runner group calls skiff
// makes to keep its groups, on github.com's paths and on a GHES base path,
// and validates each request and answer against GitHub's description.
func TestRunnerGroupCallsMatchGitHubSpec(t *testing.T) {
	t.Parallel()
	for _, base := range []string{"", "/api/v3"} {
		t.Run("base="+base, func(t *testing.T) {
			t.Parallel()
			sp := apispec.GitHub(t)
			opts, got := exchanges()
			opts.BasePath = base
			e := newEnv(t, envConfig{simOpts: opts})
			ctx := ctxT(t)
			c := e.client
			site := e.sim.AddRepo("acme", "site")
			repos, err := c.ListInstallationRepositories(ctx, e.inst, "acme")
			must(t, err)
			if len(repos) != 2 || repos[1].ID != site || repos[1].FullName != "acme/site" || repos[1].Visibility != "private" {
				t.Fatalf("installation repositories = %+v, want acme/app and acme/site (id %d)", repos, site)
			}
			wf := []string{"acme/site/.github/workflows/ci.yml@refs/heads/main"}
			g, err := c.CreateRunnerGroup(ctx, e.inst, "acme", "skiff-cpu", github.GroupSettings{Visibility: "selected",
				RepositoryIDs: []int64{site}, Workflows: wf})
			must(t, err)
			if g.Name != "skiff-cpu" || g.Visibility != "selected" || !g.RestrictedToWorkflows || !slices.Equal(g.SelectedWorkflows, wf) {
				t.Errorf("created group = %+v", g)
			}
			_, err = c.CreateRunnerGroup(ctx, e.inst, "acme", "skiff-cpu", github.GroupSettings{Visibility: "all"}) // 409
			if !errors.Is(err, github.ErrConflict) {
				t.Errorf("creating a group whose name is taken: %v, want ErrConflict", err)
			}
			ids, err := c.ListRunnerGroupRepositories(ctx, e.inst, "acme", g.ID)
			must(t, err)
			if !slices.Equal(ids, []int64{site}) {
				t.Errorf("group repositories = %v, want [%d]", ids, site)
			}
			u, err := c.UpdateRunnerGroup(ctx, e.inst, "acme", g.ID, "skiff-cpu", github.GroupSettings{Visibility: "all", AllowsPublic: true})
			must(t, err)
			if u.Visibility != "all" || !u.AllowsPublic || u.RestrictedToWorkflows || len(u.SelectedWorkflows) != 0 {
				t.Errorf("updated group = %+v, want all, public, no workflows", u)
			}
			_, err = c.UpdateRunnerGroup(ctx, e.inst, "acme", 999, "x", github.GroupSettings{Visibility: "all"}) // 404
			if !errors.Is(err, github.ErrNotFound) {
				t.Errorf("updating an unknown group: %v, want ErrNotFound", err)
			}
			must(t, c.SetRunnerGroupRepositories(ctx, e.inst, "acme", g.ID, nil))
			groups, err := c.ListRunnerGroups(ctx, e.inst, "acme")
			must(t, err)
			if len(groups) != 2 || groups[1].Name != "skiff-cpu" || !groups[1].AllowsPublic {
				t.Errorf("groups = %+v", groups)
			}
			if access, ok := e.sim.RunnerGroupAccess("acme", "skiff-cpu"); !ok || len(access.Repositories) != 0 || !access.AllowsPublic {
				t.Errorf("the simulator's group = %+v, %v", access, ok)
			}

			covered := map[string]bool{}
			for _, x := range got() {
				key := fmt.Sprintf("%s %d", x.Op, x.Status)
				covered[key] = true
				if err := sp.ValidateRequest(x.Op, x.Request); err != nil {
					t.Errorf("%s: request body does not match GitHub's description: %v\n%.300s", key, err, x.Request)
				}
				if err := validateAnswer(sp, x); err != nil {
					t.Errorf("%s: answer does not match GitHub's description: %v\n%.600s", key, err, x.Body)
				}
			}
			var missing []string
			for _, w := range []string{ghsim.OpListInstallationRepos + " 200", ghsim.OpCreateRunnerGroup + " 201",
				ghsim.OpCreateRunnerGroup + " 409", ghsim.OpListGroupRepos + " 200", ghsim.OpUpdateRunnerGroup + " 200",
				ghsim.OpUpdateRunnerGroup + " 404", ghsim.OpSetGroupRepos + " 204", ghsim.OpListRunnerGroups + " 200"} {
				if !covered[w] {
					missing = append(missing, w)
				}
			}
			sort.Strings(missing)
			if len(missing) > 0 {
				t.Errorf("answers never validated:\n%s", strings.Join(missing, "\n"))
			}
		})
	}
}
