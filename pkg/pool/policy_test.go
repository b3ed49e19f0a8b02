package pool

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

func TestPolicyAdmit(t *testing.T) {
	t.Parallel()
	public := []Visibility{VisibilityPrivate, VisibilityInternal, VisibilityPublic}
	push := &Trigger{Event: "push"}
	fork := func(assoc string) *Trigger {
		return &Trigger{Event: "pull_request", Fork: true, AuthorAssociation: assoc}
	}
	tests := []struct {
		name   string
		policy Policy
		facts  Facts
		want   string // "" admits, else the reason
		detail string // substring of the error
	}{
		{"default: private push", Policy{}, Facts{Visibility: VisibilityPrivate, Trigger: push}, "", ""},
		{"default: internal push", Policy{}, Facts{Visibility: VisibilityInternal, Trigger: push}, "", ""},
		{"default: public refused", Policy{}, Facts{Visibility: VisibilityPublic, Trigger: push}, ReasonPublicRepository, "the repository is public"},
		{"default: unknown visibility counts as public", Policy{}, Facts{Visibility: "", Trigger: push}, ReasonPublicRepository, "counts as public"},
		{"default: odd visibility counts as public", Policy{}, Facts{Visibility: "secret", Trigger: push}, ReasonPublicRepository, "counts as public"},
		{"public allowed", Policy{Visibilities: public}, Facts{Visibility: VisibilityPublic, Trigger: push}, "", ""},
		{"private only refuses internal", Policy{Visibilities: []Visibility{VisibilityPrivate}}, Facts{Visibility: VisibilityInternal, Trigger: push}, ReasonPublicRepository, "admits private"},
		{"public repo checked before the fork", Policy{ForkPullRequests: ForkAllow}, Facts{Visibility: VisibilityPublic, Trigger: fork("NONE")}, ReasonPublicRepository, ""},
		{"default: fork refused", Policy{}, Facts{Visibility: VisibilityPrivate, Trigger: fork("MEMBER")}, ReasonForkPullRequest, "refuses forks"},
		{"default: same-repository pull request", Policy{}, Facts{Visibility: VisibilityPrivate, Trigger: &Trigger{Event: "pull_request"}}, "", ""},
		{"default: unknown trigger refused", Policy{}, Facts{Visibility: VisibilityPrivate}, ReasonForkPullRequest, "look the run up"},
		{"allow: fork admitted", Policy{ForkPullRequests: ForkAllow}, Facts{Visibility: VisibilityPrivate, Trigger: fork("NONE")}, "", ""},
		{"allow: unknown trigger admitted", Policy{ForkPullRequests: ForkAllow}, Facts{Visibility: VisibilityPrivate}, "", ""},
		{"collaborators: member", Policy{ForkPullRequests: ForkCollaborators}, Facts{Visibility: VisibilityPrivate, Trigger: fork("MEMBER")}, "", ""},
		{"collaborators: owner", Policy{ForkPullRequests: ForkCollaborators}, Facts{Visibility: VisibilityPrivate, Trigger: fork("OWNER")}, "", ""},
		{"collaborators: collaborator, lower case", Policy{ForkPullRequests: ForkCollaborators}, Facts{Visibility: VisibilityPrivate, Trigger: fork("collaborator")}, "", ""},
		{"collaborators: contributor refused", Policy{ForkPullRequests: ForkCollaborators}, Facts{Visibility: VisibilityPrivate, Trigger: fork("CONTRIBUTOR")}, ReasonForkPullRequest, "without write access (association CONTRIBUTOR)"},
		{"collaborators: first-time contributor refused", Policy{Visibilities: public, ForkPullRequests: ForkCollaborators}, Facts{Visibility: VisibilityPublic, Trigger: fork("FIRST_TIME_CONTRIBUTOR")}, ReasonForkPullRequest, "FIRST_TIME_CONTRIBUTOR"},
		{"collaborators: unknown association refused", Policy{ForkPullRequests: ForkCollaborators}, Facts{Visibility: VisibilityPrivate, Trigger: fork("")}, ReasonForkPullRequest, "association unknown"},
		{"collaborators: unknown trigger refused", Policy{ForkPullRequests: ForkCollaborators}, Facts{Visibility: VisibilityPrivate}, ReasonForkPullRequest, "unknown"},
		{"fork through pull_request_target", Policy{}, Facts{Visibility: VisibilityPrivate, Trigger: &Trigger{Event: "pull_request_target", Fork: true}}, ReasonForkPullRequest, "pull_request_target"},
		{"fork through a workflow_run chain", Policy{}, Facts{Visibility: VisibilityPrivate, Trigger: &Trigger{Event: "workflow_run", Fork: true}}, ReasonForkPullRequest, "workflow_run"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.policy.Admit(tc.facts)
			if got := Reason(err); got != tc.want {
				t.Fatalf("Admit = %v (reason %q), want reason %q", err, got, tc.want)
			}
			if err != nil && !strings.Contains(err.Error(), tc.detail) {
				t.Errorf("error %q does not say %q", err, tc.detail)
			}
			var re *ResolveError
			if err != nil && !errors.As(err, &re) {
				t.Errorf("error %T is not a *ResolveError", err)
			}
		})
	}
}

