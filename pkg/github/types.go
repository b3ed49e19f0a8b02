package github

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	gh "github.com/google/go-github/v62/github"
)

// Secret holds a credential the client hands to its caller: a JIT runner
// configuration or a registration token. It prints, logs and marshals as
// "[REDACTED]"; Reveal returns the value, to be passed on to the runner only.
type Secret string

const redacted = "[REDACTED]"

// Reveal returns the secret value. Never log it.
func (s Secret) Reveal() string { return string(s) }

// String redacts the value (fmt's %v, %s, %q and %x use it).
func (s Secret) String() string { return redacted }

// GoString redacts the value for %#v.
func (s Secret) GoString() string { return redacted }

// LogValue redacts the value in log/slog output.
func (s Secret) LogValue() slog.Value { return slog.StringValue(redacted) }

// MarshalJSON redacts the value, so a Secret inside a logged or stored
// struct never leaks; store Reveal() explicitly where the value is needed.
func (s Secret) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }

// Scope is where self-hosted runners are registered: an organization
// (Repo empty) or a single repository.
type Scope struct {
	Owner string // organization login, or the repository's owner
	Repo  string // repository name; empty for an organization scope
}

// OrgScope is the organization-level runner scope.
func OrgScope(org string) Scope { return Scope{Owner: org} }

// RepoScope is the repository-level runner scope.
func RepoScope(owner, repo string) Scope { return Scope{Owner: owner, Repo: repo} }

// IsOrg reports whether the scope is an organization.
func (s Scope) IsOrg() bool { return s.Repo == "" }

// String is "org" or "owner/repo".
func (s Scope) String() string {
	if s.IsOrg() {
		return s.Owner
	}
	return s.Owner + "/" + s.Repo
}

func (s Scope) validate() error {
	if s.Owner == "" {
		return fmt.Errorf("github: scope has no owner")
	}
	return nil
}

// prefix is the escaped API path of the scope relative to the base URL, as
// go-github joins it: orgs/{org} or repos/{owner}/{repo}.
func (s Scope) prefix() string {
	if s.IsOrg() {
		return "orgs/" + seg(s.Owner)
	}
	return "repos/" + seg(s.Owner) + "/" + seg(s.Repo)
}

// RunnerLabel is one label of a self-hosted runner.
type RunnerLabel struct {
	ID   int64  `json:"id,omitempty"`
	Name string `json:"name"`
	Type string `json:"type,omitempty"` // "read-only" (os, arch, self-hosted) or "custom"
}

// Runner is a self-hosted runner as GitHub reports it.
type Runner struct {
	ID            int64         `json:"id"`
	Name          string        `json:"name"`
	OS            string        `json:"os"`
	Status        string        `json:"status"` // "online" or "offline"
	Busy          bool          `json:"busy"`
	Ephemeral     bool          `json:"ephemeral"`
	RunnerGroupID int64         `json:"runner_group_id"`
	Labels        []RunnerLabel `json:"labels"`
	Version       string        `json:"version"` // empty until the runner has connected once
}

// LabelNames returns the runner's label names in GitHub's order.
func (r Runner) LabelNames() []string {
	out := make([]string, len(r.Labels))
	for i, l := range r.Labels {
		out[i] = l.Name
	}
	return out
}

// JITRequest asks for a just-in-time runner configuration.
type JITRequest struct {
	Name          string   `json:"name"`            // unique within the scope
	RunnerGroupID int64    `json:"runner_group_id"` // required by GitHub (422 without); see Client.RunnerGroupID
	Labels        []string `json:"labels"`          // 1 to 100 custom labels
	WorkFolder    string   `json:"work_folder,omitempty"`
	// Pool is the skiff pool the runner is for; never sent. A caller that
	// registers some pools' runners elsewhere (a scale set) routes on it.
	Pool string `json:"-"`
}

func (r JITRequest) validate() error {
	switch {
	case r.Name == "":
		return fmt.Errorf("github: JIT request has no runner name")
	case r.RunnerGroupID <= 0:
		return fmt.Errorf("github: JIT request has no runner group id")
	case len(r.Labels) == 0 || len(r.Labels) > 100:
		return fmt.Errorf("github: JIT request needs 1 to 100 labels, has %d", len(r.Labels))
	}
	return nil
}

// JITConfig is a single-use runner configuration: pass EncodedJITConfig.Reveal()
// to `run.sh --jitconfig` on the runner host, and nowhere else.
type JITConfig struct {
	Runner           Runner
	EncodedJITConfig Secret
}

// RegistrationToken lets `config.sh --token` register runners until ExpiresAt
// (one hour). The client caches it per scope for the high-burst mode.
type RegistrationToken struct {
	Token     Secret
	ExpiresAt time.Time
}

