package ghsim

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Runner scale sets: GitHub's protocol for a listener that takes its jobs by
// long-polling the Actions service, outbound only (actions/scaleset, the
// actions-runner-controller listener).
//
//	POST {api}/actions/runner-registration   Authorization: RemoteAuth <registration token>
//	     {"url": "https://github.com/ORG", "runner_event": "register"}
//	     200 {"url": actions service, "token": admin token (a JWT with exp)}
//
// Under the Actions service URL ({root}/_actions/{org}/), with the admin
// token as Bearer and ?api-version=6.0-preview:
//
//	GET    _apis/runtime/runnergroups/?groupName=NAME           {"count", "value": [group]}
//	GET    _apis/runtime/runnerscalesets?runnerGroupId=&name=    {"count", "value": [scale set]}
//	POST   _apis/runtime/runnerscalesets                         200 scale set; 409 name taken in the group
//	GET    _apis/runtime/runnerscalesets/{id}                    200 scale set; 404
//	PATCH  _apis/runtime/runnerscalesets/{id}                    200 scale set
//	DELETE _apis/runtime/runnerscalesets/{id}                    204
//	POST   _apis/runtime/runnerscalesets/{id}/sessions           200 session; 409 "already has an active session"
//	PATCH  _apis/runtime/runnerscalesets/{id}/sessions/{sid}     200 session with a new queue token
//	DELETE _apis/runtime/runnerscalesets/{id}/sessions/{sid}     204; 404
//	POST   _apis/runtime/runnerscalesets/{id}/acquirejobs        [runnerRequestId...] → {"count", "value": [acquired]}
//	POST   _apis/runtime/runnerscalesets/{id}/generatejitconfig  {"name", "workFolder"} → {"runner", "encodedJITConfig"}
//
// The message queue (messageQueueUrl), with the session's queue token as Bearer:
//
//	GET    {root}/_msgqueue/{sid}/messages?lastMessageId=N   long poll: 200 message, 202 nothing new,
//	       401 token expired (refresh the session), 404 no such session
//	DELETE {root}/_msgqueue/{sid}/messages/{messageId}        204: acknowledged
//
// A job whose labels are all among a scale set's (and whose run the scale
// set's runner group admits) belongs to the scale set: regular runners do
// not take it, and only a runner of that scale set takes it once acquired.
// Its lifecycle, as job messages batched into queue messages (at most
// ScaleSetBatch each), with the scale set's statistics at delivery:
//
//	queued ──► JobAvailable ──acquirejobs──► JobAssigned ──runner takes it──► JobStarted ──► JobCompleted
//	                ▲  (again after ScaleSetReoffer when nobody acquires it)
//	                └── ReassignJob: JobCompleted "canceled", then JobAvailable with a new request id
//
// A message stays in the queue until it is deleted: the next poll of any
// session of the scale set delivers the oldest one not deleted, so a
// message a crashed client never acknowledged is delivered again. A
// session nobody polled for ScaleSetSessionTimeout is stale and a new one
// replaces it.
const (
	OpRunnerRegistration   = "POST /actions/runner-registration"
	OpScaleSetGroups       = "GET /_actions/{org}/_apis/runtime/runnergroups/"
	OpListScaleSets        = "GET /_actions/{org}/_apis/runtime/runnerscalesets"
	OpCreateScaleSet       = "POST /_actions/{org}/_apis/runtime/runnerscalesets"
	OpGetScaleSet          = "GET /_actions/{org}/_apis/runtime/runnerscalesets/{id}"
	OpUpdateScaleSet       = "PATCH /_actions/{org}/_apis/runtime/runnerscalesets/{id}"
	OpDeleteScaleSet       = "DELETE /_actions/{org}/_apis/runtime/runnerscalesets/{id}"
	OpCreateSession        = "POST /_actions/{org}/_apis/runtime/runnerscalesets/{id}/sessions"
	OpRefreshSession       = "PATCH /_actions/{org}/_apis/runtime/runnerscalesets/{id}/sessions/{sid}"
	OpDeleteSession        = "DELETE /_actions/{org}/_apis/runtime/runnerscalesets/{id}/sessions/{sid}"
	OpAcquireJobs          = "POST /_actions/{org}/_apis/runtime/runnerscalesets/{id}/acquirejobs"
	OpScaleSetJITConfig    = "POST /_actions/{org}/_apis/runtime/runnerscalesets/{id}/generatejitconfig"
	OpGetMessage           = "GET /_msgqueue/{sid}/messages"
	OpDeleteMessage        = "DELETE /_msgqueue/{sid}/messages/{mid}"
	scaleSetMessageType    = "RunnerScaleSetJobMessages"
	defaultScaleSetPoll    = 50 * time.Second
	defaultScaleSetBatch   = 50
	defaultSessionTimeout  = 2 * time.Minute
	defaultScaleSetReoffer = 30 * time.Second
	defaultActionsTokenTTL = time.Hour
)

