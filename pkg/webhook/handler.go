// Package webhook receives GitHub's workflow_job and workflow_run webhooks:
// it verifies them, routes queued jobs to a pool and enqueues them, and
// records every job's lifecycle in the store. It answers in well under a
// millisecond of its own time, so GitHub's 10-second delivery timeout is
// never at risk.
//
// What each delivery gets:
//
//	body over the limit               413
//	bad, missing or sha1-only signature 401
//	no X-GitHub-Event / X-GitHub-Delivery, bad JSON, missing fields,
//	names, ids or labels past GitHub's rules and skiff's bounds,
//	a job the queue refuses as invalid (too large)  400
//	installation not listed, not      403 (logged)
//	recorded, deleted or suspended
//	owner or repository not allowed   403 (logged)
//	installation created/deleted/     record the installation's status
//	suspend/unsuspend                 (store.Installations); 200
//	ping                              200
//	other events and actions          202 ignored
//	labels that route to no pool      202, reason logged and counted
//	public repository, pool refuses   202, reason logged and counted
//	workflow_job queued               enqueue one message and record the job,
//	                                  at once; 200
//	workflow_job waiting/in_progress/completed  record lifecycle and the
//	                                  job's runner step (one write), 200
//	a job already recorded at this    200 duplicate: its record only fills
//	status or later (a replayed or    what it lacked; a queued one is
//	late delivery)                    enqueued again and scale-up's job
//	                                  claim launches nothing for it
//	workflow_run                      record run id → trigger event, head
//	                                  repository, fork, actor; 200
//	queue or store failed             503, so GitHub marks the delivery
//	                                  failed and it can be redelivered
//
// Response bodies never carry an internal error.
//
// Dedupe and AWS calls per event. GitHub delivers at least once and may
// redeliver; every write the handler makes merges, so a repeated delivery
// changes nothing, and no delivery id is kept:
//
//	queued        SQS SendMessage ∥ the job record's conditional write
//	              (one round trip); a replay enqueues the job again, and
//	              scale-up claims each job id once, never launching for a
//	              job already started
//	in_progress,  the job record and the runner's ledger record in one
//	completed     write (store.LifecycleRecorder; DynamoDB: one
//	              TransactWriteItems), both only moving forward
//	waiting       the job record's conditional write
//	workflow_run  the run record's conditional write (a later attempt wins)
package webhook

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/skiffci/skiff/pkg/allow"
	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/queue"
	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/telemetry"
)

// Defaults for Options, each with the reason for its value.
const (
	// DefaultMaxBodyBytes bounds a request body. GitHub's published
	// workflow_job payloads are 7–12 KB and workflow_run 17–20 KB; 1 MiB
	// leaves room for long commit messages in workflow_run while bounding
	// the memory one request can take (Function URLs stop at 6 MB anyway).
	DefaultMaxBodyBytes = 1 << 20
	// DefaultJobTTL is how long job and run records are kept: long enough
	// for scale-down to reconcile and write metrics, and for an operator to
	// look back over two weeks of jobs. Metrics records are the long-term
	// history. The job record is also the webhook's dedupe, so it must
	// outlive GitHub's redelivery window (7 days at most).
	DefaultJobTTL = 14 * 24 * time.Hour
	// DefaultInstallationCacheTTL is how long a container trusts an
	// installation record it read, so that the hot path reads the store
	// about once a minute per installation. The container that receives an
	// installation event updates its own copy at once; another may serve a
	// just-suspended installation for up to this long (GitHub sends no
	// workflow events for a deleted or suspended installation anyway).
	DefaultInstallationCacheTTL = time.Minute
	// DefaultSecretRefreshEvery bounds how often a signature failure makes
	// the handler read the webhook secret again (Options.RefreshSecrets):
	// the setup page and a rotation change it without a cold start, and a
	// flood of badly signed requests costs one read a minute.
	DefaultSecretRefreshEvery = time.Minute
)

// Metric names counted by the handler (telemetry.Counter), with Reason
// dimensions drawn from a small fixed set.
const (
	MetricAccepted  = "WebhookAccepted"
	MetricIgnored   = "WebhookIgnored"
	MetricRejected  = "WebhookRejected"
	MetricUnmatched = "WebhookUnmatched"
	MetricDuplicate = "WebhookDuplicate"
	MetricFailed    = "WebhookFailed"
)

