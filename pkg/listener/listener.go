// Package listener takes a pool's jobs from GitHub's runner scale sets:
// one scale set per pool that opts in (jobs: listener), one message
// session per scale set, long-polled outbound only. It is one more source
// of queued jobs: an acquired job goes to the same queue and job records
// as a workflow_job webhook, and scale-up's claim launches it once
// whichever source (or how many redeliveries) sent it.
//
// One scale set's loop:
//
//	find the runner group ─► get, create or update the scale set
//	  ─► delete the session a crash left (its id is kept in the state file)
//	  ─► create the session (409: another client holds it; try again later)
//	  ─► poll ──202──► poll
//	       │200
//	       ▼
//	     acquire its JobAvailable jobs ─► queue each acquired job, record
//	     JobStarted / JobCompleted ─► statistics to the state file
//	       │every step done                    │a step failed
//	       ▼                                   ▼
//	     DELETE the message (acknowledge)    keep it: it is delivered again
//	  ─► on exit, delete the session
//
// A message is acknowledged only after everything it asked is done, so a
// crash between the two delivers it again; every step is idempotent (the
// acquire of an acquired job answers it again, the queue's consumer claims
// each job once, the records merge). A message that cannot be parsed is
// acknowledged and logged: it must not hold the queue, and the service
// offers again a job nobody acquired.
package listener

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/skiffci/skiff/internal/ctxsleep"
	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/github/scaleset"
	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/queue"
	"github.com/skiffci/skiff/pkg/store"
)

// ScaleSets is the part of the scale-set client the listener calls;
// *scaleset.Client implements it.
type ScaleSets interface {
	Org() string
	RunnerGroupByName(ctx context.Context, name string) (scaleset.RunnerGroup, error)
	ScaleSet(ctx context.Context, group int64, name string) (scaleset.ScaleSet, error)
	CreateScaleSet(ctx context.Context, group int64, name string, labels []string) (scaleset.ScaleSet, error)
	UpdateScaleSet(ctx context.Context, id, group int64, name string, labels []string) (scaleset.ScaleSet, error)
	CreateSession(ctx context.Context, scaleSet int64, owner string) (*scaleset.Session, error)
	DeleteSession(ctx context.Context, scaleSet int64, id string) error
	GenerateJITConfig(ctx context.Context, id int64, name string) (scaleset.JITConfig, error)
}

var _ ScaleSets = (*scaleset.Client)(nil)

// Records are the job and run records the listener writes, as the webhook
// does; store.Store implements them.
type Records interface {
	RecordJob(ctx context.Context, j store.JobRecord) (bool, error)
	RecordRun(ctx context.Context, r store.RunRecord) error
}

// Runners is the runner ledger's step the job messages report (a job
// started or completed on a runner); ledger.Ledger implements it, and
// returns store.ErrNotFound for a runner that is not skiff's.
type Runners interface {
	Advance(ctx context.Context, name string, to ledger.State, at time.Time, job int64) error
}

var (
	_ Records = store.Store(nil)
	_ Runners = ledger.Ledger(nil)
)

// Runs reads a workflow run (its trigger, head repository and the
// repository's visibility); *github.Client implements it.
type Runs interface {
	GetWorkflowRun(ctx context.Context, inst int64, owner, repo string, runID int64) (*github.WorkflowRun, error)
	// RunJobs lists a run's jobs: how a message's opaque jobId is matched
	// to its workflow job (jobids.go).
	RunJobs(ctx context.Context, inst int64, owner, repo string, runID int64) ([]github.WorkflowJob, error)
}

// GroupKeeper makes the runner groups skiff keeps exist in an
// organization (groups.Keeper).
type GroupKeeper interface {
	Ensure(ctx context.Context, org string) error
}

// Allower is the deployment's allow-list (allow.List).
type Allower interface {
	Allows(owner, repository string) bool
}