// ScaleSetOptions tune the scale-set side (zero values take the defaults).
type ScaleSetOptions struct {
	// Poll is how long a GET of the message queue waits for a message
	// before answering 202 (default 50 s, GitHub's).
	Poll time.Duration
	// Batch is the most job messages one queue message carries (default 50).
	Batch int
	// SessionTimeout is how long a session nobody polls stays active
	// (default 2 minutes); a new session for its scale set is refused
	// with 409 until then.
	SessionTimeout time.Duration
	// Reoffer is how long a JobAvailable waits to be acquired before the
	// job is offered again (default 30 s).
	Reoffer time.Duration
	// AdminTokenTTL and QueueTokenTTL are the lifetimes of the Actions
	// service's admin token and of a session's queue token (default 1 h).
	AdminTokenTTL, QueueTokenTTL time.Duration
	// NumericJobIDs makes each job message's jobId the workflow job's
	// number, as older services sent it. By default it is the scale-set
	// service's own opaque id (a GUID, as github.com sends since mid-2025),
	// and a client finds the workflow job through the REST API (the run's
	// jobs).
	NumericJobIDs bool
}

// OpaqueJobID is the opaque jobId of workflow job id in scale-set
// messages (but with NumericJobIDs): a GUID-shaped digest of the id.
func OpaqueJobID(id int64) string {
	sum := sha256.Sum256([]byte("scaleset-job/" + strconv.FormatInt(id, 10)))
	h := hex.EncodeToString(sum[:16])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// SetScaleSetOptions replaces the scale-set options.
func (s *Server) SetScaleSetOptions(o ScaleSetOptions) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ssOpts = o
}

func (s *Server) ssOptsLocked() ScaleSetOptions {
	o := s.ssOpts
	o.Poll = positiveOr(o.Poll, defaultScaleSetPoll)
	o.Batch = positiveOr(o.Batch, defaultScaleSetBatch)
	o.SessionTimeout = positiveOr(o.SessionTimeout, defaultSessionTimeout)
	o.Reoffer = positiveOr(o.Reoffer, defaultScaleSetReoffer)
	o.AdminTokenTTL = positiveOr(o.AdminTokenTTL, defaultActionsTokenTTL)
	o.QueueTokenTTL = positiveOr(o.QueueTokenTTL, defaultActionsTokenTTL)
	return o
}

// positiveOr is v, or d where v is zero or negative: an option left unset
// (or set to nonsense) takes its default.
func positiveOr[T int | time.Duration](v, d T) T {
	if v <= 0 {
		return d
	}
	return v
}

type simScaleSet struct {
	id      int64
	name    string
	account *simAccount
	groupID int64
	labels  []string
	created time.Time
	session *simSession
	pending []obj     // job messages not yet in a queue message
	msgs    []*simMsg // queue messages not deleted, oldest first
	wake    chan struct{}
}

type simMsg struct {
	id      int64
	body    string
	corrupt bool
	offers  []int64 // the runner request ids of its JobAvailable messages
}

type simSession struct {
	id       string
	ss       *simScaleSet
	owner    string
	token    string
	tokenExp time.Time
	lastPoll time.Time
	lastSeen int64 // the lastMessageId of its latest poll
}

type simAdminToken struct {
	account *simAccount
	expires time.Time
}

// scale-set states of a job (simJob.ssState).
const (
	ssAvailable = "available"
	ssAcquired  = "acquired"
)

