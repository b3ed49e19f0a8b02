package pool_test

import (
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/pool/poolfile"
)

func TestPolicyAdmit(t *testing.T) {
	t.Parallel()
	public := []pool.Visibility{pool.VisibilityPrivate, pool.VisibilityInternal, pool.VisibilityPublic}
	push := &pool.Trigger{Event: "push"}
	fork := func(assoc string) *pool.Trigger {
		return &pool.Trigger{Event: "pull_request", Fork: true, AuthorAssociation: assoc}
	}
	tests := []struct {
		name   string
		policy pool.Policy
		facts  pool.Facts
		want   string // "" admits, else the reason
		detail string // substring of the error
	}{
		{"default: private push", pool.Policy{}, pool.Facts{Visibility: pool.VisibilityPrivate, Trigger: push}, "", ""},
		{"default: internal push", pool.Policy{}, pool.Facts{Visibility: pool.VisibilityInternal, Trigger: push}, "", ""},
		{"default: public refused", pool.Policy{}, pool.Facts{Visibility: pool.VisibilityPublic, Trigger: push}, pool.ReasonPublicRepository, "the repository is public"},
		{"default: unknown visibility counts as public", pool.Policy{}, pool.Facts{Visibility: "", Trigger: push}, pool.ReasonPublicRepository, "counts as public"},
		{"default: odd visibility counts as public", pool.Policy{}, pool.Facts{Visibility: "secret", Trigger: push}, pool.ReasonPublicRepository, "counts as public"},
		{"public allowed", pool.Policy{Visibilities: public}, pool.Facts{Visibility: pool.VisibilityPublic, Trigger: push}, "", ""},
		{"private only refuses internal", pool.Policy{Visibilities: []pool.Visibility{pool.VisibilityPrivate}}, pool.Facts{Visibility: pool.VisibilityInternal, Trigger: push}, pool.ReasonPublicRepository, "admits private"},
		{"public repo checked before the fork", pool.Policy{ForkPullRequests: pool.ForkAllow}, pool.Facts{Visibility: pool.VisibilityPublic, Trigger: fork("NONE")}, pool.ReasonPublicRepository, ""},
		{"default: fork refused", pool.Policy{}, pool.Facts{Visibility: pool.VisibilityPrivate, Trigger: fork("MEMBER")}, pool.ReasonForkPullRequest, "refuses forks"},
		{"default: same-repository pull request", pool.Policy{}, pool.Facts{Visibility: pool.VisibilityPrivate, Trigger: &pool.Trigger{Event: "pull_request"}}, "", ""},
		{"default: unknown trigger refused", pool.Policy{}, pool.Facts{Visibility: pool.VisibilityPrivate}, pool.ReasonForkPullRequest, "look the run up"},
		{"allow: fork admitted", pool.Policy{ForkPullRequests: pool.ForkAllow}, pool.Facts{Visibility: pool.VisibilityPrivate, Trigger: fork("NONE")}, "", ""},
		{"allow: unknown trigger admitted", pool.Policy{ForkPullRequests: pool.ForkAllow}, pool.Facts{Visibility: pool.VisibilityPrivate}, "", ""},
		{"collaborators: member", pool.Policy{ForkPullRequests: pool.ForkCollaborators}, pool.Facts{Visibility: pool.VisibilityPrivate, Trigger: fork("MEMBER")}, "", ""},
		{"collaborators: owner", pool.Policy{ForkPullRequests: pool.ForkCollaborators}, pool.Facts{Visibility: pool.VisibilityPrivate, Trigger: fork("OWNER")}, "", ""},
		{"collaborators: collaborator, lower case", pool.Policy{ForkPullRequests: pool.ForkCollaborators}, pool.Facts{Visibility: pool.VisibilityPrivate, Trigger: fork("collaborator")}, "", ""},
		{"collaborators: contributor refused", pool.Policy{ForkPullRequests: pool.ForkCollaborators}, pool.Facts{Visibility: pool.VisibilityPrivate, Trigger: fork("CONTRIBUTOR")}, pool.ReasonForkPullRequest, "without write access (association CONTRIBUTOR)"},
		{"collaborators: first-time contributor refused", pool.Policy{Visibilities: public, ForkPullRequests: pool.ForkCollaborators}, pool.Facts{Visibility: pool.VisibilityPublic, Trigger: fork("FIRST_TIME_CONTRIBUTOR")}, pool.ReasonForkPullRequest, "FIRST_TIME_CONTRIBUTOR"},
		{"collaborators: unknown association refused", pool.Policy{ForkPullRequests: pool.ForkCollaborators}, pool.Facts{Visibility: pool.VisibilityPrivate, Trigger: fork("")}, pool.ReasonForkPullRequest, "association unknown"},
		{"collaborators: unknown trigger refused", pool.Policy{ForkPullRequests: pool.ForkCollaborators}, pool.Facts{Visibility: pool.VisibilityPrivate}, pool.ReasonForkPullRequest, "unknown"},
		{"fork through pull_request_target", pool.Policy{}, pool.Facts{Visibility: pool.VisibilityPrivate, Trigger: &pool.Trigger{Event: "pull_request_target", Fork: true}}, pool.ReasonForkPullRequest, "pull_request_target"},
		{"fork through a workflow_run chain", pool.Policy{}, pool.Facts{Visibility: pool.VisibilityPrivate, Trigger: &pool.Trigger{Event: "workflow_run", Fork: true}}, pool.ReasonForkPullRequest, "workflow_run"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.policy.Admit(tc.facts)
			if got := pool.Reason(err); got != tc.want {
				t.Fatalf("Admit = %v (reason %q), want reason %q", err, got, tc.want)
			}
			if err != nil && !strings.Contains(err.Error(), tc.detail) {
				t.Errorf("error %q does not say %q", err, tc.detail)
			}
			var re *pool.ResolveError
			if err != nil && !errors.As(err, &re) {
				t.Errorf("error %T is not a *ResolveError", err)
			}
		})
	}
}

