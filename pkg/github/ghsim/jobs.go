package ghsim

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Errors of the control API.
var (
	// ErrUnknown: no such run, job, runner or credential.
	ErrUnknown = errors.New("ghsim: unknown")
	// ErrUsed: a JIT configuration can connect one runner once.
	ErrUsed = errors.New("ghsim: JIT configuration already used")
	// ErrExpired: the registration token has expired.
	ErrExpired = errors.New("ghsim: registration token expired")
)

type simLabel struct {
	id   int64
	name string
	typ  string
}

type simRunner struct {
	id        int64
	name      string
	os        string
	account   *simAccount
	repo      *simRepo // nil for an organization runner
	groupID   int64
	labels    []simLabel
	ephemeral bool
	jit       bool
	online    bool
	version   string
	job       *simJob
	// remote: the runner is a separate process connected over HTTP
	// (runner_http.go): its jobs end when it reports them complete, not
	// after their Duration; session authenticates its calls, and wake is
	// closed when a job is dispatched to it.
	remote  bool
	session string
	wake    chan struct{}
	// scaleSet is the scale set the runner was generated for (nil for a
	// regular runner): it takes only the jobs its scale set acquired.
	scaleSet *simScaleSet
}

func (r *simRunner) status() string {
	if r.online {
		return "online"
	}
	return "offline"
}

type simRun struct {
	id, workflowID int64
	number         int
	attempt        int
	repo           *simRepo
	head           *simRepo // the head repository: repo, or a fork of it
	actor          *simAccount
	name, path     string
	title, event   string
	branch, sha    string
	status         string
	conclusion     string
	created        time.Time
	updated        time.Time
	jobs           []*simJob
	inst           *simInstall // for webhook payloads; nil if not installed
}

type simJob struct {
	id         int64
	run        *simRun
	attempt    int // the run attempt the job belongs to
	name       string
	labels     []string
	duration   time.Duration
	outcome    string
	status     string
	conclusion string
	created    time.Time
	started    time.Time
	completed  time.Time
	due        time.Time
	runnerID   int64
	runnerName string
	groupID    int64
	groupName  string
	// The job's scale set (nil: regular dispatch), its state there
	// (available or acquired), its runner request id and when it was last
	// offered (scaleset.go).
	scaleSet  *simScaleSet
	ssState   string
	requestID int64
	offered   time.Time
}

// JobSpec describes one job of a run.
type JobSpec struct {
	Name       string
	Labels     []string      // runs-on labels
	Duration   time.Duration // running time once started (default Options.JobDuration)
	Conclusion string        // success (default), failure, ...
}

// RunSpec describes a workflow run to start.
type RunSpec struct {
	Repo     string // "owner/name"; created if unknown
	Workflow string // workflow name (default "CI")
	Event    string // triggering event (default "push")
	Branch   string // default "main"
	// HeadRepo is the run's head repository ("owner/name"), e.g. a fork a
	// pull request comes from; created if unknown. Default: Repo. Its owner
	// is the run's actor.
	HeadRepo string
	// Actor is the login of who triggered the run (actor and
	// triggering_actor), a user created if unknown. Default: the head
	// repository's owner.
	Actor string
	Jobs  []JobSpec
}

// RunInfo identifies a started run.
type RunInfo struct {
	RunID  int64
	JobIDs []int64
}

// JobState is a job's state as the simulator sees it.
type JobState struct {
	ID         int64
	RunID      int64
	Status     string // queued, in_progress, completed
	Conclusion string
	Labels     []string
	RunnerID   int64
	RunnerName string
	StartedAt  time.Time
}

// RunnerState is a runner's state as the simulator sees it.
type RunnerState struct {
	ID        int64
	Name      string
	Online    bool
	Busy      bool
	Ephemeral bool
	Labels    []string
	JobID     int64
}

