package ghsim

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Runner sessions over HTTP: what the real runner does with GitHub's broker
// after `run.sh --jitconfig`, reduced to four calls, so that a separate
// process (cmd/skiff-standin, or a test) can act as a runner. They go
// through the simulator's own state — the same single-use JIT
// configurations, dispatch and webhooks as ConnectRunner and Step — except
// that a job dispatched to such a runner runs until the runner reports it
// complete (its JobSpec.Duration does not apply).
//
//	POST /_sim/runner/connect              {"encoded_jit_config": "...", "runner_version": "2.333.0"}
//	     201 {"runner_id", "runner_name", "session"}; 400 malformed,
//	     403 {"message", "reason": "below_minimum" | "deprecated"} (releases.go),
//	     404 unknown (or deleted) runner, 409 configuration already used
//	GET  /_sim/runner/{runner_id}/job      long poll, up to ?wait= (default 5 s, at most 30 s)
//	     200 {"id", "run_id", "name", "labels", "repository", "status"}; 204 no job yet;
//	     410 the runner is gone (GitHub removed it after its job)
//	POST /_sim/runner/{runner_id}/job/{job_id}/complete   {"conclusion": "success" | "failure"}
//	     204; 409 the job is not this runner's running job (cancelled meanwhile)
//	POST /_sim/runner/{runner_id}/disconnect
//	     204, also for a runner already gone; a job it still runs fails
//
// Every call but connect carries the session as "Authorization: Bearer
// <session>"; a wrong or missing session is 401. The paths are under the
// simulator's root, not its API base path: the JIT configuration names the
// root (its .runner file's ServerUrl), as GitHub's names the broker.
const (
	OpRunnerConnect    = "POST /_sim/runner/connect"
	OpRunnerJob        = "GET /_sim/runner/{runner_id}/job"
	OpRunnerComplete   = "POST /_sim/runner/{runner_id}/job/{job_id}/complete"
	OpRunnerDisconnect = "POST /_sim/runner/{runner_id}/disconnect"
)

// Long-poll bounds of OpRunnerJob: long enough that an idle runner costs a
// request every few seconds, short enough for proxies and test timeouts.
const (
	DefaultRunnerPoll = 5 * time.Second
	maxRunnerPoll     = 30 * time.Second
)

// noDue is the due time of a job run by a remote runner: never, on any
// simulated clock.
var noDue = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)

// RunnerSession is the answer to OpRunnerConnect.
type RunnerSession struct {
	RunnerID   int64  `json:"runner_id"`
	RunnerName string `json:"runner_name"`
	// Session authenticates the runner's later calls (a secret).
	Session string `json:"session"`
}

// RunnerJob is the answer to OpRunnerJob: the job dispatched to the runner.
type RunnerJob struct {
	ID         int64    `json:"id"`
	RunID      int64    `json:"run_id"`
	Name       string   `json:"name"`
	Labels     []string `json:"labels"`
	Repository string   `json:"repository"`
	Status     string   `json:"status"`
}

// BrokerURL returns the simulator's root URL that an encoded JIT
// configuration names (its .runner file's ServerUrl, less its path): where
// a runner process connects.
func BrokerURL(encodedJITConfig string) (string, error) {
	raw, err := base64.StdEncoding.DecodeString(encodedJITConfig)
	if err != nil {
		return "", errors.New("decoding JIT configuration: not base64")
	}
	var f jitFiles
	if err := json.Unmarshal(raw, &f); err != nil {
		return "", errors.New("decoding JIT configuration: not the runner's settings files")
	}
	rb, err := base64.StdEncoding.DecodeString(f.Runner)
	if err != nil {
		return "", errors.New("decoding JIT configuration: .runner is not base64")
	}
	var runner struct{ ServerURL string }
	if err := json.Unmarshal(rb, &runner); err != nil {
		return "", errors.New("decoding JIT configuration: .runner is not JSON")
	}
	u, err := url.Parse(runner.ServerURL)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return "", errors.New("decoding JIT configuration: .runner has no server URL")
	}
	return u.Scheme + "://" + u.Host, nil
}

func (s *Server) runnerRoutes(mux *http.ServeMux) {
	h := func(op string, fn func(*call)) {
		mux.HandleFunc(op, func(w http.ResponseWriter, r *http.Request) {
			s.Step()
			s.mu.Lock()
			s.requests[op]++
			s.mu.Unlock()
			r.Body = http.MaxBytesReader(w, r.Body, maxRequestBody)
			fn(&call{w: w, r: r})
			s.pump()
		})
	}
	h(OpRunnerConnect, s.runnerConnect)
	h(OpRunnerJob, s.runnerJob)
	h(OpRunnerComplete, s.runnerComplete)
	h(OpRunnerDisconnect, s.runnerDisconnect)
}

