// Package ghsim is a stateful, in-process GitHub simulator for tests, the
// load harness and `skiff local`. It serves the REST endpoints skiff's GitHub
// client uses, with the shapes of GitHub's published API description (its
// tests validate every answer against @octokit/openapi), and delivers signed
// workflow_job and workflow_run webhooks in GitHub's order.
//
// What it models:
//
//   - Apps (public keys, webhook URL and secret), accounts, repositories and
//     installations; installation tokens that expire (one hour), with a
//     per-installation count of mints.
//
//   - An hourly rate-limit budget per installation, with X-RateLimit-* headers.
//
//   - Runner groups and the repositories they admit (every repository,
//     selected repositories or private ones; public repositories only where
//     the group allows them; selected workflows), created and changed over
//     the REST API or with AddRunnerGroup and SetRunnerGroupAccess; runners
//     registered just in time (generate-jitconfig) or with a registration
//     token; online, offline, busy.
//
//   - Workflow runs and their jobs, driven by the simulator's clock:
//
//     StartRun ──► queued ──(a connected, idle runner whose labels are a
//     superset of the job's, case-insensitive, and whose runner group
//     admits the run's repository and workflow)──► in_progress ──(Duration
//     on the simulated clock)──► completed
//     queued or in_progress ──CancelJob──► completed (cancelled)
//
//     Webhooks, per run: workflow_run requested, workflow_job queued (each
//     job), workflow_run in_progress (first job started), workflow_job
//     in_progress, workflow_job completed, workflow_run completed (last job).
//
//   - Repository visibility (public, private, internal; default private),
//     in every repository payload, and each user's permission on a
//     repository (SetPermission; GET .../collaborators/{username}/permission).
//
//   - Webhook deliveries per App (GET /app/hook/deliveries, redelivery).
//
//   - Runner scale sets (scaleset.go): the runner registration, scale sets
//     in runner groups, message sessions, the long-polled message queue,
//     acquirejobs and the scale set's JIT configurations; a job whose
//     labels a scale set has goes to it, not to regular runners.
//
//   - Faults per endpoint (see Fault): error rate, latency, secondary rate
//     limit windows, answers lost after the request was served, dropped
//     webhook deliveries.
//
// Real runners speak another protocol; a test "connects" a runner with
// ConnectRunner (JIT) or RegisterRunner (registration token), and a separate
// process acts as a runner through the runner sessions over HTTP
// (runner_http.go, used by cmd/skiff-standin): connect with its JIT
// configuration, long-poll its job, report it complete, disconnect.
package ghsim

import (
	"crypto/rsa"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"time"
)

// Clock is a manual clock for simulated time. Pass its Now to the simulator
// and the client, and Advance it to make an hour pass instantly.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a clock stopped at start.
func NewClock(start time.Time) *Clock { return &Clock{t: start} }

// Now returns the simulated time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// Options configures a Server. Zero values take the documented defaults.
type Options struct {
	// Now is the simulator's clock (default time.Now). Job durations, token
	// expiry and rate-limit windows follow it.
	Now func() time.Time
	// BasePath is the API's path prefix, e.g. "/api/v3" as on GHES (default none).
	BasePath string
	// Seed seeds the fault injection's random numbers (default 1).
	Seed uint64
	// TokenTTL is an installation token's lifetime (default one hour, as GitHub).
	TokenTTL time.Duration
	// RateLimit is each installation's hourly budget (default 5,000).
	RateLimit int
	// JobDuration is how long a job runs when its JobSpec gives none (default 1 minute).
	JobDuration time.Duration
	// CredentialLength, when set, is the length of the random part of every
	// installation token, registration token and JIT secret, and
	// installation tokens lose their ghs_ prefix: GitHub announced longer
	// tokens of other formats, and skiff must assume neither.
	CredentialLength int
	// SecretPrefix starts every credential the simulator issues (installation
	// and registration tokens, JIT secrets), so canary tests can look for it.
	SecretPrefix string
	// RunnerOS and RunnerArch are the read-only labels of every runner
	// (defaults "Linux" and "X64").
	RunnerOS, RunnerArch string
	// OnExchange, if set, sees every API answer (used to validate them
	// against GitHub's API description).
	OnExchange func(Exchange)
	// WebhookClient sends webhooks (default: 10 s timeout, GitHub's own).
	WebhookClient *http.Client
	// BusyHidden, if set, reports whether the REST API shows the runner of
	// a job that started since ago as not busy: GitHub's busy flag reads
	// false for a while after a job starts and can flip mid-job. Runners()
	// always tells the truth.
	BusyHidden func(job int64, since time.Duration) bool
	// DeleteBusy makes the runner delete endpoints delete a runner that is
	// running a job instead of refusing it with GitHub's 422. A fault model:
	// the refusal is one of the reconciler's four busy signals, and tests
	// take each signal away in turn. The job goes on as if its runner were
	// still there.
	DeleteBusy bool
	// ConfirmApps makes the browser pages of the App-manifest flow and of
	// an App's installation submit themselves, as the operator's click on
	// "Create GitHub App" and "Install" would (headless browser tests).
	ConfirmApps bool
	// BrowserUser is the user signed in to the simulated github.com: the
	// owner of an App created for a personal account (default "octocat").
	BrowserUser string
	// WebhookLanes is how many webhook deliveries are in flight at once
	// (default 1: one at a time, all in the order they were queued). With
	// more, each job's deliveries (and each run's) keep their order on one
	// lane while the lanes deliver at once, as GitHub, which does not wait
	// for one delivery's answer before sending the next, overlaps them.
	WebhookLanes int
	// IgnoreRunnerGroups makes dispatch skip the runner group check: a job
	// goes to any idle organization runner with its labels, whatever its
	// group admits. GitHub never does this; it is for tests of what skiff
	// does when a job it refused ran on its runner anyway (the detection
	// path), which only a broken or bypassed group lets happen. See also
	// SetIgnoreRunnerGroups.
	IgnoreRunnerGroups bool
}