func (s *Server) scaleSetRoutes(mux *http.ServeMux) {
	h := func(op string, fn func(*call)) {
		method, path, _ := strings.Cut(op, " ")
		if op == OpRunnerRegistration {
			path = s.opts.BasePath + path
		}
		mux.HandleFunc(method+" "+path, func(w http.ResponseWriter, r *http.Request) {
			s.serve(op, authNone, fn, w, r)
		})
	}
	h(OpRunnerRegistration, s.runnerRegistration)
	h(OpScaleSetGroups, s.actions(s.ssGroups))
	h(OpListScaleSets, s.actions(s.ssList))
	h(OpCreateScaleSet, s.actions(s.ssCreate))
	h(OpGetScaleSet, s.actions(s.scaleSet(s.ssGet)))
	h(OpUpdateScaleSet, s.actions(s.scaleSet(s.ssUpdate)))
	h(OpDeleteScaleSet, s.actions(s.scaleSet(s.ssDelete)))
	h(OpCreateSession, s.actions(s.scaleSet(s.ssCreateSession)))
	h(OpRefreshSession, s.actions(s.scaleSet(s.ssRefreshSession)))
	h(OpDeleteSession, s.actions(s.scaleSet(s.ssDeleteSession)))
	h(OpAcquireJobs, s.scaleSetQueueAuth(s.ssAcquire))
	h(OpScaleSetJITConfig, s.actions(s.scaleSet(s.ssJIT)))
	h(OpGetMessage, s.ssGetMessage)
	h(OpDeleteMessage, s.ssDeleteMessage)
}

// actionsFail answers as the Actions service does: a typeName and a message.
func actionsFail(c *call, status int, typ, msg string) {
	c.json(status, obj{"typeName": typ, "message": msg})
}

