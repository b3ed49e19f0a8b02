package pool

import (
	"fmt"
	"strings"
)

// Visibility is a repository's visibility as GitHub reports it.
type Visibility string

// The visibilities GitHub knows. An unknown visibility is treated as public.
const (
	VisibilityPublic   Visibility = "public"
	VisibilityPrivate  Visibility = "private"
	VisibilityInternal Visibility = "internal"
)

// ForkPolicy says whether a pool runs jobs of pull requests from forks.
type ForkPolicy string

// The fork policies a pool can have.
const (
	// ForkRefuse refuses every job whose run comes from a fork (the default).
	ForkRefuse ForkPolicy = "refuse"
	// ForkAllow runs jobs from forks like any other.
	ForkAllow ForkPolicy = "allow"
	// ForkCollaborators runs jobs from forks only when the pull request's
	// author has write access (author association OWNER, MEMBER or COLLABORATOR).
	ForkCollaborators ForkPolicy = "collaborators"
)

// RegistrationMode is how a pool's runners register with GitHub.
type RegistrationMode string

// The registration modes a pool can have.
const (
	// RegistrationJIT gives each runner a just-in-time configuration that
	// registers exactly one runner for one job (the default).
	RegistrationJIT RegistrationMode = "jit"
	// RegistrationToken gives each runner a registration token, which can
	// register any number of runners in the organisation until it expires:
	// a job on such a runner can read it. Opt-in per pool.
	RegistrationToken RegistrationMode = "token"
)

// JobSource is where a pool learns of its queued jobs.
type JobSource string

// The job sources a pool can have.
const (
	// JobsWebhook: GitHub's workflow_job webhooks (the default; the only
	// source of an AWS deployment and of a pool with the dynamic label).
	JobsWebhook JobSource = "webhook"
	// JobsListener: `skiff local` long-polls a runner scale set of the
	// pool's static labels, outbound only (docs/listener.md).
	JobsListener JobSource = "listener"
)

// Defaults of the policy on who may run, each with its reason.
var (
	// DefaultVisibilities admit private and internal repositories only:
	// anyone can open a pull request against a public repository, and GitHub
	// advises against self-hosted runners for them.
	DefaultVisibilities = []Visibility{VisibilityPrivate, VisibilityInternal}
)

const (
	// DefaultForkPullRequests refuses forks: a fork's pull request runs the
	// author's code on the instance, inside the operator's VPC.
	DefaultForkPullRequests = ForkRefuse
	// DefaultRegistration is JIT: the credential on the instance can register
	// only the runner it is for.
	DefaultRegistration = RegistrationJIT
)

// Policy is a pool's rule for who may run on it. The zero Policy is the
// default: private and internal repositories, no forks.
type Policy struct {
	// Visibilities are the repository visibilities admitted; empty means
	// DefaultVisibilities.
	Visibilities []Visibility
	// ForkPullRequests is the fork policy; empty means DefaultForkPullRequests.
	ForkPullRequests ForkPolicy
}

// DefaultPolicy is the policy of a pool that sets none, and what callers use
// for a pool they cannot find: it fails closed.
var DefaultPolicy = Policy{}

// Trigger is what is known about the workflow run a job belongs to: the
// workflow_run webhook's fields, or one API call when it has not arrived.
type Trigger struct {
	// Event is the event that started the run (push, pull_request,
	// pull_request_target, workflow_run, ...).
	Event string
	// Fork reports that the run's head repository is not the repository
	// itself: the code comes from a fork.
	Fork bool
	// AuthorAssociation is GitHub's author_association of the pull request's
	// author (OWNER, MEMBER, COLLABORATOR, CONTRIBUTOR, FIRST_TIME_CONTRIBUTOR,
	// FIRST_TIMER, MANNEQUIN, NONE), or "" when unknown. A caller that checks
	// the author's permission instead passes COLLABORATOR for write, maintain
	// or admin, and NONE otherwise.
	AuthorAssociation string
}

// Facts are the neutral facts a decision on who may run is made from.
type Facts struct {
	// Visibility is the repository's visibility; "" (unknown) counts as public.
	Visibility Visibility
	// Trigger describes the run, or is nil when it is not known yet.
	Trigger *Trigger
}

// visibilities returns the admitted visibilities with the default applied.
func (p Policy) visibilities() []Visibility {
	if len(p.Visibilities) == 0 {
		return DefaultVisibilities
	}
	return p.Visibilities
}

// forks returns the fork policy with the default applied.
func (p Policy) forks() ForkPolicy {
	if p.ForkPullRequests == "" {
		return DefaultForkPullRequests
	}
	return p.ForkPullRequests
}

// AllowsPublic reports whether the policy admits public repositories.
func (p Policy) AllowsPublic() bool {
	for _, v := range p.visibilities() {
		if v == VisibilityPublic {
			return true
		}
	}
	return false
}

