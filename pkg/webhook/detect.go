package webhook

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/store"
)

// MetricSecurityEvent counts the security events: a job skiff refuses that
// ran on one of skiff's runners. It is counted without a Reason dimension
// (the reason is in the log line and the record), so that one CloudWatch
// alarm watches a single metric.
const MetricSecurityEvent = "SecurityEvent"

// Reasons of a security event beyond the sender's (installation,
// forbidden) and the policy's (public_repository, fork_pull_request).
const (
	ReasonOutOfScope = "out_of_scope"
)

// detect is what the webhook learns from a job's in_progress or completed
// event: which runner ran it. GitHub, not skiff, gives a queued job to an
// idle runner: any runner whose labels cover the job's and whose runner
// group admits its repository. A job skiff refused (or would refuse) that
// ran on a skiff runner launched for another job is a security event —
// something no runner group expressed: logged with the job, repository,
// runner, pool and reason, recorded (store.SecurityEvents, once per job
// attempt) and counted (MetricSecurityEvent).
//
// The decision is admission run again for the job against the pool of the
// runner that ran it (the ledger's record): the installation and the
// allow-list, the pool's scope, its visibility policy and its fork policy
// (from the run record the webhook keeps; a run not recorded, or a fork
// whose author's permission the webhook cannot ask GitHub for, counts as
// refused: failing closed). A runner launched for this very job ran what
// scale-up admitted, and costs no read. detect never changes the delivery's
// answer: a failure to decide is logged, and the completed event decides
// again.
func (h *Handler) detect(ctx context.Context, log eventLog, p *workflowJobPayload) {
	wj := &p.WorkflowJob
	runner := str(wj.RunnerName)
	// A runner not named as this deployment's (names.RunnerName) is not
	// its own, and its jobs cost no ledger read.
	if !names.OwnRunner(h.o.Deployment, runner) || strings.HasPrefix(runner, names.RunnerPrefix(h.o.Deployment, wj.ID)) {
		return
	}
	rec, err := h.o.Runners.Runner(ctx, runner)
	if errors.Is(err, store.ErrNotFound) {
		return // not one of this deployment's runners
	}
	if err != nil {
		log.Warn("reading the ledger record of the job's runner failed; the job's next event checks it again", "runner", runner, "err", err)
		return
	}
	r := h.refusalOn(ctx, p, rec.Pool)
	if r.err != nil {
		log.Warn("could not check the job against its runner's pool; the job's next event checks it again", "runner", runner,
			"runner_pool", rec.Pool, "err", r.err)
		return
	}
	if r.reason == "" {
		return
	}
	now := h.o.Now()
	ev := store.SecurityEvent{JobID: wj.ID, RunID: wj.RunID, Attempt: wj.RunAttempt, Repository: p.Repository.FullName,
		Runner: runner, Pool: rec.Pool, Reason: r.reason, Detail: truncate(r.detail, maxDetail), At: now, ExpiresAt: now.Add(h.o.JobTTL)}
	recorded, err := h.o.SecurityEvents.RecordSecurityEvent(ctx, ev)
	if err != nil {
		log.Warn("recording the security event failed; logged and counted all the same", "err", err)
	} else if !recorded {
		return // a replay, or the in_progress event's
	}
	h.o.Counter.Count(MetricSecurityEvent, "")
	log.Error("SECURITY EVENT: a job skiff refuses ran on a skiff runner", "security_event", true, "job_id", wj.ID,
		"run_id", wj.RunID, "attempt", wj.RunAttempt, "repository", p.Repository.FullName, "runner", runner,
		"runner_pool", rec.Pool, "reason", r.reason, "detail", ev.Detail)
}

// refusalOn is the admission decision for the job against poolName: the
// zero refusal when the pool admits it.
func (h *Handler) refusalOn(ctx context.Context, p *workflowJobPayload, poolName string) refusal {
	if r := h.senderRefusal(ctx, p.Installation, p.Repository); r.reason != "" || r.err != nil {
		return r
	}
	if !h.o.Scopes.Scope(poolName).Admits(p.Repository.FullName) {
		return refusal{reason: ReasonOutOfScope, detail: fmt.Sprintf("the repository is outside pool %q's scope", poolName)}
	}
	policy := h.o.Policies.Policy(poolName)
	facts := pool.Facts{Visibility: visibilityOf(p.Repository)}
	if policy.NeedsTrigger() {
		run, err := h.o.Store.Run(ctx, p.WorkflowJob.RunID)
		switch {
		case errors.Is(err, store.ErrNotFound) || err == nil && run.Event == "":
			// Unknown trigger: Admit refuses it under a pool that refuses forks.
		case err != nil:
			return refusal{err: fmt.Errorf("reading the run's record: %w", err)}
		default:
			// The author's association is not in the record: a fork's job
			// under a collaborators pool is refused here (failing closed).
			facts.Trigger = &pool.Trigger{Event: run.Event, Fork: run.FromFork}
		}
	}
	if err := policy.Admit(facts); err != nil {
		return refusal{reason: pool.Reason(err), detail: err.Error()}
	}
	return refusal{}
}

// Scopes give each pool's scope: the repositories it admits. *pool.Config
// implements it.
type Scopes interface {
	Scope(pool string) pool.Scope
}

// unscoped gives every pool the empty scope (every repository).
type unscoped struct{}

func (unscoped) Scope(string) pool.Scope { return pool.Scope{} }
