package scaleup

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/skiffci/skiff/pkg/freshness"
	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/runnerversion"
	"github.com/skiffci/skiff/pkg/scaleup/decide"
)

// register creates the job's runner registration (not yet bound to an
// instance: the provider delivers it) or finishes the job with the reason
// it cannot have one.
func (s *Service) register(ctx context.Context, w *work) {
	// A job a listener has just acquired is known queued; the same
	// message delivered again may be stale (its job running elsewhere).
	justAcquired := w.job.Acquired && w.job.Waited == 0 && w.d.ReceiveCount <= 1
	if s.o.CheckQueued && !justAcquired && !s.stillQueued(ctx, w) {
		return
	}
	download, ok := s.runnerDownload(ctx, w)
	if !ok {
		return
	}
	owner, repo, _ := strings.Cut(w.job.Repository, "/")
	scope := github.OrgScope(owner)
	if s.o.Scope == ScopeRepo {
		scope = github.RepoScope(owner, repo)
	}
	name := s.runnerName(w.job.JobID, w.gen)
	var r provider.Registration
	// The pool chooses: a just-in-time configuration per runner (default:
	// one GitHub call per runner, usable for this registration's job only),
	// or the owner's cached registration token (about one call an hour, for
	// bursts beyond the JIT endpoint's budget; it can register any number of
	// runners, and a job on the instance can read it, hence opt-in per pool).
	switch w.spec.Registration {
	case pool.RegistrationToken:
		tok, err := s.o.GitHub.RegistrationToken(ctx, w.job.InstallationID, scope)
		if err != nil {
			s.githubFailure(w, "creating a registration token", err)
			return
		}
		r = provider.Registration{Mode: provider.ModeToken, Token: tok.Token.Reveal(), URL: s.o.GitHubURL + "/" + scope.String(),
			RunnerName: name, Labels: w.spec.Labels}
		if scope.IsOrg() {
			if w.spec.KeptGroup { // config.sh fails on a group that does not exist yet
				if _, err := s.groupID(ctx, w, owner); err != nil {
					s.githubFailure(w, "finding the runner group", err)
					return
				}
			}
			r.RunnerGroup = w.spec.RunnerGroup
		}
	default:
		group := int64(1) // repository runners are always in the default group
		if scope.IsOrg() {
			id, err := s.groupID(ctx, w, owner)
			if err != nil {
				s.githubFailure(w, "finding the runner group", err)
				return
			}
			group = id
		}
		cfg, err := s.o.GitHub.GenerateJITConfig(ctx, w.job.InstallationID, scope,
			github.JITRequest{Name: name, RunnerGroupID: group, Labels: w.spec.Labels, Pool: w.job.Pool})
		if err != nil {
			s.githubFailure(w, "generating the JIT configuration", err)
			return
		}
		r = provider.Registration{Mode: provider.ModeJIT, JITConfig: cfg.EncodedJITConfig.Reveal(), RunnerName: name, RunnerID: cfg.Runner.ID}
	}
	r.RunnerVersion, r.RunnerSHA256 = download.Version, download.SHA256
	// Check the contract now, before launching.
	if err := r.Validate(); err != nil {
		s.o.Counter.Count(MetricSkipped, "invalid_registration")
		w.log.Error("the job's registration breaks the boot script's contract", "err", err)
		w.finish(decide.OutcomePermanent, "invalid_registration")
		return
	}
	w.reg = r
}

// groupID finds the id of the job's runner group in org. A group skiff
// keeps that does not exist yet (the pool's first job in the
// organization, or before the reconciler's first pass) is created by the
// keeper, once, and looked up again: the only path on which scale-up
// touches runner groups.
func (s *Service) groupID(ctx context.Context, w *work, org string) (int64, error) {
	id, err := s.o.GitHub.RunnerGroupID(ctx, w.job.InstallationID, org, w.spec.RunnerGroup)
	if !errors.Is(err, github.ErrNotFound) || !w.spec.KeptGroup {
		return id, err
	}
	if kerr := s.o.Groups.Ensure(ctx, org); kerr != nil {
		return 0, fmt.Errorf("%w (keeping the runner groups of %s: %w)", err, org, kerr)
	}
	return s.o.GitHub.RunnerGroupID(ctx, w.job.InstallationID, org, w.spec.RunnerGroup)
}

// githubFailure finishes a job whose registration failed: rate limits and
// server errors are retried; a refusal the configuration must fix (a runner
// group that does not exist, a missing permission or installation, invalid
// labels) is dead-lettered at once.
func (s *Service) githubFailure(w *work, what string, err error) {
	var reason string
	outcome := decide.OutcomeRetry
	switch {
	case errors.Is(err, github.ErrRateLimited):
		reason = "github_rate_limited"
	case errors.Is(err, github.ErrConflict):
		reason = "github_conflict"
	case errors.Is(err, github.ErrNotFound), errors.Is(err, github.ErrForbidden),
		errors.Is(err, github.ErrNotInstalled), errors.Is(err, github.ErrValidation):
		reason, outcome = "github_refused", decide.OutcomePermanent
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		reason = "timeout"
	default:
		reason = "github"
	}
	w.log.Error(what, "err", err, "reason", reason)
	w.finish(outcome, reason)
}

// runnerDownload is the runner the job's registration names for a boot
// that must download one, or, when GitHub refuses the pool's runners
// (a hold), finishes the job as a dead letter naming the fix: a launch
// would only start another runner GitHub refuses. Without a release list
// the registration names no runner (the boot uses its image's, or the user
// data's pin), and a failed read of the holds launches: both fail open.
func (s *Service) runnerDownload(ctx context.Context, w *work) (runnerversion.Download, bool) {
	ctx = freshness.WithInstallation(ctx, w.job.InstallationID)
	d, err := s.o.Runners.Download(ctx, w.spec.Shared)
	switch {
	case errors.Is(err, freshness.ErrNoSource): // GitHub Enterprise Server: pools pin or bake, by design
		d = runnerversion.Download{}
	case err != nil:
		s.o.Counter.Count(MetricRunnerUnresolved, w.spec.Pool)
		w.log.Warn("no runner version to hand the boot; it uses its image's runner or the user data's pin", "err", err)
		d = runnerversion.Download{}
	}
	h, err := s.o.Runners.Held(ctx, w.spec.Pool, d)
	if err != nil {
		w.log.Warn("could not read the pool's hold; launching", "err", err)
		return d, true
	}
	if h != nil {
		s.o.Counter.Count(MetricSkipped, freshness.ReasonOutdated)
		w.log.Error("not launching: GitHub refuses the pool's runner version", "held_version", h.Version, "fix", h.Detail)
		w.finish(decide.OutcomePermanent, freshness.ReasonOutdated)
		w.detail = h.Detail
		return d, false
	}
	return d, true
}