func (s *Server) runnerRegistration(c *call) {
	cred, ok := strings.CutPrefix(c.r.Header.Get("Authorization"), "RemoteAuth ")
	var body struct {
		URL   string `json:"url"`
		Event string `json:"runner_event"`
	}
	if err := json.NewDecoder(c.r.Body).Decode(&body); err != nil || body.URL == "" {
		c.fail(http.StatusBadRequest, "Problems parsing JSON")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.regTokens[cred]
	if !ok || t == nil || !s.now().Before(t.expires) {
		c.fail(http.StatusUnauthorized, "Bad credentials")
		return
	}
	want := s.webBase + "/" + t.account.login
	if !strings.EqualFold(strings.TrimRight(body.URL, "/"), want) {
		c.fail(http.StatusForbidden, "the registration token is not for "+body.URL)
		return
	}
	exp := s.now().Add(s.ssOptsLocked().AdminTokenTTL)
	tok := s.jwtLocked("ADM", exp)
	if s.adminTokens == nil {
		s.adminTokens = map[string]*simAdminToken{}
	}
	s.adminTokens[tok] = &simAdminToken{account: t.account, expires: exp}
	c.json(http.StatusOK, obj{"url": s.webBase + "/_actions/" + t.account.login + "/", "token": tok, "token_schema": "OAuthAccessToken"})
}

// jwtLocked mints a token shaped as a JWT (header.claims.signature) whose
// claims carry exp, as the Actions service's tokens do; the client reads
// exp to refresh before expiry.
func (s *Server) jwtLocked(kind string, exp time.Time) string {
	enc := base64.RawURLEncoding
	head := enc.EncodeToString([]byte(`{"alg":"RS256","typ":"JWT"}`))
	claims, _ := json.Marshal(obj{"exp": exp.Unix(), "iss": "ghsim"})
	sig := s.tokenLocked(kind, 32, alnum)
	return s.secretLocked(head + "." + enc.EncodeToString(claims) + "." + sig)
}

// actions authenticates a call to the Actions service: a live admin token
// for the path's organization.
func (s *Server) actions(fn func(*call, *simAccount)) func(*call) {
	return func(c *call) {
		cred, ok := bearer(c.r)
		s.mu.Lock()
		defer s.mu.Unlock()
		t := s.adminTokens[cred]
		if !ok || t == nil || !s.now().Before(t.expires) {
			actionsFail(c, http.StatusUnauthorized, "UnauthorizedException", "token expired or invalid")
			return
		}
		if !strings.EqualFold(c.r.PathValue("org"), t.account.login) {
			actionsFail(c, http.StatusForbidden, "AccessDeniedException", "the token is for another organization")
			return
		}
		fn(c, t.account)
	}
}

// scaleSet resolves the path's scale set of the organization.
func (s *Server) scaleSet(fn func(*call, *simScaleSet)) func(*call, *simAccount) {
	return func(c *call, a *simAccount) {
		id, _ := strconv.ParseInt(c.r.PathValue("id"), 10, 64)
		ss := s.scaleSets[id]
		if ss == nil || ss.account != a {
			actionsFail(c, http.StatusNotFound, "RunnerScaleSetNotFoundException", fmt.Sprintf("runner scale set %d not found", id))
			return
		}
		fn(c, ss)
	}
}

func (s *Server) ssGroups(c *call, a *simAccount) {
	name := c.r.URL.Query().Get("groupName")
	var out []obj
	for _, g := range a.groups {
		if name == "" || strings.EqualFold(g.name, name) {
			out = append(out, obj{"id": g.id, "name": g.name, "isDefaultGroup": g.id == 1})
		}
	}
	c.json(http.StatusOK, obj{"count": len(out), "value": nonNil(out)})
}

func nonNil(v []obj) []obj {
	if v == nil {
		return []obj{}
	}
	return v
}

func (s *Server) ssJSON(ss *simScaleSet) obj {
	labels := make([]obj, len(ss.labels))
	for i, l := range ss.labels {
		labels[i] = obj{"type": "System", "name": l}
	}
	group := ""
	if g := s.groupLocked(ss.account, ss.groupID); g != nil {
		group = g.name
	}
	return obj{"id": ss.id, "name": ss.name, "runnerGroupId": ss.groupID, "runnerGroupName": group, "labels": labels,
		"RunnerSetting": obj{}, "createdOn": ts(ss.created),
		"runnerJitConfigUrl": fmt.Sprintf("%s/_actions/%s/_apis/runtime/runnerscalesets/%d/generatejitconfig", s.webBase, ss.account.login, ss.id),
		"statistics":         s.statsLocked(ss)}
}

func (s *Server) ssList(c *call, a *simAccount) {
	q := c.r.URL.Query()
	group, _ := strconv.ParseInt(q.Get("runnerGroupId"), 10, 64)
	var out []obj
	for _, ss := range byID(s.scaleSets) {
		if ss.account == a && (group == 0 || ss.groupID == group) && (q.Get("name") == "" || strings.EqualFold(ss.name, q.Get("name"))) {
			out = append(out, s.ssJSON(ss))
		}
	}
	c.json(http.StatusOK, obj{"count": len(out), "value": nonNil(out)})
}

// byID returns the values of m, a map by id, in the order of their ids.
func byID[V any](m map[int64]V) []V {
	out := make([]V, 0, len(m))
	for _, id := range slices.Sorted(maps.Keys(m)) {
		out = append(out, m[id])
	}
	return out
}

type scaleSetBody struct {
	Name          string `json:"name"`
	RunnerGroupID int64  `json:"runnerGroupId"`
	Labels        []struct {
		Name string `json:"name"`
	} `json:"labels"`
}

func (s *Server) decodeScaleSet(c *call) (scaleSetBody, bool) {
	var b scaleSetBody
	if err := json.NewDecoder(c.r.Body).Decode(&b); err != nil {
		actionsFail(c, http.StatusBadRequest, "ArgumentException", "malformed runner scale set")
		return b, false
	}
	return b, true
}

func (s *Server) ssCreate(c *call, a *simAccount) {
	b, ok := s.decodeScaleSet(c)
	if !ok {
		return
	}
	if b.Name == "" || s.groupLocked(a, b.RunnerGroupID) == nil {
		actionsFail(c, http.StatusBadRequest, "ArgumentException", "a runner scale set needs a name and an existing runner group")
		return
	}
	for _, ss := range s.scaleSets {
		if ss.account == a && ss.groupID == b.RunnerGroupID && strings.EqualFold(ss.name, b.Name) {
			actionsFail(c, http.StatusConflict, "RunnerScaleSetExistsException", fmt.Sprintf("runner scale set %s already exists", b.Name))
			return
		}
	}
	if s.scaleSets == nil {
		s.scaleSets = map[int64]*simScaleSet{}
	}
	ss := &simScaleSet{id: s.nextID(), name: b.Name, account: a, groupID: b.RunnerGroupID, created: s.now(), wake: make(chan struct{})}
	for _, l := range b.Labels {
		ss.labels = append(ss.labels, l.Name)
	}
	if len(ss.labels) == 0 {
		ss.labels = []string{b.Name}
	}
	s.scaleSets[ss.id] = ss
	s.dispatchLocked() // queued jobs may be the new scale set's
	c.json(http.StatusOK, s.ssJSON(ss))
}

func (s *Server) ssGet(c *call, ss *simScaleSet) { c.json(http.StatusOK, s.ssJSON(ss)) }

func (s *Server) ssUpdate(c *call, ss *simScaleSet) {
	b, ok := s.decodeScaleSet(c)
	if !ok {
		return
	}
	if b.Name != "" {
		ss.name = b.Name
	}
	if b.RunnerGroupID != 0 {
		if s.groupLocked(ss.account, b.RunnerGroupID) == nil {
			actionsFail(c, http.StatusBadRequest, "ArgumentException", "no such runner group")
			return
		}
		ss.groupID = b.RunnerGroupID
	}
	if len(b.Labels) > 0 {
		ss.labels = ss.labels[:0]
		for _, l := range b.Labels {
			ss.labels = append(ss.labels, l.Name)
		}
	}
	c.json(http.StatusOK, s.ssJSON(ss))
}

func (s *Server) ssDelete(c *call, ss *simScaleSet) {
	delete(s.scaleSets, ss.id)
	if ss.session != nil {
		delete(s.ssSessions, ss.session.id)
	}
	for _, j := range s.jobs {
		if j.scaleSet == ss && j.status == "queued" {
			j.scaleSet, j.ssState = nil, ""
		}
	}
	close(ss.wake)
	s.dispatchLocked()
	c.noContent()
}

func (s *Server) sessionJSON(sess *simSession) obj {
	return obj{"sessionId": sess.id, "ownerName": sess.owner, "runnerScaleSet": s.ssJSON(sess.ss),
		"messageQueueUrl":         s.webBase + "/_msgqueue/" + sess.id + "/messages",
		"messageQueueAccessToken": sess.token, "statistics": s.statsLocked(sess.ss)}
}

func (s *Server) ssCreateSession(c *call, ss *simScaleSet) {
	var b struct {
		OwnerName string `json:"ownerName"`
	}
	_ = json.NewDecoder(c.r.Body).Decode(&b)
	now := s.now()
	o := s.ssOptsLocked()
	if old := ss.session; old != nil {
		if now.Sub(old.lastPoll) < o.SessionTimeout {
			actionsFail(c, http.StatusConflict, "TaskAgentSessionConflictException",
				fmt.Sprintf("The runner scale set %s already has an active session for owner %s.", ss.name, old.owner))
			return
		}
		delete(s.ssSessions, old.id) // stale: its client is gone
	}
	sess := &simSession{id: s.uuidLocked(), ss: ss, owner: b.OwnerName, lastPoll: now}
	sess.token, sess.tokenExp = s.jwtLocked("MQ", now.Add(o.QueueTokenTTL)), now.Add(o.QueueTokenTTL)
	ss.session = sess
	if s.ssSessions == nil {
		s.ssSessions = map[string]*simSession{}
	}
	s.ssSessions[sess.id] = sess
	c.json(http.StatusOK, s.sessionJSON(sess))
}

func (s *Server) uuidLocked() string {
	const hex = "0123456789abcdef"
	b := []byte("xxxxxxxx-xxxx-4xxx-axxx-xxxxxxxxxxxx")
	for i, ch := range b {
		if ch == 'x' {
			b[i] = hex[s.rng.IntN(16)]
		}
	}
	return string(b)
}

func (s *Server) sessionOf(c *call, ss *simScaleSet) *simSession {
	sess := s.ssSessions[c.r.PathValue("sid")]
	if sess == nil || sess.ss != ss {
		actionsFail(c, http.StatusNotFound, "TaskAgentSessionExpiredException", "no such session")
		return nil
	}
	return sess
}

func (s *Server) ssRefreshSession(c *call, ss *simScaleSet) {
	sess := s.sessionOf(c, ss)
	if sess == nil {
		return
	}
	now := s.now()
	ttl := s.ssOptsLocked().QueueTokenTTL
	sess.token, sess.tokenExp, sess.lastPoll = s.jwtLocked("MQ", now.Add(ttl)), now.Add(ttl), now
	c.json(http.StatusOK, s.sessionJSON(sess))
}

func (s *Server) ssDeleteSession(c *call, ss *simScaleSet) {
	sess := s.sessionOf(c, ss)
	if sess == nil {
		return
	}
	delete(s.ssSessions, sess.id)
	if ss.session == sess {
		ss.session = nil
	}
	c.noContent()
}

// scaleSetQueueAuth authenticates acquirejobs: the session's queue token
// (as the Go client sends it) or the admin token.
func (s *Server) scaleSetQueueAuth(fn func(*call, *simScaleSet)) func(*call) {
	return func(c *call) {
		cred, _ := bearer(c.r)
		s.mu.Lock()
		defer s.mu.Unlock()
		id, _ := strconv.ParseInt(c.r.PathValue("id"), 10, 64)
		ss := s.scaleSets[id]
		if ss == nil || !strings.EqualFold(ss.account.login, c.r.PathValue("org")) {
			actionsFail(c, http.StatusNotFound, "RunnerScaleSetNotFoundException", "no such runner scale set")
			return
		}
		now := s.now()
		if sess := ss.session; sess != nil && sess.token == cred && now.Before(sess.tokenExp) {
			fn(c, ss)
			return
		}
		if t := s.adminTokens[cred]; t != nil && t.account == ss.account && now.Before(t.expires) {
			fn(c, ss)
			return
		}
		actionsFail(c, http.StatusUnauthorized, "UnauthorizedException", "token expired or invalid")
	}
}

func (s *Server) ssAcquire(c *call, ss *simScaleSet) {
	var ids []int64
	if err := json.NewDecoder(c.r.Body).Decode(&ids); err != nil {
		actionsFail(c, http.StatusBadRequest, "ArgumentException", "want a list of runner request ids")
		return
	}
	var got []int64
	for _, id := range ids {
		j := s.jobByRequestLocked(ss, id)
		if j == nil || j.status != "queued" {
			continue
		}
		if j.ssState == ssAvailable {
			j.ssState = ssAcquired
			s.jobMessageLocked(ss, j, "JobAssigned", nil)
		}
		got = append(got, id)
	}
	s.dispatchLocked()
	c.json(http.StatusOK, obj{"count": len(got), "value": nonNilInts(got)})
}

func nonNilInts(v []int64) []int64 {
	if v == nil {
		return []int64{}
	}
	return v
}

func (s *Server) jobByRequestLocked(ss *simScaleSet, req int64) *simJob {
	for _, j := range s.jobs {
		if j.scaleSet == ss && j.requestID == req {
			return j
		}
	}
	return nil
}

func (s *Server) ssJIT(c *call, ss *simScaleSet) {
	var b struct {
		Name string `json:"name"`
	}
	if err := json.NewDecoder(c.r.Body).Decode(&b); err != nil || b.Name == "" {
		actionsFail(c, http.StatusBadRequest, "ArgumentException", "a runner needs a name")
		return
	}
	if s.runnerByNameLocked(ss.account, nil, b.Name) != nil {
		actionsFail(c, http.StatusConflict, "AgentExistsException", fmt.Sprintf("a runner named %s already exists", b.Name))
		return
	}
	r := s.newRunnerLocked(ss.account, nil, b.Name, ss.groupID, ss.labels)
	r.ephemeral, r.jit, r.scaleSet = true, true, ss
	c.json(http.StatusOK, obj{"runner": obj{"id": r.id, "name": r.name, "runnerScaleSetId": ss.id},
		"encodedJITConfig": s.encodeJITLocked(r)})
}

// queueSession authenticates a message-queue call: the path's session and
// its queue token, not expired (401 says refresh).
func (s *Server) queueSession(c *call) *simSession {
	sess := s.ssSessions[c.r.PathValue("sid")]
	if sess == nil {
		actionsFail(c, http.StatusNotFound, "TaskAgentSessionExpiredException", "no such session")
		return nil
	}
	cred, _ := bearer(c.r)
	if cred != sess.token || !s.now().Before(sess.tokenExp) {
		actionsFail(c, http.StatusUnauthorized, "UnauthorizedException", "message queue token expired")
		return nil
	}
	return sess
}

func (s *Server) ssGetMessage(c *call) {
	last, _ := strconv.ParseInt(c.r.URL.Query().Get("lastMessageId"), 10, 64)
	s.mu.Lock()
	deadline := time.Now().Add(s.ssOptsLocked().Poll)
	s.mu.Unlock()
	for {
		s.mu.Lock()
		sess := s.queueSession(c)
		if sess == nil {
			s.mu.Unlock()
			return
		}
		ss := sess.ss
		sess.lastPoll, sess.lastSeen = s.now(), last
		s.reofferLocked(ss)
		s.flushLocked(ss)
		if len(ss.msgs) > 0 {
			m := ss.msgs[0]
			c.json(http.StatusOK, obj{"messageId": m.id, "messageType": scaleSetMessageType, "body": m.body,
				"statistics": s.statsLocked(ss)})
			s.mu.Unlock()
			return
		}
		wake := ss.wake
		s.mu.Unlock()
		left := time.Until(deadline)
		if left <= 0 {
			c.w.WriteHeader(http.StatusAccepted)
			return
		}
		// Wake for a new job message, or look again shortly: a job offered
		// and not acquired is offered again on the simulator's clock.
		t := time.NewTimer(min(left, 100*time.Millisecond))
		select {
		case <-wake:
		case <-t.C:
		case <-c.r.Context().Done():
			t.Stop()
			return
		}
		t.Stop()
	}
}

func (s *Server) ssDeleteMessage(c *call) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sess := s.queueSession(c)
	if sess == nil {
		return
	}
	id, _ := strconv.ParseInt(c.r.PathValue("mid"), 10, 64)
	ss := sess.ss
	for i, m := range ss.msgs {
		if m.id != id {
			continue
		}
		for _, req := range m.offers {
			if j := s.jobByRequestLocked(ss, req); j != nil && j.status == "queued" && j.ssState == ssAvailable {
				s.ackedEarly++
			}
		}
		ss.msgs = append(ss.msgs[:i], ss.msgs[i+1:]...)
		break
	}
	c.noContent()
}