func (s *Server) runnerConnect(c *call) {
	var body struct {
		EncodedJITConfig string `json:"encoded_jit_config"`
		RunnerVersion    string `json:"runner_version"`
	}
	if err := json.NewDecoder(c.r.Body).Decode(&body); err != nil || body.EncodedJITConfig == "" {
		c.fail(http.StatusBadRequest, "encoded_jit_config is required")
		return
	}
	r, err := s.connect(body.EncodedJITConfig, true, body.RunnerVersion)
	switch {
	case errors.Is(err, ErrBelowMinimum):
		c.json(http.StatusForbidden, map[string]string{"message": err.Error(), "reason": "below_minimum"})
	case errors.Is(err, ErrDeprecated):
		c.json(http.StatusForbidden, map[string]string{"message": err.Error(), "reason": "deprecated"})
	case errors.Is(err, ErrUsed):
		c.fail(http.StatusConflict, "The JIT configuration was already used")
	case errors.Is(err, errMalformedJIT):
		c.fail(http.StatusBadRequest, "Malformed JIT configuration")
	case err != nil:
		c.fail(http.StatusNotFound, "Not Found")
	default:
		c.json(http.StatusCreated, RunnerSession{RunnerID: r.id, RunnerName: r.name, Session: r.session})
	}
}

// sessionLocked returns the runner the request's path and session name, or
// answers: 401 for a bad session, 410 for a runner that is gone (gone
// reports whether the runner id is unknown, so that disconnect can succeed).
func (s *Server) sessionLocked(c *call) (r *simRunner, gone bool) {
	id, err := strconv.ParseInt(c.r.PathValue("runner_id"), 10, 64)
	if err != nil {
		c.fail(http.StatusNotFound, "Not Found")
		return nil, false
	}
	cred, ok := bearer(c.r)
	if !ok {
		c.fail(http.StatusUnauthorized, "Requires authentication")
		return nil, false
	}
	r = s.runners[id]
	if r == nil {
		return nil, true
	}
	if !r.remote || r.session != cred {
		c.fail(http.StatusUnauthorized, "Bad credentials")
		return nil, false
	}
	return r, false
}

func (s *Server) runnerJob(c *call) {
	wait := DefaultRunnerPoll
	if v := c.r.URL.Query().Get("wait"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			c.fail(http.StatusBadRequest, "wait must be a duration")
			return
		}
		wait = min(d, maxRunnerPoll)
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		s.mu.Lock()
		r, gone := s.sessionLocked(c)
		switch {
		case gone:
			s.mu.Unlock()
			c.fail(http.StatusGone, "The runner was removed")
			return
		case r == nil:
			s.mu.Unlock()
			return
		case r.job != nil:
			j := r.job
			out := RunnerJob{ID: j.id, RunID: j.run.id, Name: j.name, Labels: append([]string{}, j.labels...),
				Repository: j.run.repo.fullName(), Status: j.status}
			s.mu.Unlock()
			c.json(http.StatusOK, out)
			return
		}
		wake := r.wake
		s.mu.Unlock()
		select {
		case <-wake:
		case <-timer.C:
			c.noContent()
			return
		case <-c.r.Context().Done():
			return
		}
	}
}

func (s *Server) runnerComplete(c *call) {
	var body struct {
		Conclusion string `json:"conclusion"`
	}
	if err := json.NewDecoder(c.r.Body).Decode(&body); err != nil && !errors.Is(err, io.EOF) {
		c.fail(http.StatusBadRequest, "Malformed body")
		return
	}
	switch body.Conclusion {
	case "":
		body.Conclusion = "success"
	case "success", "failure":
	default:
		c.fail(http.StatusUnprocessableEntity, "conclusion must be success or failure")
		return
	}
	jobID, _ := strconv.ParseInt(c.r.PathValue("job_id"), 10, 64)
	s.mu.Lock()
	defer s.mu.Unlock()
	r, gone := s.sessionLocked(c)
	switch {
	case gone:
		c.fail(http.StatusConflict, "The job is not running on this runner")
		return
	case r == nil:
		return
	case r.job == nil || r.job.id != jobID:
		c.fail(http.StatusConflict, "The job is not running on this runner")
		return
	}
	s.finishLocked(r.job, body.Conclusion)
	s.dispatchLocked()
	c.noContent()
}

func (s *Server) runnerDisconnect(c *call) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, gone := s.sessionLocked(c)
	switch {
	case gone:
		c.noContent()
		return
	case r == nil:
		return
	}
	r.online = false
	if r.job != nil {
		s.finishLocked(r.job, "failure")
		s.dispatchLocked()
	}
	c.noContent()
}