// Exchange is one answered API request.
type Exchange struct {
	Op      string // the operation, e.g. OpGetJob: "GET /repos/{owner}/{repo}/actions/jobs/{job_id}"
	Request []byte // the request's body, as the client sent it
	Status  int
	Header  http.Header
	Body    []byte
}

// AppConfig registers a GitHub App with the simulator.
type AppConfig struct {
	ID            int64
	Slug          string
	PublicKey     *rsa.PublicKey
	WebhookURL    string // empty: the App has no active webhook
	WebhookSecret string
	// InstallationEvents sends the App installation webhooks (created,
	// deleted, suspend, unsuspend) to its webhook, as GitHub does for
	// every App. Apps created from a manifest have it; for Apps added with
	// AddApp it is opt-in, so that tests counting workflow deliveries see
	// only those.
	InstallationEvents bool
}

// Server is the simulator. Its methods are safe for concurrent use.
type Server struct {
	opts    Options
	now     func() time.Time
	ts      *httptest.Server
	apiBase string
	webBase string
	hookHC  *http.Client

	mu         sync.Mutex
	rng        *rand.Rand
	ids        int64
	apps       map[int64]*simApp
	accounts   map[string]*simAccount
	repos      map[string]*simRepo
	installs   map[int64]*simInstall
	tokens     map[string]*simToken
	regTokens  map[string]*simRegToken
	runners    map[int64]*simRunner
	jitSecrets map[string]int64
	runs       map[int64]*simRun
	jobs       map[int64]*simJob
	queued     []*simJob
	faults     map[string]*Fault
	requests   map[string]int
	unmatched  int
	secrets    map[string]bool
	deliveries []*simDelivery
	created    []*CreatedApp
	codes      map[string]*simManifestCode
	releases   []RunnerRelease // newest first
	minRunner  string
	// The scale-set side (scaleset.go).
	ssOpts      ScaleSetOptions
	scaleSets   map[int64]*simScaleSet
	ssSessions  map[string]*simSession
	adminTokens map[string]*simAdminToken
	corruptNext int
	ackedEarly  int

	dmu     sync.Mutex
	outbox  []*simDelivery
	pumping bool
}

type simApp struct {
	AppConfig
	owner    *simAccount // nil for Apps added with AddApp
	created  time.Time
	manifest Manifest
}

type simAccount struct {
	login   string
	id      int64
	typ     string // "Organization" or "User"
	groups  []*simGroup
	created time.Time
}

type simGroup struct {
	id   int64
	name string
	GroupAccess
}

type simRepo struct {
	id         int64
	owner      *simAccount
	name       string
	created    time.Time
	visibility string            // public, private (default) or internal
	fork       bool              // created as the head repository of a fork's run
	roles      map[string]string // lower-case login → role (SetPermission)
}

func (r *simRepo) fullName() string { return r.owner.login + "/" + r.name }