// flushLocked packs the scale set's pending job messages into queue
// messages of at most Batch each.
func (s *Server) flushLocked(ss *simScaleSet) {
	batch := s.ssOptsLocked().Batch
	for len(ss.pending) > 0 {
		n := min(batch, len(ss.pending))
		b, _ := json.Marshal(ss.pending[:n])
		m := &simMsg{id: s.nextID(), body: string(b)}
		for _, jm := range ss.pending[:n] {
			if jm["messageType"] == "JobAvailable" {
				m.offers = append(m.offers, jm["runnerRequestId"].(int64))
			}
		}
		ss.pending = ss.pending[n:]
		if s.corruptNext > 0 {
			s.corruptNext--
			m.body, m.corrupt = "[{\"messageType\": \"JobAvailable\", \"runnerRequestId\": \"not a number\"", true
		}
		ss.msgs = append(ss.msgs, m)
	}
}

// AckedUnacquired counts the jobs offered by a message that was deleted
// while they were still offered and not acquired: a client that
// acknowledges before it handles (or skips a job on purpose) shows here.
func (s *Server) AckedUnacquired() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ackedEarly
}

// CorruptMessages makes the next n queue messages unparseable (their job
// messages are lost, as a message the client cannot read is): a client
// must acknowledge such a message rather than be stuck on it, and the jobs
// it held are offered again after ScaleSetOptions.Reoffer.
func (s *Server) CorruptMessages(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.corruptNext += n
}

