package ghsim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Operations, named by GitHub's method and path template. Fault keys,
// Requests and Exchange.Op use them.
const (
	OpCreateInstallationToken = "POST /app/installations/{installation_id}/access_tokens"
	OpGetOrgInstallation      = "GET /orgs/{org}/installation"
	OpGetRepoInstallation     = "GET /repos/{owner}/{repo}/installation"
	OpListHookDeliveries      = "GET /app/hook/deliveries"
	OpRedeliverHookDelivery   = "POST /app/hook/deliveries/{delivery_id}/attempts"
	OpGenerateOrgJITConfig    = "POST /orgs/{org}/actions/runners/generate-jitconfig"
	OpGenerateRepoJITConfig   = "POST /repos/{owner}/{repo}/actions/runners/generate-jitconfig"
	OpListRunnerGroups        = "GET /orgs/{org}/actions/runner-groups"
	OpCreateRunnerGroup       = "POST /orgs/{org}/actions/runner-groups"
	OpGetRunnerGroup          = "GET /orgs/{org}/actions/runner-groups/{runner_group_id}"
	OpUpdateRunnerGroup       = "PATCH /orgs/{org}/actions/runner-groups/{runner_group_id}"
	OpListGroupRepos          = "GET /orgs/{org}/actions/runner-groups/{runner_group_id}/repositories"
	OpSetGroupRepos           = "PUT /orgs/{org}/actions/runner-groups/{runner_group_id}/repositories"
	OpListInstallationRepos   = "GET /installation/repositories"
	OpCreateOrgRegToken       = "POST /orgs/{org}/actions/runners/registration-token"
	OpCreateRepoRegToken      = "POST /repos/{owner}/{repo}/actions/runners/registration-token"
	OpListOrgRunners          = "GET /orgs/{org}/actions/runners"
	OpListRepoRunners         = "GET /repos/{owner}/{repo}/actions/runners"
	OpGetOrgRunner            = "GET /orgs/{org}/actions/runners/{runner_id}"
	OpGetRepoRunner           = "GET /repos/{owner}/{repo}/actions/runners/{runner_id}"
	OpDeleteOrgRunner         = "DELETE /orgs/{org}/actions/runners/{runner_id}"
	OpDeleteRepoRunner        = "DELETE /repos/{owner}/{repo}/actions/runners/{runner_id}"
	OpGetJob                  = "GET /repos/{owner}/{repo}/actions/jobs/{job_id}"
	OpGetWorkflowRun          = "GET /repos/{owner}/{repo}/actions/runs/{run_id}"
	OpListRunJobs             = "GET /repos/{owner}/{repo}/actions/runs/{run_id}/jobs"
	OpGetPermissionLevel      = "GET /repos/{owner}/{repo}/collaborators/{username}/permission"
	// OpWebhook is not an endpoint: its Fault drops outgoing webhook
	// deliveries (ErrorRate, FailNext), which are recorded as failed.
	OpWebhook = "webhook"
)

const docsURL = "https://docs.github.com/rest"

// Fault is injected into one operation. Faults apply before authentication,
// like a load balancer's, except that rate-limit windows count as GitHub's.
type Fault struct {
	// ErrorRate is the chance (seeded) that a request is answered with
	// ErrorStatus instead of being served; for OpWebhook, that a delivery is dropped.
	ErrorRate float64
	// FailNext answers the next n requests with ErrorStatus (or drops the
	// next n webhook deliveries), before ErrorRate applies.
	FailNext int
	// ErrorStatus defaults to 502.
	ErrorStatus int
	// LoseResponse makes ErrorRate and FailNext act after the request is served: GitHub
	// acts (creates the runner, mints the token), but the caller gets ErrorStatus, as when
	// a proxy or the network drops the answer. Such a request is authenticated first.
	LoseResponse bool
	// Latency delays every answer by this much real time (bounded by the
	// request's context), to test the client's deadlines.
	Latency time.Duration
	// LimitUntil opens a secondary rate-limit window: until this simulated
	// time, requests get LimitStatus with a secondary-limit message.
	LimitUntil time.Time
	// LimitStatus is 403 (default) or 429.
	LimitStatus int
	// RetryAfter, if set, is sent as the Retry-After header of a limited answer.
	RetryAfter time.Duration
	// EOF makes ErrorRate and FailNext close the connection without an
	// answer instead, as a broker dropping it does.
	EOF bool
}