type simInstall struct {
	id      int64
	app     *simApp
	account *simAccount
	created time.Time
	// suspendedAt and suspendedBy are set while the installation is suspended.
	suspendedAt time.Time
	suspendedBy *simAccount
	minted      int
	limit       int
	left        int
	reset       time.Time
}

type simToken struct {
	value   string
	inst    *simInstall
	expires time.Time
}

type simRegToken struct {
	value   string
	account *simAccount
	repo    *simRepo
	expires time.Time
}

// New starts a simulator on 127.0.0.1. Close it when done.
func New(opts Options) *Server {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Seed == 0 {
		opts.Seed = 1
	}
	if opts.TokenTTL == 0 {
		opts.TokenTTL = time.Hour
	}
	if opts.RateLimit == 0 {
		opts.RateLimit = 5000
	}
	if opts.JobDuration == 0 {
		opts.JobDuration = time.Minute
	}
	if opts.RunnerOS == "" {
		opts.RunnerOS = "Linux"
	}
	if opts.RunnerArch == "" {
		opts.RunnerArch = "X64"
	}
	opts.BasePath = strings.TrimRight(opts.BasePath, "/")
	s := &Server{
		opts:       opts,
		now:        opts.Now,
		hookHC:     opts.WebhookClient,
		rng:        rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x9e3779b97f4a7c15)),
		ids:        1000,
		apps:       map[int64]*simApp{},
		accounts:   map[string]*simAccount{},
		repos:      map[string]*simRepo{},
		installs:   map[int64]*simInstall{},
		tokens:     map[string]*simToken{},
		regTokens:  map[string]*simRegToken{},
		runners:    map[int64]*simRunner{},
		jitSecrets: map[string]int64{},
		runs:       map[int64]*simRun{},
		jobs:       map[int64]*simJob{},
		faults:     map[string]*Fault{},
		requests:   map[string]int{},
		secrets:    map[string]bool{},
		codes:      map[string]*simManifestCode{},
	}
	if s.hookHC == nil {
		s.hookHC = &http.Client{Timeout: 10 * time.Second}
	}
	s.ts = httptest.NewServer(s.routes())
	s.webBase = s.ts.URL
	s.apiBase = s.ts.URL + opts.BasePath
	return s
}

// Close stops the server. Webhooks not yet sent are dropped.
func (s *Server) Close() { s.ts.Close() }

// URL is the API base URL to give the client, including BasePath.
func (s *Server) URL() string { return s.apiBase }

func (s *Server) nextID() int64 {
	s.ids++
	return s.ids
}

