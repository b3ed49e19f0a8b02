package groups_test

import (
	"slices"
	"testing"

	"github.com/skiffci/skiff/pkg/allow"
	"github.com/skiffci/skiff/pkg/groups"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/pool/poolfile"
)

func parsePools(t *testing.T, yaml string) *pool.Config {
	t.Helper()
	cfg, err := poolfile.Parse([]byte(yaml), "pools.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

const wantPools = `
version: 1
pools:
  - name: cpu
    labels: [cpu]
    process: {}
  - name: oss
    labels: [oss]
    process: {}
    visibility: [public]
    forkPullRequests: collaborators
  - name: web
    labels: [web]
    process: {}
    scope: {repositories: [acme/site, other/x]}
  - name: deploy
    labels: [deploy]
    process: {}
    scope: {owners: [other]}
    workflows: [other/x/.github/workflows/deploy.yml@refs/heads/main]
  - name: gpu
    labels: [gpu]
    process: {}
    runnerGroup: gpu
`

func TestWant(t *testing.T) {
	t.Parallel()
	cfg := parsePools(t, wantPools)
	tests := []struct {
		name  string
		pool  string
		org   string
		allow []string
		ok    bool
		want  groups.Access
	}{
		{"the whole organization", "cpu", "acme", []string{"acme"}, true, groups.Access{Visibility: "all"}},
		{"any owner", "cpu", "Acme", []string{"*"}, true, groups.Access{Visibility: "all"}},
		{"named repositories", "cpu", "acme", []string{"Acme/App", "acme/site", "other/x"}, true,
			groups.Access{Visibility: "selected", Repositories: []string{"acme/app", "acme/site"}}},
		{"not allowed here", "cpu", "acme", []string{"other"}, false, groups.Access{}},
		{"public admitted", "oss", "acme", []string{"acme"}, true, groups.Access{Visibility: "all", AllowsPublic: true}},
		{"scope narrows the organization", "web", "acme", []string{"acme"}, true,
			groups.Access{Visibility: "selected", Repositories: []string{"acme/site"}}},
		{"scope and list meet", "web", "acme", []string{"acme/app", "acme/site"}, true,
			groups.Access{Visibility: "selected", Repositories: []string{"acme/site"}}},
		{"scope and list do not meet", "web", "acme", []string{"acme/app"}, false, groups.Access{}},
		{"outside the scope's owners", "deploy", "acme", []string{"*"}, false, groups.Access{}},
		{"workflows", "deploy", "other", []string{"*"}, true,
			groups.Access{Visibility: "all", Workflows: []string{"other/x/.github/workflows/deploy.yml@refs/heads/main"}}},
		{"the operator's group", "gpu", "acme", []string{"acme"}, false, groups.Access{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			list, err := allow.Parse(tt.allow)
			if err != nil {
				t.Fatal(err)
			}
			got, ok := groups.Want(cfg.Pool(tt.pool), tt.org, list)
			if ok != tt.ok || got.Visibility != tt.want.Visibility || got.AllowsPublic != tt.want.AllowsPublic ||
				!slices.Equal(got.Repositories, tt.want.Repositories) || !slices.Equal(got.Workflows, tt.want.Workflows) {
				t.Errorf("Want = %+v, %v; want %+v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}