// SetFault injects f into op (one of the Op constants), replacing any fault.
func (s *Server) SetFault(op string, f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f.ErrorStatus == 0 {
		f.ErrorStatus = http.StatusBadGateway
	}
	if f.LimitStatus == 0 {
		f.LimitStatus = http.StatusForbidden
	}
	s.faults[op] = &f
}

// ClearFaults removes every fault.
func (s *Server) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = map[string]*Fault{}
}

type authMode int

const (
	authJWT authMode = iota
	authToken
	authNone // no credential (the manifest conversion)
)

// call is the context of one request being served.
type call struct {
	w    http.ResponseWriter
	r    *http.Request
	app  *simApp     // authJWT
	inst *simInstall // authToken
}

func (c *call) json(status int, v any) {
	c.w.Header().Set("Content-Type", "application/json; charset=utf-8")
	c.w.WriteHeader(status)
	_ = json.NewEncoder(c.w).Encode(v)
}

func (c *call) fail(status int, msg string) {
	c.json(status, map[string]any{"message": msg, "documentation_url": docsURL, "status": strconv.Itoa(status)})
}

func (c *call) noContent() { c.w.WriteHeader(http.StatusNoContent) }

type recorder struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (r *recorder) WriteHeader(s int) {
	r.status = s
	r.ResponseWriter.WriteHeader(s)
}

// Unwrap lets an http.ResponseController reach the connection.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	r.body.Write(b)
	return r.ResponseWriter.Write(b)
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	h := func(op string, mode authMode, fn func(*call)) {
		method, path, _ := strings.Cut(op, " ")
		mux.HandleFunc(method+" "+s.opts.BasePath+path, func(w http.ResponseWriter, r *http.Request) {
			s.serve(op, mode, fn, w, r)
		})
	}
	h(OpCreateInstallationToken, authJWT, s.createInstallationToken)
	h(OpGetOrgInstallation, authJWT, s.getOrgInstallation)
	h(OpGetRepoInstallation, authJWT, s.getRepoInstallation)
	h(OpListHookDeliveries, authJWT, s.listHookDeliveries)
	h(OpRedeliverHookDelivery, authJWT, s.redeliverHookDelivery)
	h(OpGenerateOrgJITConfig, authToken, s.generateJITConfig)
	h(OpGenerateRepoJITConfig, authToken, s.generateJITConfig)
	h(OpListRunnerGroups, authToken, s.listRunnerGroups)
	h(OpCreateRunnerGroup, authToken, s.createRunnerGroup)
	h(OpGetRunnerGroup, authToken, s.getRunnerGroup)
	h(OpUpdateRunnerGroup, authToken, s.updateRunnerGroup)
	h(OpListGroupRepos, authToken, s.listGroupRepositories)
	h(OpSetGroupRepos, authToken, s.setGroupRepositories)
	h(OpListInstallationRepos, authToken, s.listInstallationRepositories)
	h(OpCreateOrgRegToken, authToken, s.createRegToken)
	h(OpCreateRepoRegToken, authToken, s.createRegToken)
	h(OpListOrgRunners, authToken, s.listRunners)
	h(OpListRepoRunners, authToken, s.listRunners)
	h(OpGetOrgRunner, authToken, s.getRunner)
	h(OpGetRepoRunner, authToken, s.getRunner)
	h(OpDeleteOrgRunner, authToken, s.deleteRunner)
	h(OpDeleteRepoRunner, authToken, s.deleteRunner)
	h(OpGetJob, authToken, s.getJob)
	h(OpGetWorkflowRun, authToken, s.getWorkflowRun)
	h(OpListRunJobs, authToken, s.listRunJobs)
	h(OpGetPermissionLevel, authToken, s.getPermissionLevel)
	h(OpRerunFailedJobs, authToken, s.rerunFailedJobs)
	h(OpCreateAppFromManifest, authNone, s.createAppFromManifest)
	h(OpListReleases, authToken, s.listReleases)
	h(OpGetLatestRelease, authToken, s.latestRelease)
	s.runnerRoutes(mux)
	s.scaleSetRoutes(mux)
	// The browser side of github.com, at the web root.
	mux.HandleFunc("POST /settings/apps/new", s.newAppForm)
	mux.HandleFunc("POST /organizations/{org}/settings/apps/new", s.newAppForm)
	mux.HandleFunc("POST /settings/apps/new/confirm", s.confirmApp)
	mux.HandleFunc("POST /organizations/{org}/settings/apps/new/confirm", s.confirmApp)
	mux.HandleFunc("GET /apps/{slug}/installations/new", s.installPage)
	mux.HandleFunc("POST /apps/{slug}/installations", s.install)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.unmatched++
		s.mu.Unlock()
		(&call{w: w, r: r}).fail(http.StatusNotFound, "Not Found")
	})
	return mux
}