// Options configure a Listener. All but Installation, Owner, JobTTL,
// Logger, Now and Wait are required.
type Options struct {
	Client ScaleSets
	// Installation is the App's installation on the organization (0: the
	// GitHub client finds it).
	Installation int64
	// Allow admits the jobs the listener acquires: a job of a repository
	// it does not allow is left to others, as the webhook refuses it.
	Allow Allower
	// Pools are the pools whose jobs come from their scale set.
	Pools []*pool.Pool
	// Deployment names the scale sets: <deployment>-<pool>.
	Deployment string
	Queue      queue.Sender
	Records    Records
	Runners    Runners
	GitHub     Runs
	Groups     GroupKeeper
	State      *State
	// Owner names the sessions for people (default the host name).
	Owner string
	// JobTTL is how long the job and run records are kept (default 14 days).
	JobTTL time.Duration
	Logger *slog.Logger
	Now    func() time.Time
	// Wait waits d or until ctx ends (default a timer), between attempts
	// after a failure.
	Wait func(ctx context.Context, d time.Duration) error
}

// Listener serves the scale sets of its pools. Run it once.
type Listener struct {
	o   Options
	log *slog.Logger

	mu   sync.Mutex
	ids  map[string]int64 // pool → scale set id, once set up
	runs map[int64]runFacts
	// byMessage and matched pair an opaque message jobId with its workflow
	// job id until the job completes (jobids.go), or for memoryAge.
	byMessage map[string]int64
	matched   map[int64]matchedJob
	// swept is when forgetOldLocked last looked.
	swept time.Time
}

// forgetOldLocked drops, at most once an hour, the runs read and the
// matches made more than memoryAge before now.
func (l *Listener) forgetOldLocked(now time.Time) {
	if now.Sub(l.swept) < time.Hour {
		return
	}
	l.swept = now
	for id, f := range l.runs {
		if now.Sub(f.at) > memoryAge {
			delete(l.runs, id)
		}
	}
	for id, m := range l.matched {
		if now.Sub(m.at) > memoryAge {
			delete(l.byMessage, m.message)
			delete(l.matched, id)
		}
	}
}

// runFacts are what the listener learnt of a run, once per run.
type runFacts struct {
	run        store.RunRecord
	visibility pool.Visibility
	at         time.Time // when it was read
}

// memoryAge is how long the listener keeps what it learnt of a run, and a
// match of a message's job id whose job never completed: a daemon runs for
// months, and a run's jobs are offered within hours of each other (one read
// more for a run that lasts longer).
const memoryAge = 24 * time.Hour

// New checks o and returns a listener; nothing is called until Run.
func New(o Options) (*Listener, error) {
	switch {
	case o.Client == nil || o.Allow == nil || o.Queue == nil || o.Records == nil || o.Runners == nil || o.GitHub == nil || o.Groups == nil || o.State == nil:
		return nil, errors.New("listener: Client, Allow, Queue, Records, Runners, GitHub, Groups and State are required")
	case o.Deployment == "":
		return nil, errors.New("listener: the deployment is required")
	}
	if o.Owner == "" {
		o.Owner = "skiff"
	}
	if o.JobTTL <= 0 {
		o.JobTTL = 14 * 24 * time.Hour
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Wait == nil {
		o.Wait = ctxsleep.For
	}
	return &Listener{o: o, log: o.Logger.With("org", o.Client.Org()), ids: map[string]int64{}, runs: map[int64]runFacts{},
		byMessage: map[string]int64{}, matched: map[int64]matchedJob{}}, nil
}

// Backoff after the nth failure in a row: 1 s doubling to 30 s. A broker
// that drops connections or answers 5xx in runs is not hammered, and a
// healthy one is back within seconds.
func backoff(n int) time.Duration {
	d := time.Second << min(n-1, 5)
	return min(d, 30*time.Second)
}

// ScaleSetName is the name of pool's scale set in deployment: unique in
// its runner group across deployments and pools.
func ScaleSetName(deployment, pool string) string { return deployment + "-" + pool }

// Uses reports whether pool p takes its jobs from the listener: it opts
// in and has static labels only (a pool with the dynamic label keeps the
// webhook).
func Uses(p *pool.Pool) bool { return p.Jobs == pool.JobsListener && p.Dynamic == nil }

// Run serves every pool's scale set until ctx ends, then deletes their
// sessions.
func (l *Listener) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, p := range l.o.Pools {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.serve(ctx, p)
		}()
	}
	wg.Wait()
}