// RunnerGroup is a self-hosted runner group of an organization.
type RunnerGroup struct {
	ID         int64  `json:"id"`
	Name       string `json:"name"`
	Visibility string `json:"visibility"` // all, selected or private
	Default    bool   `json:"default"`
	// AllowsPublic: public repositories may use the group's runners.
	AllowsPublic bool `json:"allows_public_repositories"`
	// RestrictedToWorkflows limits the group to SelectedWorkflows.
	RestrictedToWorkflows bool     `json:"restricted_to_workflows"`
	SelectedWorkflows     []string `json:"selected_workflows"`
}

// WorkflowJob is a workflow job (GET /repos/{owner}/{repo}/actions/jobs/{job_id}).
type WorkflowJob struct {
	ID              int64     `json:"id"`
	RunID           int64     `json:"run_id"`
	RunAttempt      int       `json:"run_attempt"`
	Name            string    `json:"name"`
	WorkflowName    string    `json:"workflow_name"`
	HeadBranch      string    `json:"head_branch"`
	HeadSHA         string    `json:"head_sha"`
	Status          string    `json:"status"`     // queued, in_progress, completed, waiting, requested, pending
	Conclusion      string    `json:"conclusion"` // empty until completed
	Labels          []string  `json:"labels"`
	RunnerID        int64     `json:"runner_id"`
	RunnerName      string    `json:"runner_name"`
	RunnerGroupID   int64     `json:"runner_group_id"`
	RunnerGroupName string    `json:"runner_group_name"`
	CreatedAt       time.Time `json:"created_at"`
	StartedAt       time.Time `json:"started_at"`
	CompletedAt     time.Time `json:"completed_at"` // zero until completed
	HTMLURL         string    `json:"html_url"`
}

// WorkflowRun is a workflow run (GET /repos/{owner}/{repo}/actions/runs/{run_id}).
type WorkflowRun struct {
	ID           int64     `json:"id"`
	Name         string    `json:"name"`
	DisplayTitle string    `json:"display_title"`
	Event        string    `json:"event"` // the event that triggered the run, e.g. push
	Status       string    `json:"status"`
	Conclusion   string    `json:"conclusion"`
	HeadBranch   string    `json:"head_branch"`
	HeadSHA      string    `json:"head_sha"`
	Path         string    `json:"path"`
	RunNumber    int       `json:"run_number"`
	RunAttempt   int       `json:"run_attempt"`
	WorkflowID   int64     `json:"workflow_id"`
	CreatedAt    time.Time `json:"created_at"`
	UpdatedAt    time.Time `json:"updated_at"`
	RunStartedAt time.Time `json:"run_started_at"`
	HTMLURL      string    `json:"html_url"`
	Repository   struct {
		FullName string `json:"full_name"`
		// Visibility is public, private or internal ("" when GitHub sent none).
		Visibility string `json:"visibility"`
	} `json:"repository"`
	// HeadRepository is where the run's code comes from: the repository
	// itself, or a fork of it (a pull request from a fork).
	HeadRepository struct {
		FullName string `json:"full_name"`
	} `json:"head_repository"`
	// TriggeringActor is the login of who started this attempt.
	TriggeringActor string `json:"triggering_actor"`
}

// The legacy permissions GitHub reports for a user on a repository
// (RepoPermission.Permission): the maintain role reads as write, triage as read.
const (
	PermissionAdmin = "admin"
	PermissionWrite = "write"
	PermissionRead  = "read"
	PermissionNone  = "none"
)

// RepoPermission is a user's permission on a repository
// (GET /repos/{owner}/{repo}/collaborators/{username}/permission).
type RepoPermission struct {
	User       string `json:"user"`       // the user's login
	Permission string `json:"permission"` // PermissionAdmin, PermissionWrite, PermissionRead or PermissionNone
	RoleName   string `json:"role_name"`  // the role: admin, maintain, write, triage, read or a custom role; "" when none
}

// CanWrite reports whether the user can push to the repository: the write,
// maintain or admin role (or a custom role based on one of them).
func (p RepoPermission) CanWrite() bool {
	return p.Permission == PermissionAdmin || p.Permission == PermissionWrite
}

// Installation is one App's installation on an account.
type Installation struct {
	ID         int64  // installation id
	AppID      int64  // the App it belongs to
	Account    string // login of the organization or user
	TargetType string // "Organization" or "User"
}

// HookDelivery is one delivery of the App's webhook (GET /app/hook/deliveries).
type HookDelivery struct {
	ID             int64     `json:"id"`
	GUID           string    `json:"guid"` // the X-GitHub-Delivery header, shared by redeliveries
	DeliveredAt    time.Time `json:"delivered_at"`
	Redelivery     bool      `json:"redelivery"`
	Duration       float64   `json:"duration"`
	Status         string    `json:"status"`
	StatusCode     int       `json:"status_code"`
	Event          string    `json:"event"`
	Action         string    `json:"action"`
	InstallationID int64     `json:"installation_id"`
	RepositoryID   int64     `json:"repository_id"`
}