// Router maps a job's runs-on labels to the pool that serves it. An error
// means the job is not skiff's to launch; if it has a Reason() string
// method, that is the reason counted (e.g. "no_pool", "out_of_bounds").
type Router interface {
	Route(labels []string, repository string) (pool string, err error)
}

// RouterFunc adapts a function to Router.
type RouterFunc func(labels []string, repository string) (string, error)

// Route implements Router.
func (f RouterFunc) Route(labels []string, repository string) (string, error) {
	return f(labels, repository)
}

// Policies give each pool's policy on who may run. *pool.Config
// implements it; a pool it does not know gets pool.DefaultPolicy.
type Policies interface {
	Policy(pool string) pool.Policy
}

// PoliciesFunc adapts a function to Policies.
type PoliciesFunc func(pool string) pool.Policy

// Policy implements Policies.
func (f PoliciesFunc) Policy(name string) pool.Policy { return f(name) }

// defaultPolicies gives every pool the default policy: private and internal
// repositories only, no forks.
var defaultPolicies = PoliciesFunc(func(string) pool.Policy { return pool.DefaultPolicy })

// Options configure a Handler. Secrets, Router, Queue and Store are required.
type Options struct {
	Secrets [][]byte // accepted webhook secrets, current first
	Router  Router
	Queue   queue.Sender
	Store   Jobs
	Runners Runners // the runner ledger: jobs started and completed on skiff's runners
	// Lifecycle writes a lifecycle event's job record and runner step
	// together; default: RecordJob on Store, then Advance on Runners.
	Lifecycle store.LifecycleRecorder
	Policies  Policies // default: pool.DefaultPolicy for every pool
	Scopes    Scopes   // default: every pool admits every repository
	// SecurityEvents records the security events detect finds, once per
	// job attempt (default store.DiscardSecurityEvents: logged and counted
	// at every event that shows one).
	SecurityEvents SecurityEvents
	Counter        telemetry.Counter // default telemetry.Discard
	Logger         *slog.Logger      // default slog.Default()
	Now            func() time.Time  // default time.Now
	Allow          allow.List        // the zero List refuses everyone
	// Installations is the optional pin (SKIFF_ALLOWED_INSTALLATIONS): ids,
	// or "*". Empty, only installations Recorded as active are served.
	Installations InstallationList
	// Recorded keeps the installations learnt from the installation
	// webhook. A deleted or suspended installation is refused even when
	// pinned. Nil: the pin alone decides (the zero pin refuses everyone).
	Recorded Installations
	// InstallationCacheTTL defaults to DefaultInstallationCacheTTL.
	InstallationCacheTTL time.Duration
	// RefreshSecrets, if set, reads the accepted webhook secrets again; it
	// is called when a signature fails to verify, at most every
	// SecretRefreshEvery (default DefaultSecretRefreshEvery).
	RefreshSecrets     func(ctx context.Context) ([][]byte, error)
	SecretRefreshEvery time.Duration
	MaxBodyBytes       int           // default DefaultMaxBodyBytes
	JobTTL             time.Duration // default DefaultJobTTL
	// Deployment is the deployment id its runners' names carry
	// (names.RunnerName): a job that ran on one of them is checked again
	// against that runner's pool (detect).
	Deployment string
}

// Handler handles webhook deliveries. It is safe for concurrent use.
type Handler struct {
	o        Options
	verifier atomic.Pointer[github.WebhookVerifier]

	refreshMu   sync.Mutex
	refreshedAt time.Time

	instMu sync.Mutex
	insts  map[int64]cachedInstallation

	workers *workers
}

type cachedInstallation struct {
	rec store.Installation
	at  time.Time
}