// publicRepo reports whether owner/repo is a public repository outside
// every simulated account that any installation may read: actions/runner,
// for its releases.
func publicRepo(owner, repo string) bool { return owner == "actions" && repo == "runner" }

// maxRequestBody bounds what the simulator reads of a request: skiff's
// largest request is a JIT body with 100 labels, well under 64 KiB.
const maxRequestBody = 1 << 20

func (s *Server) serve(op string, mode authMode, fn func(*call), w http.ResponseWriter, r *http.Request) {
	s.Step()
	reqBody, err := io.ReadAll(io.LimitReader(r.Body, maxRequestBody))
	if err != nil {
		reqBody = nil
	}
	r.Body = io.NopCloser(bytes.NewReader(reqBody))
	rec := &recorder{ResponseWriter: w}
	c := &call{w: rec, r: r}
	w.Header().Set("X-GitHub-Request-Id", fmt.Sprintf("SIM:%d", time.Now().UnixNano()))
	if ok, lost := s.admit(op, mode, c); ok && lost != 0 {
		served := httptest.NewRecorder()
		fn(&call{w: served, r: r, app: c.app, inst: c.inst})
		c.fail(lost, http.StatusText(lost))
	} else if ok {
		fn(c)
	}
	if s.opts.OnExchange != nil {
		s.opts.OnExchange(Exchange{Op: op, Request: reqBody, Status: rec.status, Header: rec.Header().Clone(), Body: rec.body.Bytes()})
	}
	s.pump()
}