// ScaleSetID returns pool's scale set id once it is set up.
func (l *Listener) ScaleSetID(pool string) (int64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	id, ok := l.ids[pool]
	return id, ok
}

// serve keeps pool's scale set and session up until ctx ends.
func (l *Listener) serve(ctx context.Context, p *pool.Pool) {
	log := l.log.With("pool", p.Name)
	for failures := 0; ctx.Err() == nil; {
		err := l.session(ctx, log, p, &failures)
		if ctx.Err() != nil {
			return
		}
		failures++
		l.note(p, err)
		log.Error("scale set session ended; starting again", "err", err, "attempt", failures)
		if l.o.Wait(ctx, backoff(failures)) != nil {
			return
		}
	}
}

// note records err (nil clears it) in pool's status.
func (l *Listener) note(p *pool.Pool, err error) {
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	l.update(p, func(s *ScaleSetStatus) { s.Error = msg })
}

func (l *Listener) update(p *pool.Pool, fn func(*ScaleSetStatus)) {
	if err := l.o.State.Update(l.o.Client.Org(), p.Name, l.o.Now(), fn); err != nil {
		l.log.Warn("writing the listener's state", "err", err)
	}
}

// scaleSet finds, creates or updates pool's scale set in its runner group.
func (l *Listener) scaleSet(ctx context.Context, p *pool.Pool) (scaleset.ScaleSet, error) {
	if p.KeptGroup {
		if err := l.o.Groups.Ensure(ctx, l.o.Client.Org()); err != nil {
			return scaleset.ScaleSet{}, fmt.Errorf("keeping the runner group of pool %s: %w", p.Name, err)
		}
	}
	g, err := l.o.Client.RunnerGroupByName(ctx, p.RunnerGroup)
	if err != nil {
		return scaleset.ScaleSet{}, err
	}
	name := ScaleSetName(l.o.Deployment, p.Name)
	ss, err := l.o.Client.ScaleSet(ctx, g.ID, name)
	switch {
	case errors.Is(err, scaleset.ErrNotFound):
		return l.o.Client.CreateScaleSet(ctx, g.ID, name, p.Labels)
	case err != nil:
		return scaleset.ScaleSet{}, err
	case !sameLabels(ss.LabelNames(), p.Labels):
		return l.o.Client.UpdateScaleSet(ctx, ss.ID, g.ID, name, p.Labels)
	}
	return ss, nil
}

func sameLabels(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	seen := map[string]bool{}
	for _, x := range a {
		seen[strings.ToLower(x)] = true
	}
	for _, x := range b {
		if !seen[strings.ToLower(x)] {
			return false
		}
	}
	return true
}