// reofferLocked offers again each job of ss available and not acquired
// for Reoffer.
func (s *Server) reofferLocked(ss *simScaleSet) {
	now := s.now()
	wait := s.ssOptsLocked().Reoffer
	for _, j := range byID(s.jobs) {
		if j.scaleSet == ss && j.status == "queued" && j.ssState == ssAvailable && now.Sub(j.offered) >= wait {
			j.offered = now
			s.jobMessageLocked(ss, j, "JobAvailable", nil)
		}
	}
}

// jobMessageLocked queues one job message of kind for j on ss and wakes
// its long polls.
func (s *Server) jobMessageLocked(ss *simScaleSet, j *simJob, kind string, extra obj) {
	run := j.run
	m := obj{"messageType": kind, "runnerRequestId": j.requestID, "repositoryName": run.repo.name,
		"ownerName": run.repo.owner.login, "jobId": s.messageJobIDLocked(j.id),
		"jobWorkflowRef": fmt.Sprintf("%s/%s@refs/heads/%s", run.repo.fullName(), run.path, run.branch),
		"jobDisplayName": j.name, "workflowRunId": run.id, "eventName": run.event, "requestLabels": j.labels,
		"queueTime": ts(j.created)}
	if kind == "JobAvailable" {
		m["acquireJobUrl"] = fmt.Sprintf("%s/_actions/%s/_apis/runtime/runnerscalesets/%d/acquirejobs", s.webBase, ss.account.login, ss.id)
	}
	for k, v := range extra {
		m[k] = v
	}
	ss.pending = append(ss.pending, m)
	close(ss.wake)
	ss.wake = make(chan struct{})
}