// admit applies faults, authentication and the rate limit; it answers and
// returns false when the request must not be served. lost is the status that
// replaces the answer of a request served under a LoseResponse fault, else 0.
func (s *Server) admit(op string, mode authMode, c *call) (ok bool, lost int) {
	f, ok := s.delay(op, c)
	if !ok {
		return false, 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if f != nil {
		if ok, lost = s.injectFault(f, c, now); !ok {
			return false, 0
		}
	}
	if mode == authNone {
		return true, lost
	}
	cred, ok := bearer(c.r)
	if !ok {
		c.fail(http.StatusUnauthorized, "Requires authentication")
		return false, 0
	}
	if mode == authJWT {
		app, err := s.verifyJWTLocked(cred, now)
		if err != nil {
			c.fail(http.StatusUnauthorized, "A JSON web token could not be decoded")
			return false, 0
		}
		c.app = app
		return true, lost
	}
	if !s.admitTokenLocked(cred, c, now) {
		return false, 0
	}
	return true, lost
}

// delay counts the request and waits the op's fault latency, if any; it
// returns the op's fault, or false when the client gave up waiting.
func (s *Server) delay(op string, c *call) (*Fault, bool) {
	s.mu.Lock()
	s.requests[op]++
	f := s.faults[op]
	var latency time.Duration
	if f != nil {
		latency = f.Latency
	}
	s.mu.Unlock()
	if latency > 0 {
		t := time.NewTimer(latency)
		select {
		case <-t.C:
		case <-c.r.Context().Done():
			t.Stop()
			return nil, false
		}
	}
	return f, true
}

// injectFault answers with the op's fault when it strikes now: a secondary
// rate limit while it lasts, the next failures or a random one. A lost
// response is not answered here: its status is returned as lost, and the
// request is carried out.
func (s *Server) injectFault(f *Fault, c *call, now time.Time) (ok bool, lost int) {
	if now.Before(f.LimitUntil) {
		if f.RetryAfter > 0 {
			c.w.Header().Set("Retry-After", strconv.Itoa(int((f.RetryAfter+time.Second-1)/time.Second)))
		}
		c.fail(f.LimitStatus, "You have exceeded a secondary rate limit. Please wait a few minutes before you try again.")
		return false, 0
	}
	if f.FailNext > 0 || (f.ErrorRate > 0 && s.rng.Float64() < f.ErrorRate) {
		if f.FailNext > 0 {
			f.FailNext--
		}
		if f.EOF {
			if conn, _, err := http.NewResponseController(c.w).Hijack(); err == nil {
				_ = conn.Close()
			}
			return false, 0
		}
		if !f.LoseResponse {
			c.fail(f.ErrorStatus, http.StatusText(f.ErrorStatus))
			return false, 0
		}
		return true, f.ErrorStatus
	}
	return true, 0
}

// admitTokenLocked admits an installation token that has not expired, on
// an installation with requests left this hour and whose account owns the
// path's organisation or repository; it charges the rate limit.
func (s *Server) admitTokenLocked(cred string, c *call, now time.Time) bool {
	t := s.tokens[cred]
	if t == nil || !now.Before(t.expires) {
		c.fail(http.StatusUnauthorized, "Bad credentials")
		return false
	}
	in := t.inst
	if !now.Before(in.reset) {
		in.left, in.reset = in.limit, now.Add(time.Hour).Truncate(time.Second)
	}
	h := c.w.Header()
	if in.left <= 0 {
		s.rateHeaders(h, in)
		c.fail(http.StatusForbidden, fmt.Sprintf("API rate limit exceeded for installation ID %d.", in.id))
		return false
	}
	in.left--
	s.rateHeaders(h, in)
	owner := c.r.PathValue("org")
	if owner == "" {
		owner = c.r.PathValue("owner")
	}
	// "": /installation/...; actions/runner is public, readable by every installation.
	if owner != "" && !strings.EqualFold(owner, in.account.login) && !publicRepo(c.r.PathValue("owner"), c.r.PathValue("repo")) {
		c.fail(http.StatusForbidden, "Resource not accessible by integration")
		return false
	}
	c.inst = in
	return true
}

func (s *Server) rateHeaders(h http.Header, in *simInstall) {
	h.Set("X-RateLimit-Limit", strconv.Itoa(in.limit))
	h.Set("X-RateLimit-Remaining", strconv.Itoa(max(in.left, 0)))
	h.Set("X-RateLimit-Used", strconv.Itoa(in.limit-max(in.left, 0)))
	h.Set("X-RateLimit-Reset", strconv.FormatInt(in.reset.Unix(), 10))
	h.Set("X-RateLimit-Resource", "core")
}

func bearer(r *http.Request) (string, bool) {
	a := r.Header.Get("Authorization")
	for _, p := range []string{"Bearer ", "bearer ", "token "} {
		if v, ok := strings.CutPrefix(a, p); ok && v != "" {
			return v, true
		}
	}
	return "", false
}

// verifyJWTLocked checks an App JWT as GitHub does: RS256, signed by the App
// named in iss, not expired, and expiring at most 10 minutes from now.
func (s *Server) verifyJWTLocked(tok string, now time.Time) (*simApp, error) {
	var app *simApp
	claims := &jwt.RegisteredClaims{}
	_, err := jwt.ParseWithClaims(tok, claims, func(t *jwt.Token) (any, error) {
		iss, _ := t.Claims.GetIssuer()
		id, err := strconv.ParseInt(iss, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("iss %q is not an App id", iss)
		}
		app = s.apps[id]
		if app == nil || app.PublicKey == nil {
			return nil, fmt.Errorf("unknown App %d", id)
		}
		return app.PublicKey, nil
	}, jwt.WithValidMethods([]string{"RS256"}), jwt.WithTimeFunc(func() time.Time { return now }),
		jwt.WithExpirationRequired(), jwt.WithIssuedAt())
	if err != nil {
		return nil, err
	}
	if claims.ExpiresAt.Sub(now) > 10*time.Minute || claims.IssuedAt == nil {
		return nil, fmt.Errorf("exp too far in the future or no iat")
	}
	s.secretLocked(tok)
	return app, nil
}