func TestPolicyNeedsTrigger(t *testing.T) {
	t.Parallel()
	for fp, want := range map[ForkPolicy]bool{"": true, ForkRefuse: true, ForkCollaborators: true, ForkAllow: false} {
		if got := (Policy{ForkPullRequests: fp}).NeedsTrigger(); got != want {
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
	cfg, err := Parse([]byte(pools), "policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		pool  string
		facts Facts
		want  string
	}{
		{"inherits", Facts{Visibility: VisibilityInternal, Trigger: &Trigger{Event: "push"}}, ReasonPublicRepository},
		{"inherits", Facts{Visibility: VisibilityPrivate, Trigger: &Trigger{Event: "push"}}, ""},
		{"open-source", Facts{Visibility: VisibilityPublic, Trigger: &Trigger{Event: "pull_request", Fork: true, AuthorAssociation: "NONE"}}, ReasonForkPullRequest},
		{"open-source", Facts{Visibility: VisibilityPublic, Trigger: &Trigger{Event: "pull_request", Fork: true, AuthorAssociation: "MEMBER"}}, ""},
		{"plain", Facts{Visibility: VisibilityPrivate, Trigger: &Trigger{Event: "pull_request", Fork: true}}, ""},
		{"no-such-pool", Facts{Visibility: VisibilityPublic}, ReasonPublicRepository},
	}
	for _, tc := range tests {
		err := cfg.Policy(tc.pool).Admit(tc.facts)
		if got := Reason(err); got != tc.want {
			t.Errorf("%s: Admit(%+v) = %v, want %q", tc.pool, tc.facts, err, tc.want)
		}
		if p := cfg.Pool(tc.pool); p != nil && Reason(p.Admit(tc.facts)) == tc.want && tc.want != "" &&
			!strings.Contains(p.Admit(tc.facts).Error(), "pool "+tc.pool) {
			t.Errorf("%s: Pool.Admit does not name the pool: %v", tc.pool, p.Admit(tc.facts))
		}
	}
	if r := cfg.Pool("burst").Registration; r != RegistrationToken {
		t.Errorf("burst registration = %q, want token", r)
	}
	if r := cfg.Pool("plain").Registration; r != RegistrationJIT {
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
		if _, err := Parse([]byte(doc), "bad.yaml"); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("Parse accepted %q: %v", strings.TrimSpace(bad), err)
		}
	}
}

func TestPublicForksWarning(t *testing.T) {
	t.Parallel()
	doc := head + "pools:\n  - name: a\n    labels: [a]\n    instanceTypes: [c7i.large]\n    visibility: [public]\n    forkPullRequests: allow\n"
	cfg, err := Parse([]byte(doc), "open.yaml")
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
	cfg, err := Parse([]byte(pools), "groups.yaml")
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
	if _, err := Parse([]byte(bad), "bad.yaml"); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("Parse accepted a workflow without a ref: %v", err)
	}
}