// messageJobIDLocked is the jobId a job message carries for workflow job id.
func (s *Server) messageJobIDLocked(id int64) string {
	if s.ssOpts.NumericJobIDs {
		return strconv.FormatInt(id, 10)
	}
	return OpaqueJobID(id)
}

// offerLocked gives a queued job to the first scale set (by id) whose
// labels include all of the job's and whose group admits its run.
func (s *Server) offerLocked(j *simJob) {
	if j.scaleSet != nil || j.status != "queued" {
		return
	}
	for _, ss := range byID(s.scaleSets) {
		if ss.account != j.run.repo.owner {
			continue
		}
		if g := s.groupLocked(ss.account, ss.groupID); !s.opts.IgnoreRunnerGroups && (g == nil || !g.admits(j.run)) {
			continue
		}
		var labels []simLabel
		for _, l := range ss.labels {
			labels = append(labels, simLabel{name: l})
		}
		if !labelsMatch(j.labels, labels) {
			continue
		}
		j.scaleSet, j.ssState, j.requestID, j.offered = ss, ssAvailable, s.nextID(), s.now()
		s.jobMessageLocked(ss, j, "JobAvailable", nil)
		return
	}
}

// ReassignJob takes an acquired job that no runner has started back from
// its scale set, as GitHub does when no runner picks it up in time: a
// JobCompleted with result "canceled", then a JobAvailable with a new
// runner request id. It reports whether the job was so reassigned.
func (s *Server) ReassignJob(jobID int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.jobs[jobID]
	if j == nil || j.scaleSet == nil || j.status != "queued" || j.ssState != ssAcquired {
		return false
	}
	ss := j.scaleSet
	s.jobMessageLocked(ss, j, "JobCompleted", obj{"result": "canceled", "finishTime": ts(s.now())})
	j.ssState, j.requestID, j.offered = ssAvailable, s.nextID(), s.now()
	s.jobMessageLocked(ss, j, "JobAvailable", nil)
	return true
}