// New returns a Handler, or an error naming what is missing. It fails
// closed: without a webhook secret there is no handler.
func New(o Options) (*Handler, error) {
	v, err := github.NewWebhookVerifier(o.Secrets)
	if err != nil {
		return nil, fmt.Errorf("creating webhook handler: %w", err)
	}
	switch {
	case o.Router == nil:
		return nil, errors.New("creating webhook handler: no router")
	case o.Queue == nil:
		return nil, errors.New("creating webhook handler: no queue")
	case o.Store == nil:
		return nil, errors.New("creating webhook handler: no store")
	case o.Runners == nil:
		return nil, errors.New("creating webhook handler: no runner ledger")
	}
	telemetry.FillDefaults(&o.Counter, &o.Logger, &o.Now)
	if o.Policies == nil {
		o.Policies = defaultPolicies
	}
	if o.Scopes == nil {
		o.Scopes = unscoped{}
	}
	if o.SecurityEvents == nil {
		o.SecurityEvents = store.DiscardSecurityEvents
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.JobTTL <= 0 {
		o.JobTTL = DefaultJobTTL
	}
	if o.Lifecycle == nil {
		o.Lifecycle = separateWrites{store: o.Store, runners: o.Runners}
	}
	if o.InstallationCacheTTL <= 0 {
		o.InstallationCacheTTL = DefaultInstallationCacheTTL
	}
	if o.SecretRefreshEvery <= 0 {
		o.SecretRefreshEvery = DefaultSecretRefreshEvery
	}
	o.Secrets = nil // the verifier holds its own copies
	h := &Handler{o: o, insts: map[int64]cachedInstallation{}, refreshedAt: o.Now(), workers: newWorkers()}
	h.verifier.Store(v)
	return h, nil
}

// verify checks the signature; on a failure it reads the secrets again
// (RefreshSecrets, at most every SecretRefreshEvery) and checks once more,
// so that a secret written by the setup page or a rotation is taken up
// without a cold start.
func (h *Handler) verify(ctx context.Context, log eventLog, sig string, body []byte) error {
	err := h.verifier.Load().Verify(sig, body)
	if err == nil || h.o.RefreshSecrets == nil {
		return err
	}
	h.refreshMu.Lock()
	defer h.refreshMu.Unlock()
	if v := h.verifier.Load(); v.Verify(sig, body) == nil {
		return nil // another delivery refreshed meanwhile
	}
	now := h.o.Now()
	if now.Sub(h.refreshedAt) < h.o.SecretRefreshEvery {
		return err
	}
	h.refreshedAt = now
	secrets, rerr := h.o.RefreshSecrets(ctx)
	if rerr != nil {
		log.Warn("reading the webhook secret again failed", "err", rerr)
		return err
	}
	v, verr := github.NewWebhookVerifier(secrets)
	if verr != nil {
		log.Warn("the webhook secret read again is unusable", "err", verr)
		return err
	}
	h.verifier.Store(v)
	log.Info("webhook secret read again after a signature failure")
	return v.Verify(sig, body)
}

// MaxBodyBytes is the largest body the handler accepts.
func (h *Handler) MaxBodyBytes() int { return h.o.MaxBodyBytes }

// Request is one webhook delivery: the headers skiff reads and the raw body.
type Request struct {
	Event     string // X-GitHub-Event
	Delivery  string // X-GitHub-Delivery
	Signature string // X-Hub-Signature-256
	SHA1Only  bool   // X-Hub-Signature present without X-Hub-Signature-256
	Body      []byte
	Oversize  bool // the transport stopped reading a body over the limit
}

// Response is what the handler answers: a status code and a short JSON body.
type Response struct {
	Status int
	Body   string
}

func reply(status int, outcome string) Response {
	return Response{Status: status, Body: `{"result":"` + outcome + `"}`}
}

// Handle processes one delivery. It never panics on bad input and never
// returns an internal error to the caller.
func (h *Handler) Handle(ctx context.Context, req Request) Response {
	received := h.o.Now()
	log := newEventLog(h.o.Logger, "delivery_id", req.Delivery, "event", req.Event)

	if req.Oversize || len(req.Body) > h.o.MaxBodyBytes {
		return h.reject(log, http.StatusRequestEntityTooLarge, "too_large", "body over limit", slog.Int("bytes", len(req.Body)))
	}
	if req.Signature == "" && req.SHA1Only {
		return h.reject(log, http.StatusUnauthorized, "signature", github.ErrSHA1Only.Error())
	}
	if err := h.verify(ctx, log, req.Signature, req.Body); err != nil {
		return h.reject(log, http.StatusUnauthorized, "signature", err.Error())
	}
	if req.Event == "" || req.Delivery == "" {
		return h.reject(log, http.StatusBadRequest, "missing_header", "X-GitHub-Event and X-GitHub-Delivery are required")
	}

	switch req.Event {
	case "ping":
		h.o.Counter.Count(MetricAccepted, "")
		log.Info("ping answered")
		return reply(http.StatusOK, "pong")
	case "workflow_job":
		return h.workflowJob(ctx, log, req, received)
	case "workflow_run":
		return h.workflowRun(ctx, log, req, received)
	case "installation":
		return h.installationEvent(ctx, log, req, received)
	}
	return h.ignore(log, "event", "event not handled")
}

func (h *Handler) workflowJob(ctx context.Context, log eventLog, req Request, received time.Time) Response {
	p, err := parseWorkflowJob(req.Body)
	if err != nil {
		return h.reject(log, http.StatusBadRequest, "malformed", err.Error())
	}
	wj := &p.WorkflowJob
	log = log.With("action", p.Action, "job_id", wj.ID, "run_id", wj.RunID, "repository", p.Repository.FullName)
	status, ok := store.ParseStatus(p.Action)
	if !ok {
		return h.ignore(log, "action", "workflow_job action not handled")
	}
	if status == store.StatusInProgress || status == store.StatusCompleted {
		h.detect(ctx, log, p)
	}
	if resp, refused := h.admitSender(ctx, log, p.Installation, p.Repository); refused {
		return resp
	}
	owner := p.Repository.owner()
	pool, err := h.o.Router.Route(wj.Labels, p.Repository.FullName)
	if err == nil {
		err = h.o.Policies.Policy(pool).AdmitVisibility(visibilityOf(p.Repository))
	}
	if err != nil {
		if status != store.StatusQueued {
			// Lifecycle of a job skiff does not serve (GitHub-hosted, another
			// set of self-hosted runners, or one its pool refused when it was queued).
			return h.ignore(log, "not_ours", "job not served by skiff: "+truncate(err.Error(), maxDetail))
		}
		reason := reasonOf(err)
		h.o.Counter.Count(MetricUnmatched, reason)
		log.Info("job not launched", "labels", labelsForLog(wj.Labels), "label_count", len(wj.Labels),
			"pool", pool, "reason", reason, "err", truncate(err.Error(), maxDetail))
		return reply(http.StatusAccepted, "unmatched")
	}
	log = log.With("pool", pool)

	var installation int64
	if p.Installation != nil {
		installation = p.Installation.ID
	}
	rec := store.JobRecord{
		ID: wj.ID, RunID: wj.RunID, Attempt: wj.RunAttempt,
		Repository: p.Repository.FullName, Owner: owner, InstallationID: installation,
		Status: status, Labels: wj.Labels, Pool: pool,
		WorkflowName: str(wj.WorkflowName), JobName: wj.Name, Branch: str(wj.HeadBranch),
		QueuedAt:  tm(wj.CreatedAt),
		UpdatedAt: received, ExpiresAt: received.Add(h.o.JobTTL),
	}
	switch status {
	case store.StatusInProgress:
		rec.StartedAt = tm(wj.StartedAt)
		rec.RunnerName, rec.RunnerID = str(wj.RunnerName), i64(wj.RunnerID)
	case store.StatusCompleted:
		rec.StartedAt, rec.CompletedAt = tm(wj.StartedAt), tm(wj.CompletedAt)
		rec.RunnerName, rec.RunnerID = str(wj.RunnerName), i64(wj.RunnerID)
		rec.Conclusion = str(wj.Conclusion)
	}
	if status != store.StatusQueued {
		return h.lifecycle(ctx, log, rec)
	}
	job := queue.Job{
		JobID: wj.ID, RunID: wj.RunID, Attempt: wj.RunAttempt,
		Repository: p.Repository.FullName, Owner: owner, InstallationID: installation,
		Labels: wj.Labels, Pool: pool, Visibility: string(visibilityOf(p.Repository)), DeliveryID: req.Delivery,
		ReceivedAt: received,
	}
	return h.queued(ctx, log, job, rec)
}

// queued enqueues a queued job and records it, both at once: one round
// trip of wall time. The enqueue decides the answer: a failed one is a 503,
// so that GitHub's redelivery enqueues it again. The record does not: the
// job is queued either way, and the in_progress delivery fills in what a
// lost record lacks. There is no separate delivery dedupe: a replayed
// delivery (or a late one, after the job started) enqueues the job again,
// which scale-up's claim on the job id turns into nothing (it launches at
// most one runner per job, and none for a job already started); the
// record's conditional write tells the webhook it was a duplicate, which it
// answers and counts as such.
func (h *Handler) queued(ctx context.Context, log eventLog, job queue.Job, rec store.JobRecord) Response {
	var (
		advanced bool
		recErr   error
		recorded = make(chan struct{})
	)
	h.workers.do(func() {
		defer close(recorded)
		advanced, recErr = h.o.Store.RecordJob(ctx, rec)
	})
	sendErr := h.o.Queue.Send(ctx, job)
	<-recorded
	if recErr != nil {
		log.Warn("recording queued job failed", "err", recErr)
	}
	switch {
	case errors.Is(sendErr, queue.ErrInvalidJob):
		// No retry can fix it (e.g. labels past the message size bound).
		return h.reject(log, http.StatusBadRequest, "malformed", "job cannot be queued: "+sendErr.Error())
	case sendErr != nil:
		h.o.Counter.Count(MetricFailed, "queue")
		log.Error("enqueueing job failed; answering 503 so the delivery can be redelivered", "err", sendErr)
		return reply(http.StatusServiceUnavailable, "retry")
	case recErr == nil && !advanced:
		return h.duplicate(log)
	}
	h.o.Counter.Count(MetricAccepted, "")
	log.Info("workflow_job accepted")
	return reply(http.StatusOK, "accepted")
}

// lifecycle records a waiting, in_progress or completed event, and the
// job's start or end on its runner, in one write where the store can
// (store.LifecycleRecorder). Both writes merge, so a replayed delivery
// changes nothing and needs no dedupe of its own; a failure answers 503,
// and GitHub's redelivery completes what was missing.
func (h *Handler) lifecycle(ctx context.Context, log eventLog, rec store.JobRecord) Response {
	advanced, err := h.o.Lifecycle.RecordLifecycle(ctx, rec, runnerStep(rec))
	if err != nil {
		h.o.Counter.Count(MetricFailed, "store")
		log.Error("recording job lifecycle failed; answering 503 so the delivery can be redelivered", "err", err)
		return reply(http.StatusServiceUnavailable, "retry")
	}
	if !advanced {
		return h.duplicate(log)
	}
	h.o.Counter.Count(MetricAccepted, "")
	log.Info("workflow_job accepted")
	return reply(http.StatusOK, "accepted")
}

// Jobs is the part of the job store the webhook writes: each job's and
// run's record, and a run's record read back for its trigger. store.Store
// implements it.
type Jobs interface {
	RecordJob(ctx context.Context, j store.JobRecord) (advanced bool, err error)
	RecordRun(ctx context.Context, r store.RunRecord) error
	Run(ctx context.Context, id int64) (store.RunRecord, error)
}

// SecurityEvents records a security event once per job attempt (true: this
// call recorded it); store.SecurityEvents implements it.
type SecurityEvents interface {
	RecordSecurityEvent(ctx context.Context, e store.SecurityEvent) (bool, error)
}

// Installations keeps the installations the installation webhook told of;
// store.Installations implements it.
type Installations interface {
	RecordInstallation(ctx context.Context, in store.Installation) error
	Installation(ctx context.Context, id int64) (store.Installation, error)
}

var (
	_ Jobs           = store.Store(nil)
	_ SecurityEvents = store.SecurityEvents(nil)
	_ Installations  = store.Installations(nil)
)

// Runners is the part of the runner ledger the webhook writes, and reads
// to learn the pool of the runner that ran a job: ledger.Ledger implements
// it. Runner returns store.ErrNotFound for a runner that is not skiff's.
type Runners interface {
	Advance(ctx context.Context, name string, to ledger.State, at time.Time, job int64) error
	Runner(ctx context.Context, name string) (ledger.Runner, error)
}

// runnerStep is what the job's event tells the runner ledger: that the job
// started or completed on the named runner. With the reconciler's own
// reports, this is how a runner counts as busy before GitHub's busy flag
// says so. The zero step (no runner named, or another status) tells nothing.
func runnerStep(rec store.JobRecord) store.RunnerStep {
	var step store.RunnerStep
	switch rec.Status {
	case store.StatusInProgress:
		step.To, step.At = ledger.StateJobStarted, rec.StartedAt
	case store.StatusCompleted:
		step.To, step.At = ledger.StateJobCompleted, rec.CompletedAt
	default:
		return step
	}
	if rec.RunnerName == "" {
		return store.RunnerStep{}
	}
	step.Runner = rec.RunnerName
	if step.At.IsZero() {
		step.At = rec.UpdatedAt
	}
	return step
}

// separateWrites is the LifecycleRecorder of a store and a ledger that
// cannot write together: the job's record, then the runner's step. A runner
// the ledger does not know (GitHub-hosted, or another system's) is none of
// skiff's business.
type separateWrites struct {
	store   Jobs
	runners Runners
}

// RecordLifecycle implements store.LifecycleRecorder.
func (w separateWrites) RecordLifecycle(ctx context.Context, j store.JobRecord, step store.RunnerStep) (bool, error) {
	advanced, err := w.store.RecordJob(ctx, j)
	if err != nil || step.Runner == "" {
		return advanced, err
	}
	if err := w.runners.Advance(ctx, step.Runner, step.To, step.At, j.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
		return advanced, fmt.Errorf("recording the job on its runner: %w", err)
	}
	return advanced, nil
}

func (h *Handler) workflowRun(ctx context.Context, log eventLog, req Request, received time.Time) Response {
	p, err := parseWorkflowRun(req.Body)
	if err != nil {
		return h.reject(log, http.StatusBadRequest, "malformed", err.Error())
	}
	wr := &p.WorkflowRun
	log = log.With("action", p.Action, "run_id", wr.ID, "repository", p.Repository.FullName)
	if resp, refused := h.admitSender(ctx, log, p.Installation, p.Repository); refused {
		return resp
	}
	name := wr.Name
	if p.Workflow != nil && p.Workflow.Name != "" {
		name = p.Workflow.Name
	}
	// Recording a run is idempotent, so it needs no delivery claim.
	run := store.RunRecord{
		ID: wr.ID, Attempt: wr.RunAttempt, Event: wr.Event, WorkflowName: truncate(name, maxWorkflowName),
		Repository: p.Repository.FullName, UpdatedAt: received, ExpiresAt: received.Add(h.o.JobTTL),
		FromFork: p.fromFork(), Actor: truncate(p.actor(), allow.MaxOwnerLen+8),
	}
	if wr.HeadRepository != nil {
		run.HeadRepository = wr.HeadRepository.FullName
	}
	if err := h.o.Store.RecordRun(ctx, run); err != nil {
		h.o.Counter.Count(MetricFailed, "store")
		log.Error("recording workflow run failed; answering 503 so the delivery can be redelivered", "err", err)
		return reply(http.StatusServiceUnavailable, "retry")
	}
	h.o.Counter.Count(MetricAccepted, "")
	log.Info("workflow_run recorded", "trigger", wr.Event, "from_fork", run.FromFork)
	return reply(http.StatusOK, "accepted")
}

func (h *Handler) reject(log eventLog, status int, reason, detail string, attrs ...any) Response {
	h.o.Counter.Count(MetricRejected, reason)
	log.Warn("delivery rejected", append([]any{"status", status, "reason", reason, "detail", detail}, attrs...)...)
	return reply(status, reason)
}

func (h *Handler) ignore(log eventLog, reason, detail string) Response {
	h.o.Counter.Count(MetricIgnored, reason)
	log.Debug("delivery ignored", "reason", reason, "detail", detail)
	return reply(http.StatusAccepted, "ignored")
}

func (h *Handler) duplicate(log eventLog) Response {
	h.o.Counter.Count(MetricDuplicate, "")
	log.Info("duplicate delivery; nothing done again")
	return reply(http.StatusOK, "duplicate")
}

// admitSender refuses a delivery from an installation or a repository the
// operator did not allow (403, logged and counted):
//
//	recorded deleted or suspended      refused, pinned or not
//	pinned (SKIFF_ALLOWED_INSTALLATIONS) and not on the pin   refused
//	no pin: not recorded as active     refused
//	pin "*": not recorded              served (Apps installed before skiff
//	                                   learnt installations from webhooks)
//
// then the repository allow-list, which is always required. A store that
// cannot answer is a 503, so that GitHub's redelivery tries again.
func (h *Handler) admitSender(ctx context.Context, log eventLog, inst *installation, repo repository) (Response, bool) {
	r := h.senderRefusal(ctx, inst, repo)
	switch {
	case r.err != nil:
		h.o.Counter.Count(MetricFailed, "store")
		log.Error("reading the installation record failed; answering 503 so the delivery can be redelivered", "err", r.err)
		return reply(http.StatusServiceUnavailable, "retry"), true
	case r.reason != "":
		return h.reject(log, http.StatusForbidden, r.reason, r.detail), true
	}
	return Response{}, false
}

// refusal is why a delivery's sender is refused: a reason (installation,
// forbidden) and its words; err when the store could not answer. The zero
// refusal admits.
type refusal struct {
	reason, detail string
	err            error
}

// senderRefusal is admitSender's decision, without its answer: the
// installation, then the repository allow-list.
func (h *Handler) senderRefusal(ctx context.Context, inst *installation, repo repository) refusal {
	var id int64
	if inst != nil {
		id = inst.ID
	}
	pin := h.o.Installations
	if !pin.Empty() && !pin.Allows(id) {
		return refusal{reason: "installation", detail: fmt.Sprintf("installation %d is not on SKIFF_ALLOWED_INSTALLATIONS", id)}
	}
	if h.o.Recorded != nil && id != 0 {
		rec, found, err := h.installation(ctx, id)
		switch {
		case err != nil:
			return refusal{err: err}
		case found && rec.Status != store.InstallationActive:
			return refusal{reason: "installation",
				detail: fmt.Sprintf("installation %d is %s (installation webhook of %s)", id, rec.Status, rec.UpdatedAt.Format(time.RFC3339))}
		case !found && pin.Empty():
			return refusal{reason: "installation",
				detail: fmt.Sprintf("installation %d is not recorded: no installation webhook was received for it (install the App again, or pin it in SKIFF_ALLOWED_INSTALLATIONS)", id)}
		}
	} else if pin.Empty() {
		return refusal{reason: "installation",
			detail: fmt.Sprintf("installation %d: no installation is recorded or on SKIFF_ALLOWED_INSTALLATIONS", id)}
	}
	if !h.o.Allow.Allows(repo.owner(), repo.FullName) {
		return refusal{reason: "forbidden", detail: "repository is not on the allow-list"}
	}
	return refusal{}
}

// installation returns the installation's record, from this container's
// copy while it is younger than InstallationCacheTTL. An installation not
// recorded is remembered as such only under a pin (ids or "*"), where the
// record can only add a refusal; with no pin it is looked up again at its
// next delivery, so that a new installation is served at once.
func (h *Handler) installation(ctx context.Context, id int64) (store.Installation, bool, error) {
	now := h.o.Now()
	h.instMu.Lock()
	c, ok := h.insts[id]
	h.instMu.Unlock()
	if ok && now.Sub(c.at) < h.o.InstallationCacheTTL {
		return c.rec, c.rec.Status != "", nil
	}
	rec, err := h.o.Recorded.Installation(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		if !h.o.Installations.Empty() {
			h.remember(id, store.Installation{ID: id}, now)
		}
		return store.Installation{}, false, nil
	}
	if err != nil {
		return store.Installation{}, false, err
	}
	h.remember(id, rec, now)
	return rec, true, nil
}

// remember keeps rec (with no Status: not recorded) for id.
func (h *Handler) remember(id int64, rec store.Installation, now time.Time) {
	h.instMu.Lock()
	defer h.instMu.Unlock()
	if len(h.insts) >= maxCachedInstallations {
		clear(h.insts)
	}
	h.insts[id] = cachedInstallation{rec: rec, at: now}
}

// maxCachedInstallations bounds the container's copy of installation
// records: an organisation has one installation per App; 10,000 is far
// beyond any deployment and a few hundred KB.
const maxCachedInstallations = 10000

// installationEvent records an installation's status (created, deleted,
// suspend, unsuspend; new_permissions_accepted leaves it active). Every
// signed installation event is recorded, whatever the pin and the
// allow-list say: they decide which deliveries are served, and the
// record must be there when they allow it.
func (h *Handler) installationEvent(ctx context.Context, log eventLog, req Request, received time.Time) Response {
	p, err := parseInstallationEvent(req.Body)
	if err != nil {
		return h.reject(log, http.StatusBadRequest, "malformed", err.Error())
	}
	log = log.With("action", p.Action, "installation_id", p.Installation.ID, "account", p.Installation.Account.Login)
	var st store.InstallationStatus
	switch p.Action {
	case "created", "unsuspend", "new_permissions_accepted":
		st = store.InstallationActive
	case "suspend":
		st = store.InstallationSuspended
	case "deleted":
		st = store.InstallationDeleted
	default:
		return h.ignore(log, "action", "installation action not handled")
	}
	if h.o.Recorded == nil {
		return h.ignore(log, "event", "installations are not recorded")
	}
	rec := store.Installation{ID: p.Installation.ID, AppID: p.Installation.AppID, Account: p.Installation.Account.Login,
		AccountType: p.Installation.Account.Type, Status: st, UpdatedAt: received}
	if err := h.o.Recorded.RecordInstallation(ctx, rec); err != nil {
		h.o.Counter.Count(MetricFailed, "store")
		log.Error("recording the installation failed; answering 503 so the delivery can be redelivered", "err", err)
		return reply(http.StatusServiceUnavailable, "retry")
	}
	h.instMu.Lock()
	delete(h.insts, rec.ID) // the store decides which event won; read it again
	h.instMu.Unlock()
	h.o.Counter.Count(MetricAccepted, "")
	log.Info("installation recorded", "status", st, "owner_allowed", h.o.Allow.Allows(rec.Account, ""))
	return reply(http.StatusOK, "accepted")
}

// visibilityOf is the repository's visibility as the pool policy reads it.
func visibilityOf(r repository) pool.Visibility { return pool.Visibility(r.visibility()) }

// Bounds on what one log line carries of outside input, so that a hostile
// payload cannot write large log lines (CloudWatch bills them, and lines
// past 256 KB are cut).
const (
	// maxLoggedLabels is how many of a job's labels a log line names; jobs
	// rarely have more than five.
	maxLoggedLabels = 10
	// maxLoggedLabel is how much of one label a log line shows.
	maxLoggedLabel = 64
	// maxDetail bounds an error detail quoted in a log line.
	maxDetail = 512
	// maxWorkflowName bounds the workflow name kept in the run record.
	maxWorkflowName = 256
)

// labelsForLog returns at most maxLoggedLabels labels, each cut to
// maxLoggedLabel bytes; label_count tells how many there were.
func labelsForLog(labels []string) []string {
	out := make([]string, 0, min(len(labels), maxLoggedLabels))
	for i, l := range labels {
		if i == maxLoggedLabels {
			break
		}
		out = append(out, truncate(l, maxLoggedLabel))
	}
	return out
}

// truncate cuts s to at most n bytes (plus a marker), on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// reasonOf returns the short reason a routing error carries, or "no_pool".
func reasonOf(err error) string {
	var r interface{ Reason() string }
	if errors.As(err, &r) {
		if s := r.Reason(); s != "" {
			return s
		}
	}
	return "no_pool"
}

// InstallationList pins which GitHub App installations skiff serves:
// installation ids, or "*" for every installation (including deliveries
// that name none). Empty, it pins nothing: the recorded installations
// decide (Options.Recorded); without records, an empty list allows none.
type InstallationList struct {
	all bool
	ids map[int64]bool
}

// ParseInstallationList builds an InstallationList from entries (decimal
// installation ids, or "*"), rejecting malformed ones.
func ParseInstallationList(entries []string) (InstallationList, error) {
	l := InstallationList{ids: map[int64]bool{}}
	for _, e := range entries {
		e = strings.TrimSpace(e)
		if e == "*" {
			l.all = true
			continue
		}
		id, err := strconv.ParseInt(e, 10, 64)
		if err != nil || id <= 0 || id > MaxID {
			return InstallationList{}, fmt.Errorf("installation %s: want a positive installation id or *", quoteShort(e))
		}
		l.ids[id] = true
	}
	return l, nil
}

// Empty reports whether the list allows no installation.
func (l InstallationList) Empty() bool { return !l.all && len(l.ids) == 0 }

// Allows reports whether a delivery of installation id (0: the delivery
// named none) is accepted.
func (l InstallationList) Allows(id int64) bool { return l.all || l.ids[id] }