// NeedsTrigger reports whether Admit needs the run's Trigger to admit a
// job: true unless the pool allows forks. A caller without the trigger
// looks it up (the stored workflow_run, or GitHub's API) before deciding.
func (p Policy) NeedsTrigger() bool { return p.forks() != ForkAllow }

// AdmitVisibility decides on the repository's visibility alone: nil, or a
// *ResolveError wrapping ErrPublicRepository. An unknown visibility is
// treated as public. It is what the webhook can decide from workflow_job.
func (p Policy) AdmitVisibility(v Visibility) error {
	effective := v
	switch v {
	case VisibilityPrivate, VisibilityInternal, VisibilityPublic:
	default:
		effective = VisibilityPublic
	}
	for _, allowed := range p.visibilities() {
		if allowed == effective {
			return nil
		}
	}
	detail := fmt.Sprintf("the repository is %s; the pool admits %s", effective, joinVisibilities(p.visibilities()))
	if effective != v {
		detail = fmt.Sprintf("the repository's visibility %q is unknown and counts as public; the pool admits %s", v, joinVisibilities(p.visibilities()))
	}
	return &ResolveError{Kind: ErrPublicRepository, Detail: detail}
}

// Admit decides whether a job with these facts may run under the policy:
// nil, or a *ResolveError wrapping ErrPublicRepository or ErrForkPullRequest
// (Reason gives public_repository or fork_pull_request). It is a pure
// function. A nil Trigger is admitted only when the pool allows forks: it
// fails closed, so a caller checks NeedsTrigger and looks the run up first.
func (p Policy) Admit(f Facts) error {
	if err := p.AdmitVisibility(f.Visibility); err != nil {
		return err
	}
	switch fp := p.forks(); {
	case fp == ForkAllow:
		return nil
	case f.Trigger == nil:
		return &ResolveError{Kind: ErrForkPullRequest,
			Detail: "the run's trigger is unknown and the pool refuses forks (" + string(fp) + "): look the run up first"}
	case !f.Trigger.Fork:
		return nil
	case fp == ForkCollaborators && HasWriteAccess(f.Trigger.AuthorAssociation):
		return nil
	case fp == ForkCollaborators:
		assoc := f.Trigger.AuthorAssociation
		if assoc == "" {
			assoc = "unknown"
		}
		return &ResolveError{Kind: ErrForkPullRequest,
			Detail: fmt.Sprintf("%s from a fork by an author without write access (association %s); the pool admits forks of collaborators only", eventOrRun(f.Trigger.Event), assoc)}
	default:
		return &ResolveError{Kind: ErrForkPullRequest,
			Detail: fmt.Sprintf("%s from a fork; the pool refuses forks", eventOrRun(f.Trigger.Event))}
	}
}

// HasWriteAccess reports whether an author association implies write
// access to the repository: OWNER, MEMBER or COLLABORATOR (any case).
func HasWriteAccess(association string) bool {
	switch strings.ToUpper(association) {
	case "OWNER", "MEMBER", "COLLABORATOR":
		return true
	}
	return false
}

// Admit is Policy.Admit for this pool, naming the pool in the error.
func (p *Pool) Admit(f Facts) error { return withPool(p.Policy.Admit(f), p.Name) }

// Policy returns the policy of the named pool, or DefaultPolicy when there
// is no such pool (failing closed).
func (c *Config) Policy(pool string) Policy {
	if p := c.Pool(pool); p != nil {
		return p.Policy
	}
	return DefaultPolicy
}

// NeedsForkApproval reports whether the policy admits public repositories
// and refuses some pull requests from forks. No runner group can express
// that — a fork's pull request runs in its base repository, which the
// group admits — so GitHub may give a refused fork's job to the pool's
// runners; what closes it is GitHub's approval of fork pull request
// workflows from all external contributors, a setting skiff cannot read.
func (p Policy) NeedsForkApproval() bool { return p.AllowsPublic() && p.forks() != ForkAllow }

// Scope returns the scope of the named pool: empty (every repository)
// when there is no such pool, whose policy is then DefaultPolicy.
func (c *Config) Scope(pool string) Scope {
	if p := c.Pool(pool); p != nil {
		return p.Scope
	}
	return Scope{}
}

func withPool(err error, pool string) error {
	if re, ok := err.(*ResolveError); ok && re.Pool == "" {
		re.Pool = pool
	}
	return err
}

func eventOrRun(event string) string {
	if event == "" {
		return "a run"
	}
	return "a " + event + " run"
}

func joinVisibilities(vs []Visibility) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = string(v)
	}
	return strings.Join(parts, ", ")
}

// String describes the policy for skiff plan, e.g. "private, internal
// repositories; forks refused".
func (p Policy) String() string {
	forks := map[ForkPolicy]string{
		ForkRefuse:        "pull requests from forks refused",
		ForkAllow:         "pull requests from forks allowed",
		ForkCollaborators: "pull requests from forks only by authors with write access",
	}[p.forks()]
	return joinVisibilities(p.visibilities()) + " repositories; " + forks
}