// statsLocked are the scale set's statistics now: totalAssignedJobs
// (acquired, waiting or running) is how many runners it needs.
func (s *Server) statsLocked(ss *simScaleSet) obj {
	var avail, acquired, running, registered, busy int
	for _, j := range s.jobs {
		if j.scaleSet != ss {
			continue
		}
		switch {
		case j.status == "queued" && j.ssState == ssAvailable:
			avail++
		case j.status == "queued" && j.ssState == ssAcquired:
			acquired++
		case j.status == "in_progress":
			running++
		}
	}
	for _, r := range s.runners {
		if r.scaleSet == ss && r.online {
			registered++
			if r.job != nil {
				busy++
			}
		}
	}
	return obj{"totalAvailableJobs": avail, "totalAcquiredJobs": acquired, "totalAssignedJobs": acquired + running,
		"totalRunningJobs": running, "totalRegisteredRunners": registered, "totalBusyRunners": busy, "totalIdleRunners": registered - busy}
}

// ScaleSetState is a scale set as the simulator sees it.
type ScaleSetState struct {
	ID      int64
	Name    string
	Labels  []string
	GroupID int64
	// Session is the active session's id ("" for none); LastMessageID is
	// the lastMessageId of its latest poll.
	Session       string
	LastMessageID int64
	// Unacked counts the queue messages not deleted; Pending the job
	// messages not in a queue message yet (the next poll packs them into
	// one). Assigned is totalAssignedJobs.
	Unacked, Pending, Assigned int
}

// Drained reports whether a client has handled every job message: none
// in an undeleted queue message, none waiting for the next poll.
func (s ScaleSetState) Drained() bool { return s.Unacked == 0 && s.Pending == 0 }

// ScaleSets returns the organization's scale sets, by id.
func (s *Server) ScaleSets(org string) []ScaleSetState {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []ScaleSetState
	for _, ss := range byID(s.scaleSets) {
		if !strings.EqualFold(ss.account.login, org) {
			continue
		}
		st := ScaleSetState{ID: ss.id, Name: ss.name, Labels: append([]string{}, ss.labels...), GroupID: ss.groupID,
			Unacked: len(ss.msgs), Pending: len(ss.pending), Assigned: s.statsLocked(ss)["totalAssignedJobs"].(int)}
		if ss.session != nil {
			st.Session, st.LastMessageID = ss.session.id, ss.session.lastSeen
		}
		out = append(out, st)
	}
	return out
}