func TestPolicyNeedsTrigger(t *testing.T) {
	t.Parallel()
	for fp, want := range map[pool.ForkPolicy]bool{"": true, pool.ForkRefuse: true, pool.ForkCollaborators: true, pool.ForkAllow: false} {
		if got := (pool.Policy{ForkPullRequests: fp}).NeedsTrigger(); got != want {
			t.Errorf("NeedsTrigger(%q) = %v, want %v", fp, got, want)
		}
	}
}

func TestPolicyFromFile(t *testing.T) {
	t.Parallel()
	pools := head + `  visibility: [private]
pools:
  - name: inherits
    labels: [a]
    instanceTypes: [c7i.large]
  - name: open-source
    labels: [oss]
    instanceTypes: [c7i.large]
    visibility: [public, private, internal]
    forkPullRequests: collaborators
  - name: burst
    labels: [burst]
    instanceTypes: [c7i.large]
    registration: token
  - name: plain
    labels: [plain]
    instanceTypes: [c7i.large]
    visibility: [private, internal]
    forkPullRequests: allow
`
	cfg, err := poolfile.Parse([]byte(pools), "policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		pool  string
		facts pool.Facts
		want  string
	}{
		{"inherits", pool.Facts{Visibility: pool.VisibilityInternal, Trigger: &pool.Trigger{Event: "push"}}, pool.ReasonPublicRepository},
		{"inherits", pool.Facts{Visibility: pool.VisibilityPrivate, Trigger: &pool.Trigger{Event: "push"}}, ""},
		{"open-source", pool.Facts{Visibility: pool.VisibilityPublic, Trigger: &pool.Trigger{Event: "pull_request", Fork: true, AuthorAssociation: "NONE"}}, pool.ReasonForkPullRequest},
		{"open-source", pool.Facts{Visibility: pool.VisibilityPublic, Trigger: &pool.Trigger{Event: "pull_request", Fork: true, AuthorAssociation: "MEMBER"}}, ""},
		{"plain", pool.Facts{Visibility: pool.VisibilityPrivate, Trigger: &pool.Trigger{Event: "pull_request", Fork: true}}, ""},
		{"no-such-pool", pool.Facts{Visibility: pool.VisibilityPublic}, pool.ReasonPublicRepository},
	}
	for _, tc := range tests {
		err := cfg.Policy(tc.pool).Admit(tc.facts)
		if got := pool.Reason(err); got != tc.want {
			t.Errorf("%s: Admit(%+v) = %v, want %q", tc.pool, tc.facts, err, tc.want)
		}
		if p := cfg.Pool(tc.pool); p != nil && pool.Reason(p.Admit(tc.facts)) == tc.want && tc.want != "" &&
			!strings.Contains(p.Admit(tc.facts).Error(), "pool "+tc.pool) {
			t.Errorf("%s: Pool.Admit does not name the pool: %v", tc.pool, p.Admit(tc.facts))
		}
	}
	if r := cfg.Pool("burst").Registration; r != pool.RegistrationToken {
		t.Errorf("burst registration = %q, want token", r)
	}
	if r := cfg.Pool("plain").Registration; r != pool.RegistrationJIT {
		t.Errorf("plain registration = %q, want the jit default", r)
	}
	var warned []string
	for _, d := range cfg.Warnings {
		warned = append(warned, d.Message)
	}
	if all := strings.Join(warned, "\n"); !strings.Contains(all, `pool "burst" registers runners with an organisation-wide registration token`) {
		t.Errorf("no warning about the token registration mode:\n%s", all)
	}

	for _, bad := range []string{
		"    visibility: [everyone]\n",
		"    visibility: []\n",
		"    forkPullRequests: yes\n",
		"    registration: pat\n",
	} {
		doc := head + "pools:\n  - name: a\n    labels: [a]\n    instanceTypes: [c7i.large]\n" + bad
		if _, err := poolfile.Parse([]byte(doc), "bad.yaml"); !errors.Is(err, poolfile.ErrInvalidConfig) {
			t.Errorf("Parse accepted %q: %v", strings.TrimSpace(bad), err)
		}
	}
}