// StartRun creates a workflow run with its jobs queued, delivers
// workflow_run requested and workflow_job queued, and assigns jobs to idle
// matching runners.
func (s *Server) StartRun(spec RunSpec) (RunInfo, error) {
	owner, name, ok := strings.Cut(spec.Repo, "/")
	if !ok || owner == "" || name == "" || len(spec.Jobs) == 0 {
		return RunInfo{}, fmt.Errorf("ghsim: StartRun needs owner/name and at least one job")
	}
	s.mu.Lock()
	now := s.now()
	repo := s.repoLocked(owner, name)
	run := &simRun{id: s.nextID(), workflowID: 7000 + int64(len(s.runs)%7), attempt: 1, repo: repo,
		actor: repo.owner, name: def(spec.Workflow, "CI"), event: def(spec.Event, "push"),
		branch: def(spec.Branch, "main"), status: "queued", created: now, updated: now}
	run.number = len(s.runs) + 1
	run.path = ".github/workflows/" + strings.ToLower(strings.ReplaceAll(run.name, " ", "-")) + ".yml"
	run.title = "Simulated run " + fmt.Sprint(run.number)
	run.sha = fmt.Sprintf("%040x", run.id)
	run.head = repo
	if spec.HeadRepo != "" && spec.HeadRepo != spec.Repo {
		ho, hn, ok := strings.Cut(spec.HeadRepo, "/")
		if !ok || ho == "" || hn == "" {
			s.mu.Unlock()
			return RunInfo{}, fmt.Errorf("ghsim: StartRun: head repository %q is not owner/name", spec.HeadRepo)
		}
		if s.accounts[strings.ToLower(ho)] == nil {
			s.accountLocked(ho, "User") // a fork's owner is usually a person
		}
		run.head = s.repoLocked(ho, hn)
		run.head.fork = true
		run.actor = run.head.owner
	}
	if spec.Actor != "" {
		run.actor = s.accountLocked(spec.Actor, "User")
	}
	run.inst = s.installForLocked(repo.owner)
	s.runs[run.id] = run
	info := RunInfo{RunID: run.id}
	s.webhookLocked(run, "workflow_run", "requested", nil)
	for _, js := range spec.Jobs {
		j := &simJob{id: s.nextID(), run: run, attempt: 1, name: def(js.Name, "build"), labels: append([]string{}, js.Labels...),
			duration: js.Duration, outcome: def(js.Conclusion, "success"), status: "queued", created: now}
		if j.duration == 0 {
			j.duration = s.opts.JobDuration
		}
		s.jobs[j.id] = j
		run.jobs = append(run.jobs, j)
		s.queued = append(s.queued, j)
		info.JobIDs = append(info.JobIDs, j.id)
		s.webhookLocked(run, "workflow_job", "queued", j)
	}
	s.dispatchLocked()
	s.mu.Unlock()
	s.pump()
	return info, nil
}

func def(v, d string) string {
	if v == "" {
		return d
	}
	return v
}

func (s *Server) installForLocked(a *simAccount) *simInstall {
	var best *simInstall
	for _, in := range s.installs {
		if in.account == a && (best == nil || in.id < best.id) {
			best = in
		}
	}
	return best
}