// session sets up the scale set and its session, then polls until a
// failure that needs a new session (or ctx ends); it deletes the session
// when it returns.
func (l *Listener) session(ctx context.Context, log *slog.Logger, p *pool.Pool, failures *int) error {
	ss, err := l.scaleSet(ctx, p)
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.ids[p.Name] = ss.ID
	l.mu.Unlock()
	org := l.o.Client.Org()
	if left := l.o.State.Get(org, p.Name).Session; left != "" {
		// A crash left it: it would refuse ours (409) until it expires.
		if err := l.o.Client.DeleteSession(ctx, ss.ID, left); err != nil {
			return err
		}
		log.Info("deleted the session the previous process left", "session", left)
	}
	sess, err := l.o.Client.CreateSession(ctx, ss.ID, l.o.Owner)
	if err != nil {
		if errors.Is(err, scaleset.ErrConflict) {
			return fmt.Errorf("another client holds the session of scale set %s (another skiff on the same scale set, or one that crashed and whose session has not expired): %w", ss.Name, err)
		}
		return err
	}
	l.update(p, func(s *ScaleSetStatus) {
		s.ScaleSetID, s.Name, s.Session, s.Statistics, s.Desired, s.Error = ss.ID, ss.Name, sess.ID, sess.Statistics, sess.Statistics.TotalAssignedJobs, ""
	})
	log = log.With("scale_set", ss.Name, "scale_set_id", ss.ID)
	log.Info("scale set session open", "session", sess.ID, "desired", sess.Statistics.TotalAssignedJobs)
	defer func() {
		end, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := sess.Close(end); err != nil {
			log.Warn("deleting the session; the next start deletes it", "err", err)
			return
		}
		l.update(p, func(s *ScaleSetStatus) { s.Session = "" })
		log.Info("scale set session closed")
	}()
	var last int64
	for ctx.Err() == nil {
		m, err := sess.GetMessage(ctx, last, p.MaxRunners)
		var bad *scaleset.MalformedError
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.As(err, &bad) && bad.ID != 0:
			// It must not hold the queue: acknowledge it and go on; a job
			// it offered is offered again.
			log.Error("acknowledging a message that cannot be parsed", "message_id", bad.ID, "err", err)
			if err := sess.DeleteMessage(ctx, bad.ID); err != nil {
				return err
			}
			last = bad.ID
			continue
		case errors.Is(err, scaleset.ErrNotFound), errors.Is(err, scaleset.ErrTokenExpired):
			return err // the session is gone, or cannot be refreshed
		case err != nil:
			*failures++
			l.note(p, err)
			log.Warn("polling the scale set's messages", "err", err, "attempt", *failures)
			if l.o.Wait(ctx, backoff(*failures)) != nil {
				return nil
			}
			continue
		}
		*failures = 0
		if m == nil {
			continue
		}
		if err := l.handle(ctx, log, p, sess, m); err != nil {
			// Not acknowledged: it is delivered again.
			*failures++
			l.note(p, err)
			log.Warn("handling a message; it will be delivered again", "message_id", m.ID, "err", err)
			if l.o.Wait(ctx, backoff(*failures)) != nil {
				return nil
			}
			continue
		}
		if err := sess.DeleteMessage(ctx, m.ID); err != nil {
			log.Warn("acknowledging a handled message; it will be delivered again", "message_id", m.ID, "err", err)
			continue
		}
		last = m.ID
		now := l.o.Now()
		l.update(p, func(s *ScaleSetStatus) {
			s.LastMessageID, s.LastMessageAt, s.Statistics, s.Error = m.ID, now, m.Statistics, ""
			s.Desired = m.Statistics.TotalAssignedJobs
		})
	}
	return nil
}