func TestPublicForksWarning(t *testing.T) {
	t.Parallel()
	doc := head + "pools:\n  - name: a\n    labels: [a]\n    instanceTypes: [c7i.large]\n    visibility: [public]\n    forkPullRequests: allow\n"
	cfg, err := poolfile.Parse([]byte(doc), "open.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Warnings) != 1 || !strings.Contains(cfg.Warnings[0].Message, "anyone on GitHub") || cfg.Warnings[0].Line != 10 {
		t.Errorf("warnings = %+v", cfg.Warnings)
	}
}

// TestDecisionsImportNoNetwork keeps the policy decision (and all of pool)
// free of the AWS SDK and net/http.
func TestDecisionsImportNoNetwork(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list unavailable: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if dep == "net/http" || strings.HasPrefix(dep, "github.com/aws/aws-sdk-go-v2") {
			t.Errorf("pkg/pool imports %s", dep)
		}
	}
}

// TestRunnerGroupsFromFile: a pool that names no runner group gets the
// group skiff keeps, with its workflows; workflows beside the operator's
// group warn; a workflow reference without a ref is refused.
func TestRunnerGroupsFromFile(t *testing.T) {
	t.Parallel()
	pools := head + `pools:
  - name: kept
    labels: [a]
    instanceTypes: [c7i.large]
    workflows: [acme/app/.github/workflows/deploy.yml@refs/heads/main]
  - name: theirs
    labels: [b]
    instanceTypes: [c7i.large]
    runnerGroup: Default
    workflows: [acme/app/.github/workflows/deploy.yml@main]
`
	cfg, err := poolfile.Parse([]byte(pools), "groups.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if p := cfg.Pool("kept"); p.RunnerGroup != "skiff-kept" || !p.KeptGroup || len(p.Workflows) != 1 {
		t.Errorf("kept = group %q kept %v workflows %v", p.RunnerGroup, p.KeptGroup, p.Workflows)
	}
	if p := cfg.Pool("theirs"); p.RunnerGroup != "Default" || p.KeptGroup {
		t.Errorf("theirs = group %q kept %v", p.RunnerGroup, p.KeptGroup)
	}
	var warned []string
	for _, d := range cfg.Warnings {
		warned = append(warned, d.Message)
	}
	if all := strings.Join(warned, "\n"); !strings.Contains(all, `workflows has no effect: pool "theirs"`) || strings.Contains(all, `pool "kept"`) {
		t.Errorf("warnings:\n%s", all)
	}
	bad := head + "pools:\n  - name: a\n    labels: [a]\n    instanceTypes: [c7i.large]\n    workflows: [acme/app/.github/workflows/ci.yml]\n"
	if _, err := poolfile.Parse([]byte(bad), "bad.yaml"); !errors.Is(err, poolfile.ErrInvalidConfig) {
		t.Errorf("Parse accepted a workflow without a ref: %v", err)
	}
}