// AddApp registers an App, or updates a registered one. Its webhooks go to
// cfg.WebhookURL, signed with cfg.WebhookSecret.
func (s *Server) AddApp(cfg AppConfig) {
	if cfg.Slug == "" {
		cfg.Slug = fmt.Sprintf("app-%d", cfg.ID)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if a := s.apps[cfg.ID]; a != nil {
		a.AppConfig = cfg
		return
	}
	s.apps[cfg.ID] = &simApp{AppConfig: cfg, created: s.now()}
}

// SetWebhook changes where an App's webhooks go and their secret (e.g. once
// the receiver under test has started).
func (s *Server) SetWebhook(appID int64, url, secret string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a := s.apps[appID]; a != nil {
		a.WebhookURL, a.WebhookSecret = url, secret
	}
}

// AddOrg creates an organization with its "Default" runner group (id 1).
func (s *Server) AddOrg(login string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.accountLocked(login, "Organization")
}

// AddUser creates a user account (which has repositories but no org runners).
func (s *Server) AddUser(login string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.accountLocked(login, "User")
}

func (s *Server) accountLocked(login, typ string) *simAccount {
	k := strings.ToLower(login)
	if a := s.accounts[k]; a != nil {
		return a
	}
	a := &simAccount{login: login, id: s.nextID(), typ: typ, created: s.now()}
	if typ == "Organization" {
		a.groups = []*simGroup{{id: 1, name: "Default", GroupAccess: GroupAccess{Visibility: GroupAll}}}
	}
	s.accounts[k] = a
	return a
}

// AddRepo creates owner/name, creating owner as an organization if new, and
// returns the repository id.
func (s *Server) AddRepo(owner, name string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.repoLocked(owner, name).id
}

func (s *Server) repoLocked(owner, name string) *simRepo {
	k := strings.ToLower(owner + "/" + name)
	if r := s.repos[k]; r != nil {
		return r
	}
	r := &simRepo{id: s.nextID(), owner: s.accountLocked(owner, "Organization"), name: name, created: s.now(),
		visibility: VisibilityPrivate}
	s.repos[k] = r
	return r
}

// AddRunnerGroup adds a runner group to an organization and returns its id.
// It admits every private and internal repository of the organization
// (visibility all, public repositories not allowed), as a group created in
// GitHub's settings page does until changed (SetRunnerGroupAccess).
func (s *Server) AddRunnerGroup(org, name string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addGroupLocked(s.accountLocked(org, "Organization"), name, GroupAccess{Visibility: GroupAll}).id
}

func (s *Server) addGroupLocked(a *simAccount, name string, access GroupAccess) *simGroup {
	var id int64 = 1
	for _, g := range a.groups {
		id = max(id, g.id)
	}
	g := &simGroup{id: id + 1, name: name, GroupAccess: access}
	a.groups = append(a.groups, g)
	return g
}

// Install installs an App on an account (all its repositories) and returns
// the installation id.
func (s *Server) Install(appID int64, account string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	app := s.apps[appID]
	if app == nil {
		panic(fmt.Sprintf("ghsim: Install: App %d not added", appID))
	}
	return s.installLocked(app, s.accountLocked(account, "Organization")).id
}

func (s *Server) installLocked(app *simApp, account *simAccount) *simInstall {
	in := &simInstall{id: s.nextID(), app: app, account: account,
		created: s.now(), limit: s.opts.RateLimit, left: s.opts.RateLimit}
	s.installs[in.id] = in
	s.installationHookLocked(in, "created")
	return in
}

// Uninstall removes an installation; its tokens stop working. An App with
// InstallationEvents gets the installation deleted webhook.
func (s *Server) Uninstall(installationID int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if in := s.installs[installationID]; in != nil {
		s.installationHookLocked(in, "deleted")
	}
	delete(s.installs, installationID)
	s.revokeTokensLocked(installationID)
}

// RevokeTokens invalidates an installation's tokens before they expire, as
// GitHub does when an App's permissions change; the next call gets a 401.
func (s *Server) RevokeTokens(installationID int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.revokeTokensLocked(installationID)
}

// revokeTokensLocked drops the tokens of an installation.
func (s *Server) revokeTokensLocked(installationID int64) {
	for k, t := range s.tokens {
		if t.inst.id == installationID {
			delete(s.tokens, k)
		}
	}
}

// TokensMinted is how many installation tokens were minted for an installation.
func (s *Server) TokensMinted(installationID int64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if in := s.installs[installationID]; in != nil {
		return in.minted
	}
	return 0
}

// SetRateLimit sets an installation's budget for the current hourly window
// (starting one now if none is open).
func (s *Server) SetRateLimit(installationID int64, limit, remaining int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in := s.installs[installationID]
	if in == nil {
		return
	}
	now := s.now()
	if !now.Before(in.reset) {
		in.reset = now.Add(time.Hour).Truncate(time.Second)
	}
	in.limit, in.left = limit, remaining
}

// RateLimitRemaining is what is left of an installation's current window.
func (s *Server) RateLimitRemaining(installationID int64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	in := s.installs[installationID]
	if in == nil {
		return 0
	}
	if !s.now().Before(in.reset) {
		return in.limit
	}
	return in.left
}

// Requests is how many requests reached an operation (e.g. OpGetJob),
// counting those answered by a fault.
func (s *Server) Requests(op string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[op]
}

// RequestCounts returns how many requests each operation has had.
func (s *Server) RequestCounts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.requests)
}

// Unmatched is how many requests matched no endpoint (e.g. a wrong base path).
func (s *Server) Unmatched() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.unmatched
}

// Secrets returns every credential the simulator issued or received: tokens,
// JIT configurations and their secrets, App JWTs. Canary tests check that
// none of them reaches a log.
func (s *Server) Secrets() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.secrets))
	for k := range s.secrets {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (s *Server) secretLocked(v string) string {
	s.secrets[v] = true
	return v
}

// token returns a random credential of n characters from alphabet.
func (s *Server) tokenLocked(prefix string, n int, alphabet string) string {
	if s.opts.CredentialLength > 0 && prefix != "RUNNERSESSION" && alphabet != "0123456789abcdef" {
		n = s.opts.CredentialLength
		if prefix == "ghs_" {
			prefix = "v2."
		}
	}
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[s.rng.IntN(len(alphabet))]
	}
	return s.secretLocked(s.opts.SecretPrefix + prefix + string(b))
}

const (
	alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	upper = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
)