// Failed reports whether GitHub classes the delivery as failed: a status code
// outside 200-399 (GitHub's own `status=failure` filter uses 400-599; a
// connection failure is recorded with a 5xx or 0 code).
func (d HookDelivery) Failed() bool { return d.StatusCode < 200 || d.StatusCode > 399 }

// DeliveryQuery filters ListHookDeliveries.
type DeliveryQuery struct {
	// Status is "failure", "success" or empty for all.
	Status string
	// Since stops the listing at the first delivery older than this time
	// (deliveries come newest first); zero lists everything GitHub keeps.
	Since time.Time
	// Limit stops after this many deliveries; zero means no limit.
	Limit int
}

func normalizeOwner(s string) string { return strings.ToLower(s) }

// ghRunner is go-github v62's Runner with the fields GitHub sends that v62
// does not declare (later majors do).
type ghRunner struct {
	gh.Runner
	RunnerGroupID *int64  `json:"runner_group_id,omitempty"`
	Ephemeral     *bool   `json:"ephemeral,omitempty"`
	Version       *string `json:"version,omitempty"`
}

func (r *ghRunner) runner() Runner {
	out := Runner{ID: r.GetID(), Name: r.GetName(), OS: r.GetOS(), Status: r.GetStatus(), Busy: r.GetBusy(),
		RunnerGroupID: ptrValue(r.RunnerGroupID), Ephemeral: ptrValue(r.Ephemeral), Version: ptrValue(r.Version)}
	for _, l := range r.Labels {
		out.Labels = append(out.Labels, RunnerLabel{ID: l.GetID(), Name: l.GetName(), Type: l.GetType()})
	}
	return out
}

// jitAnswer is the answer of generate-jitconfig (go-github's JITRunnerConfig
// with ghRunner).
type jitAnswer struct {
	Runner           *ghRunner `json:"runner"`
	EncodedJITConfig string    `json:"encoded_jit_config"`
}

// ghWorkflowRun is go-github v62's WorkflowRun with path, which v62 lacks.
type ghWorkflowRun struct {
	gh.WorkflowRun
	Path *string `json:"path,omitempty"`
}

func (r *ghWorkflowRun) run() *WorkflowRun {
	out := &WorkflowRun{ID: r.GetID(), Name: r.GetName(), DisplayTitle: r.GetDisplayTitle(), Event: r.GetEvent(),
		Status: r.GetStatus(), Conclusion: r.GetConclusion(), HeadBranch: r.GetHeadBranch(), HeadSHA: r.GetHeadSHA(),
		Path: ptrValue(r.Path), RunNumber: r.GetRunNumber(), RunAttempt: r.GetRunAttempt(), WorkflowID: r.GetWorkflowID(),
		CreatedAt: r.GetCreatedAt().Time, UpdatedAt: r.GetUpdatedAt().Time, RunStartedAt: r.GetRunStartedAt().Time,
		HTMLURL: r.GetHTMLURL()}
	out.Repository.FullName = r.GetRepository().GetFullName()
	out.Repository.Visibility = r.GetRepository().GetVisibility()
	out.HeadRepository.FullName = r.GetHeadRepository().GetFullName()
	out.TriggeringActor = r.GetTriggeringActor().GetLogin()
	return out
}

func jobFrom(j *gh.WorkflowJob) *WorkflowJob {
	return &WorkflowJob{ID: j.GetID(), RunID: j.GetRunID(), RunAttempt: int(j.GetRunAttempt()), Name: j.GetName(),
		WorkflowName: j.GetWorkflowName(), HeadBranch: j.GetHeadBranch(), HeadSHA: j.GetHeadSHA(),
		Status: j.GetStatus(), Conclusion: j.GetConclusion(), Labels: j.Labels, RunnerID: j.GetRunnerID(),
		RunnerName: j.GetRunnerName(), RunnerGroupID: j.GetRunnerGroupID(), RunnerGroupName: j.GetRunnerGroupName(),
		CreatedAt: j.GetCreatedAt().Time, StartedAt: j.GetStartedAt().Time, CompletedAt: j.GetCompletedAt().Time,
		HTMLURL: j.GetHTMLURL()}
}

func deliveryFrom(d *gh.HookDelivery) HookDelivery {
	return HookDelivery{ID: d.GetID(), GUID: d.GetGUID(), DeliveredAt: d.GetDeliveredAt().Time,
		Redelivery: d.GetRedelivery(), Duration: ptrValue(d.Duration), Status: d.GetStatus(), StatusCode: d.GetStatusCode(),
		Event: d.GetEvent(), Action: d.GetAction(), InstallationID: d.GetInstallationID(), RepositoryID: d.GetRepositoryID()}
}

func ptrValue[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