// labelsMatch is GitHub's rule: every job label is among the runner's
// labels, compared case-insensitively.
func labelsMatch(job []string, runner []simLabel) bool {
	for _, want := range job {
		found := false
		for _, l := range runner {
			if strings.EqualFold(l.name, want) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// canRun is GitHub's choice of a runner for a queued job: connected and
// idle; the job's repository's own runner, or a runner of its organization
// whose group admits the run (unless groups are ignored); and the job's
// labels among the runner's.
func (s *Server) canRun(r *simRunner, j *simJob) bool {
	if !r.online || r.job != nil {
		return false
	}
	if r.scaleSet != j.scaleSet || (j.scaleSet != nil && j.ssState != ssAcquired) {
		return false // a scale set's job goes to its runners once acquired, and only there
	}
	if r.repo != nil {
		if r.repo != j.run.repo {
			return false
		}
	} else if r.account != j.run.repo.owner {
		return false
	} else if !s.opts.IgnoreRunnerGroups {
		if g := s.groupLocked(r.account, r.groupID); g == nil || !g.admits(j.run) {
			return false
		}
	}
	return labelsMatch(j.labels, r.labels)
}

// dispatchLocked assigns queued jobs, oldest first, to idle runners that
// may run them (canRun).
func (s *Server) dispatchLocked() {
	if len(s.queued) == 0 {
		return
	}
	for _, j := range s.queued {
		s.offerLocked(j)
	}
	ids := make([]int64, 0, len(s.runners))
	for id := range s.runners {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(a, b int) bool { return ids[a] < ids[b] })
	rest := s.queued[:0]
	for _, j := range s.queued {
		var pick *simRunner
		for _, id := range ids {
			if r := s.runners[id]; s.canRun(r, j) {
				pick = r
				break
			}
		}
		if pick == nil {
			rest = append(rest, j)
			continue
		}
		s.startLocked(j, pick)
	}
	for i := len(rest); i < len(s.queued); i++ {
		s.queued[i] = nil
	}
	s.queued = rest
}

func (s *Server) startLocked(j *simJob, r *simRunner) {
	now := s.now()
	r.job = j
	j.status, j.started, j.due = "in_progress", now, now.Add(j.duration)
	if r.remote {
		j.due = noDue // the runner reports completion itself
		close(r.wake)
		r.wake = make(chan struct{})
	}
	j.runnerID, j.runnerName, j.groupID = r.id, r.name, r.groupID
	j.groupName = "Default"
	for _, g := range r.account.groups {
		if g.id == r.groupID {
			j.groupName = g.name
		}
	}
	run := j.run
	if run.status == "queued" {
		run.status, run.updated = "in_progress", now
		s.webhookLocked(run, "workflow_run", "in_progress", nil)
	}
	s.webhookLocked(run, "workflow_job", "in_progress", j)
	if j.scaleSet != nil {
		s.jobMessageLocked(j.scaleSet, j, "JobStarted", obj{"runnerId": r.id, "runnerName": r.name, "runnerAssignTime": ts(now)})
	}
}

// finishLocked completes a job (queued or running) with conclusion.
func (s *Server) finishLocked(j *simJob, conclusion string) {
	now := s.now()
	if j.status == "queued" {
		for i, q := range s.queued {
			if q == j {
				s.queued = append(s.queued[:i], s.queued[i+1:]...)
				break
			}
		}
	}
	j.status, j.conclusion, j.completed = "completed", conclusion, now
	if ss := j.scaleSet; ss != nil && s.scaleSets[ss.id] == ss {
		s.jobMessageLocked(ss, j, "JobCompleted", obj{"result": scaleSetResult(conclusion), "runnerId": j.runnerID,
			"runnerName": j.runnerName, "finishTime": ts(now)})
	}
	if r := s.runners[j.runnerID]; r != nil && r.job == j {
		r.job = nil
		if r.ephemeral {
			delete(s.runners, r.id) // GitHub removes an ephemeral runner after its job
		}
	}
	run := j.run
	run.updated = now
	s.webhookLocked(run, "workflow_job", "completed", j)
	done, concl := true, "success"
	for _, x := range run.jobs {
		switch {
		case x.status != "completed":
			done = false
		case x.conclusion == "cancelled" && concl == "success":
			concl = "cancelled"
		case x.conclusion == "failure":
			concl = "failure"
		}
	}
	if done {
		run.status, run.conclusion = "completed", concl
		s.webhookLocked(run, "workflow_run", "completed", nil)
	}
}

// Step completes every running job whose time has come on the simulator's
// clock, in order, then dispatches queued jobs to freed runners. Every API
// request and control call steps first; call it after advancing the clock
// to see completions without making a request.
func (s *Server) Step() {
	s.mu.Lock()
	now := s.now()
	var due []*simJob
	for _, j := range s.jobs {
		if j.status == "in_progress" && !now.Before(j.due) {
			due = append(due, j)
		}
	}
	sort.Slice(due, func(a, b int) bool {
		if !due[a].due.Equal(due[b].due) {
			return due[a].due.Before(due[b].due)
		}
		return due[a].id < due[b].id
	})
	for _, j := range due {
		s.finishLocked(j, j.outcome)
	}
	if len(due) > 0 {
		s.dispatchLocked()
	}
	s.mu.Unlock()
	s.pump()
}

// CancelJob cancels a queued or running job (conclusion "cancelled").
func (s *Server) CancelJob(jobID int64) error {
	s.Step()
	s.mu.Lock()
	j := s.jobs[jobID]
	if j == nil || j.status == "completed" {
		s.mu.Unlock()
		return fmt.Errorf("cancelling job %d: %w", jobID, ErrUnknown)
	}
	s.finishLocked(j, "cancelled")
	s.dispatchLocked()
	s.mu.Unlock()
	s.pump()
	return nil
}

// jitFiles is the simulated content of an encoded JIT configuration: the
// runner's settings files, as the real one carries (.runner, .credentials,
// .credentials_rsaparams), each base64 encoded.
type jitFiles struct {
	Runner      string `json:".runner"`
	Credentials string `json:".credentials"`
	RSAParams   string `json:".credentials_rsaparams"`
}

func (s *Server) encodeJITLocked(r *simRunner) string {
	secret := s.tokenLocked("JIT", 40, alnum)
	s.jitSecrets[secret] = r.id
	runnerFile, _ := json.Marshal(map[string]any{"AgentId": r.id, "AgentName": r.name, "PoolId": r.groupID,
		"ServerUrl": s.webBase + "/_services/pipelines", "GitHubUrl": s.webBase + "/" + r.account.login,
		"WorkFolder": "_work", "Ephemeral": true})
	cred, _ := json.Marshal(map[string]any{"Scheme": "OAuthAccessToken",
		"Data": map[string]string{"clientId": fmt.Sprintf("sim-%d", r.id), "authorizationUrl": s.webBase + "/_apis/oauth2/token"}})
	params, _ := json.Marshal(map[string]string{"d": secret})
	all, _ := json.Marshal(jitFiles{
		Runner:      base64.StdEncoding.EncodeToString(runnerFile),
		Credentials: base64.StdEncoding.EncodeToString(cred),
		RSAParams:   base64.StdEncoding.EncodeToString(params),
	})
	return s.secretLocked(base64.StdEncoding.EncodeToString(all))
}

// ConnectRunner starts the runner that an encoded JIT configuration
// registered, as `run.sh --jitconfig` would: it goes online and picks up a
// matching queued job. A configuration works once.
func (s *Server) ConnectRunner(encodedJITConfig string) (int64, error) {
	return s.ConnectRunnerVersion(encodedJITConfig, "")
}

// ConnectRunnerVersion is ConnectRunner for a runner of the given version,
// checked against GitHub's rules (releases.go): ErrBelowMinimum or
// ErrDeprecated leave the runner offline and its configuration unused.
func (s *Server) ConnectRunnerVersion(encodedJITConfig, version string) (int64, error) {
	r, err := s.connect(encodedJITConfig, false, version)
	if err != nil {
		return 0, err
	}
	return r.id, nil
}

// connect brings the runner of an encoded JIT configuration online, once,
// and dispatches queued jobs. A remote runner gets a session and completes
// its jobs itself. It returns a copy of the runner's identity.
func (s *Server) connect(encodedJITConfig string, remote bool, version string) (simRunner, error) {
	secret, err := jitSecret(encodedJITConfig)
	if err != nil {
		return simRunner{}, fmt.Errorf("connecting runner: %w: %w", ErrUnknown, errMalformedJIT)
	}
	s.Step()
	s.mu.Lock()
	id, ok := s.jitSecrets[secret]
	if !ok {
		s.mu.Unlock()
		return simRunner{}, fmt.Errorf("connecting runner: %w", ErrUnknown)
	}
	r := s.runners[id]
	if r == nil || r.online || r.version != "" {
		s.mu.Unlock()
		return simRunner{}, fmt.Errorf("connecting runner %d: %w", id, ErrUsed)
	}
	if err := s.versionCheckLocked(version); err != nil {
		s.mu.Unlock()
		return simRunner{}, fmt.Errorf("connecting runner %d: %w", id, err)
	}
	if version == "" {
		version = "2.330.0"
	}
	r.online, r.version, r.os = true, version, s.opts.RunnerOS
	if remote {
		r.remote, r.session, r.wake = true, s.tokenLocked("RUNNERSESSION", 40, alnum), make(chan struct{})
	}
	s.dispatchLocked()
	out := simRunner{id: r.id, name: r.name, session: r.session}
	s.mu.Unlock()
	s.pump()
	return out, nil
}

// errMalformedJIT: the encoded JIT configuration does not decode.
var errMalformedJIT = errors.New("malformed JIT configuration")

// jitSecret reads the secret out of an encoded JIT configuration.
func jitSecret(encoded string) (string, error) {
	raw, err := base64.StdEncoding.DecodeString(encoded)
	if err != nil {
		return "", err
	}
	var f jitFiles
	if err := json.Unmarshal(raw, &f); err != nil {
		return "", err
	}
	var p map[string]string
	pb, err := base64.StdEncoding.DecodeString(f.RSAParams)
	if err != nil {
		return "", err
	}
	if err := json.Unmarshal(pb, &p); err != nil {
		return "", err
	}
	return p["d"], nil
}

// RunnerSpec describes a runner registered with a registration token.
type RunnerSpec struct {
	Name      string
	Labels    []string // custom labels; self-hosted, OS and arch are added
	Ephemeral bool
	GroupID   int64 // default 1
}

// RegisterRunner registers and starts a runner with a registration token, as
// `config.sh --token` then `run.sh` would, and returns its id.
func (s *Server) RegisterRunner(token string, spec RunnerSpec) (int64, error) {
	s.Step()
	s.mu.Lock()
	t := s.regTokens[token]
	if t == nil {
		s.mu.Unlock()
		return 0, fmt.Errorf("registering runner: %w registration token", ErrUnknown)
	}
	if !s.now().Before(t.expires) {
		s.mu.Unlock()
		return 0, fmt.Errorf("registering runner: %w", ErrExpired)
	}
	if s.runnerByNameLocked(t.account, t.repo, spec.Name) != nil {
		s.mu.Unlock()
		return 0, fmt.Errorf("registering runner: name %q already exists", spec.Name)
	}
	r := s.newRunnerLocked(t.account, t.repo, spec.Name, max(spec.GroupID, 1), spec.Labels)
	r.ephemeral, r.online, r.version, r.os = spec.Ephemeral, true, "2.330.0", s.opts.RunnerOS
	s.dispatchLocked()
	s.mu.Unlock()
	s.pump()
	return r.id, nil
}

// DisconnectRunner takes a runner offline; a job it was running fails, as a
// job whose runner vanished does on GitHub.
func (s *Server) DisconnectRunner(runnerID int64) error {
	s.Step()
	s.mu.Lock()
	r := s.runners[runnerID]
	if r == nil {
		s.mu.Unlock()
		return fmt.Errorf("disconnecting runner %d: %w", runnerID, ErrUnknown)
	}
	r.online = false
	if r.job != nil {
		s.finishLocked(r.job, "failure")
	}
	s.mu.Unlock()
	s.pump()
	return nil
}

func (s *Server) newRunnerLocked(a *simAccount, repo *simRepo, name string, group int64, custom []string) *simRunner {
	r := &simRunner{id: s.nextID(), name: name, os: "unknown", account: a, repo: repo, groupID: group}
	for _, l := range []string{"self-hosted", s.opts.RunnerOS, s.opts.RunnerArch} {
		r.labels = append(r.labels, simLabel{id: int64(len(r.labels) + 1), name: l, typ: "read-only"})
	}
	for _, l := range custom {
		if !labelsMatch([]string{l}, r.labels) {
			r.labels = append(r.labels, simLabel{id: int64(len(r.labels) + 1), name: l, typ: "custom"})
		}
	}
	s.runners[r.id] = r
	return r
}

func (s *Server) runnerByNameLocked(a *simAccount, repo *simRepo, name string) *simRunner {
	for _, r := range s.runners {
		if r.account == a && r.repo == repo && strings.EqualFold(r.name, name) {
			return r
		}
	}
	return nil
}

// Job returns a job's state.
func (s *Server) Job(id int64) (JobState, bool) {
	s.Step()
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.jobs[id]
	if j == nil {
		return JobState{}, false
	}
	return JobState{ID: j.id, RunID: j.run.id, Status: j.status, Conclusion: j.conclusion,
		Labels: append([]string{}, j.labels...), RunnerID: j.runnerID, RunnerName: j.runnerName, StartedAt: j.started}, true
}

// JobStatuses returns the status of each of the jobs (queued, in_progress,
// completed; absent when the simulator has no such job) after one Step: a
// snapshot of many jobs for the price of one Job call.
func (s *Server) JobStatuses(ids []int64) map[int64]string {
	s.Step()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[int64]string, len(ids))
	for _, id := range ids {
		if j := s.jobs[id]; j != nil {
			out[id] = j.status
		}
	}
	return out
}

// Runners returns every registered runner, by id.
func (s *Server) Runners() []RunnerState {
	s.Step()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]RunnerState, 0, len(s.runners))
	for _, r := range s.runners {
		st := RunnerState{ID: r.id, Name: r.name, Online: r.online, Busy: r.job != nil, Ephemeral: r.ephemeral}
		for _, l := range r.labels {
			st.Labels = append(st.Labels, l.name)
		}
		if r.job != nil {
			st.JobID = r.job.id
		}
		out = append(out, st)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].ID < out[b].ID })
	return out
}

// scaleSetResult is a conclusion as a JobCompleted's result.
func scaleSetResult(conclusion string) string {
	switch conclusion {
	case "success":
		return "succeeded"
	case "failure":
		return "failed"
	case "cancelled":
		return "canceled"
	}
	return conclusion
}