// handle does what message m asks: acquire its available jobs and queue
// those acquired, record the starts and ends. An error leaves it to be
// delivered again.
func (l *Listener) handle(ctx context.Context, log *slog.Logger, p *pool.Pool, sess *scaleset.Session, m *scaleset.Message) error {
	runs := batchJobs{}
	var offered []int64
	ids := map[int64]int64{} // runner request id → workflow job id
	for _, j := range m.Jobs {
		if j.Type != scaleset.JobAvailable {
			continue
		}
		if !l.o.Allow.Allows(j.OwnerName, j.OwnerName+"/"+j.RepositoryName) {
			log.Warn("not acquiring a job of a repository the allow-list does not name", "repository",
				j.OwnerName+"/"+j.RepositoryName, "job_id", j.JobID)
			continue
		}
		// Acquired only once skiff knows which workflow job it is: a job
		// left alone is offered again, to skiff or another client.
		id, err := l.workflowJob(ctx, runs, j)
		if err != nil {
			log.Warn("not acquiring a job whose workflow job cannot be told", "job_id", j.JobID, "err", err)
			continue
		}
		offered = append(offered, j.RunnerRequestID)
		ids[j.RunnerRequestID] = id
	}
	acquired := map[int64]bool{}
	if len(offered) > 0 {
		got, err := sess.AcquireJobs(ctx, offered)
		if err != nil {
			return err
		}
		for _, id := range got {
			acquired[id] = true
		}
	}
	for _, j := range m.Jobs {
		jlog := log.With("job_id", j.JobID, "runner_request_id", j.RunnerRequestID, "message_id", m.ID)
		var err error
		switch j.Type {
		case scaleset.JobAvailable:
			id, ok := ids[j.RunnerRequestID]
			if !ok {
				continue // refused above
			}
			if !acquired[j.RunnerRequestID] {
				jlog.Info("job not acquired (another client took it, or it is gone)")
				l.forgetJob(j.JobID)
				continue
			}
			err = l.queued(ctx, jlog, p, j, id, m.ID)
		case scaleset.JobStarted:
			err = l.lifecycle(ctx, jlog, runs, p, j, store.StatusInProgress)
		case scaleset.JobCompleted:
			if j.RunnerName == "" {
				// Assigned and taken back before a runner took it (the job is
				// offered again), or cancelled while queued.
				jlog.Info("job left the scale set before a runner took it", "result", j.Result)
				l.forgetJob(j.JobID)
				continue
			}
			err = l.lifecycle(ctx, jlog, runs, p, j, store.StatusCompleted)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// queued sends an acquired job to the queue and records it, as the
// webhook does with workflow_job queued, after the pool's visibility
// policy (the run's trigger is recorded for scale-up's fork policy).
func (l *Listener) queued(ctx context.Context, log *slog.Logger, p *pool.Pool, j scaleset.JobMessage, id, msg int64) error {
	facts, err := l.run(ctx, j)
	if err != nil {
		return err
	}
	if err := p.Policy.AdmitVisibility(facts.visibility); err != nil {
		log.Warn("not launching: the pool does not admit this job", "reason", pool.Reason(err), "err", err)
		return nil
	}
	now := l.o.Now()
	repo := j.OwnerName + "/" + j.RepositoryName
	labels := j.RequestLabels
	if len(labels) == 0 {
		labels = p.Labels
	}
	rec := store.JobRecord{ID: id, RunID: j.WorkflowRunID, Attempt: facts.run.Attempt, Repository: repo, Owner: j.OwnerName,
		InstallationID: l.o.Installation, Status: store.StatusQueued, Labels: labels, Pool: p.Name,
		WorkflowName: facts.run.WorkflowName, JobName: j.DisplayName, QueuedAt: j.QueueTime, UpdatedAt: now, ExpiresAt: now.Add(l.o.JobTTL)}
	if _, err := l.o.Records.RecordJob(ctx, rec); err != nil {
		log.Warn("recording the queued job", "err", err)
	}
	job := queue.Job{JobID: id, RunID: j.WorkflowRunID, Attempt: facts.run.Attempt, Repository: repo, Owner: j.OwnerName,
		InstallationID: l.o.Installation, Labels: labels, Pool: p.Name, Visibility: string(facts.visibility),
		DeliveryID: fmt.Sprintf("scaleset-%d", msg), ReceivedAt: now, Acquired: true}
	if err := l.o.Queue.Send(ctx, job); err != nil {
		return fmt.Errorf("queueing job %d: %w", id, err)
	}
	log.Info("job acquired and queued", "pool", p.Name)
	return nil
}

// run returns what is known of j's run: once per run, from GitHub, and
// recorded for scale-up's fork policy and the metrics records.
func (l *Listener) run(ctx context.Context, j scaleset.JobMessage) (runFacts, error) {
	l.mu.Lock()
	f, ok := l.runs[j.WorkflowRunID]
	l.mu.Unlock()
	if ok {
		return f, nil
	}
	repo := j.OwnerName + "/" + j.RepositoryName
	r, err := l.o.GitHub.GetWorkflowRun(ctx, l.o.Installation, j.OwnerName, j.RepositoryName, j.WorkflowRunID)
	if err != nil {
		return runFacts{}, fmt.Errorf("reading run %d: %w", j.WorkflowRunID, err)
	}
	now := l.o.Now()
	attempt := max(r.RunAttempt, 1)
	f = runFacts{run: store.RunRecord{ID: r.ID, Attempt: attempt, Event: r.Event, WorkflowName: r.Name, Repository: repo,
		HeadRepository: r.HeadRepository.FullName, FromFork: !strings.EqualFold(r.HeadRepository.FullName, repo),
		Actor: r.TriggeringActor, UpdatedAt: now, ExpiresAt: now.Add(l.o.JobTTL)},
		visibility: pool.Visibility(r.Repository.Visibility)}
	if err := l.o.Records.RecordRun(ctx, f.run); err != nil {
		return runFacts{}, fmt.Errorf("recording run %d: %w", r.ID, err)
	}
	f.at = now
	l.mu.Lock()
	l.runs[j.WorkflowRunID] = f
	l.forgetOldLocked(now)
	l.mu.Unlock()
	return f, nil
}

// conclusion is a JobCompleted result as a workflow job's conclusion.
func conclusion(result string) string {
	switch strings.ToLower(result) {
	case "succeeded", "succeededwithissues":
		return "success"
	case "failed":
		return "failure"
	case "canceled", "cancelled", "abandoned":
		return "cancelled"
	case "skipped":
		return "skipped"
	}
	return strings.ToLower(result)
}

// lifecycle records a job's start or end on its runner, as the webhook
// does with workflow_job in_progress and completed.
func (l *Listener) lifecycle(ctx context.Context, log *slog.Logger, runs batchJobs, p *pool.Pool, j scaleset.JobMessage, status store.Status) error {
	id, err := l.workflowJob(ctx, runs, j)
	if err != nil {
		// Not retried: a message that cannot be placed must not hold the
		// queue; the reconciler sees the runner's end all the same.
		log.Error("skipping a job message whose workflow job cannot be told", "err", err)
		return nil
	}
	if status == store.StatusCompleted {
		defer l.forgetJob(j.JobID)
	}
	now := l.o.Now()
	rec := store.JobRecord{ID: id, RunID: j.WorkflowRunID, Repository: j.OwnerName + "/" + j.RepositoryName, Owner: j.OwnerName,
		InstallationID: l.o.Installation, Status: status, Labels: j.RequestLabels, Pool: p.Name, JobName: j.DisplayName,
		RunnerName: j.RunnerName, RunnerID: j.RunnerID, UpdatedAt: now, ExpiresAt: now.Add(l.o.JobTTL)}
	step := ledger.StateJobStarted
	if status == store.StatusInProgress {
		rec.StartedAt = now
	} else {
		rec.CompletedAt, rec.Conclusion, step = now, conclusion(j.Result), ledger.StateJobCompleted
	}
	if _, err := l.o.Records.RecordJob(ctx, rec); err != nil {
		return fmt.Errorf("recording job %d: %w", id, err)
	}
	if j.RunnerName == "" {
		return nil
	}
	if err := l.o.Runners.Advance(ctx, j.RunnerName, step, now, id); err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("recording job %d on runner %s: %w", id, j.RunnerName, err)
	}
	return nil
}

// JIT registers scale-up's runners: a pool whose jobs come from its scale
// set registers them in the scale set (generatejitconfig), every other
// pool as GitHub does for any runner (scaleup.GitHub's GenerateJITConfig).
type JIT struct {
	// Regular registers the other pools' runners (*github.Client).
	Regular interface {
		GenerateJITConfig(ctx context.Context, inst int64, scope github.Scope, req github.JITRequest) (*github.JITConfig, error)
	}
	// Listeners are the listeners by organization (lower case).
	Listeners map[string]*Listener
}

// GenerateJITConfig implements scaleup.GitHub's method of that name.
func (j JIT) GenerateJITConfig(ctx context.Context, inst int64, scope github.Scope, req github.JITRequest) (*github.JITConfig, error) {
	l := j.Listeners[strings.ToLower(scope.Owner)]
	if l == nil || !scope.IsOrg() {
		return j.Regular.GenerateJITConfig(ctx, inst, scope, req)
	}
	id, ok := l.ScaleSetID(req.Pool)
	if !ok {
		if !l.serves(req.Pool) {
			return j.Regular.GenerateJITConfig(ctx, inst, scope, req)
		}
		return nil, fmt.Errorf("registering a runner of pool %s: its scale set is not set up yet", req.Pool)
	}
	cfg, err := l.o.Client.GenerateJITConfig(ctx, id, req.Name)
	if err != nil {
		if errors.Is(err, scaleset.ErrConflict) {
			err = errors.Join(err, github.ErrConflict)
		}
		return nil, err
	}
	return &github.JITConfig{Runner: github.Runner{ID: cfg.RunnerID, Name: cfg.RunnerName}, EncodedJITConfig: cfg.Encoded}, nil
}

// serves reports whether pool is one of the listener's.
func (l *Listener) serves(name string) bool {
	for _, p := range l.o.Pools {
		if p.Name == name {
			return true
		}
	}
	return false
}
