package github

import (
	"bytes"
	"context"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DefaultBaseURL is github.com's REST API. For GitHub Enterprise Server use
// "https://HOST/api/v3".
const DefaultBaseURL = "https://api.github.com"

// apiVersion is the REST API version the client speaks (X-GitHub-Api-Version).
const apiVersion = "2022-11-28"

// maxBody caps how much of a response the client reads: the largest answer it
// uses is a page of 100 runners or jobs, well under 1 MiB.
const maxBody = 8 << 20

// App is one GitHub App the client can authenticate as.
type App struct {
	ID   int64           // the App's numeric id (the JWT's iss)
	Key  *rsa.PrivateKey // see ParsePrivateKey
	Name string          // optional, for logs
}

// RetryPolicy bounds the client's retries.
type RetryPolicy struct {
	// MaxRetries is how many times a 5xx answer or a transport error is
	// retried (so MaxRetries+1 attempts). Default 3: GitHub's 5xx are usually
	// momentary, and a scale-up Lambda has SQS behind it for longer outages.
	MaxRetries int
	// BaseDelay is the first backoff; each retry doubles it up to MaxDelay,
	// and full jitter picks a delay in [0, that). Defaults 500 ms and 8 s.
	BaseDelay time.Duration
	MaxDelay  time.Duration
	// MaxRateLimitWaits is how many rate-limit waits one call may do before
	// it returns *RateLimitError. Default 2.
	MaxRateLimitWaits int
	// MaxRateLimitWait is the longest single rate-limit wait; longer ones
	// return *RateLimitError at once so a Lambda is not billed for sleeping.
	// Default 1 minute, GitHub's own advice for a secondary limit without headers.
	MaxRateLimitWait time.Duration
}

// Option configures a Client.
type Option func(*Client)

// WithBaseURL sets the API root: DefaultBaseURL, or "https://HOST/api/v3" for GHES.
func WithBaseURL(u string) Option { return func(c *Client) { c.baseRaw = u } }

// WithHTTPClient sets the HTTP client (default: one with a 30 s timeout; every
// call is also bounded by its context).
func WithHTTPClient(h *http.Client) Option { return func(c *Client) { c.hc = h } }

// WithClock sets the time source used for tokens, JWTs and rate limits.
func WithClock(now func() time.Time) Option { return func(c *Client) { c.now = now } }

// WithSleep replaces the wait used for backoff and rate limits; it must return
// ctx.Err() when the context ends first. Tests use it to skip real waiting.
func WithSleep(sleep func(ctx context.Context, d time.Duration) error) Option {
	return func(c *Client) { c.sleep = sleep }
}

// WithRand sets the jitter source, a function returning [0,1).
func WithRand(f func() float64) Option { return func(c *Client) { c.rand = f } }

// WithLogger sets the logger (default: discard). The client logs at debug
// level per request and warns on retries and rate limits; never a credential.
func WithLogger(l *slog.Logger) Option { return func(c *Client) { c.log = l } }

// WithRetryPolicy replaces the retry bounds; zero fields keep their defaults.
func WithRetryPolicy(p RetryPolicy) Option { return func(c *Client) { c.retry = p } }

// WithUserAgent sets the User-Agent header (GitHub requires one).
func WithUserAgent(ua string) Option { return func(c *Client) { c.userAgent = ua } }

// WithRateLimitReserve sets the fraction of an installation's hourly budget
// below which the client spreads its remaining calls evenly until the reset,
// instead of spending them at once. Default 0.05 (250 of 5,000), enough for
// scale-down's reconcile to keep working while scale-up is throttled.
func WithRateLimitReserve(fraction float64) Option { return func(c *Client) { c.reserve = fraction } }

// Client calls GitHub's REST API as one or more GitHub Apps. It caches App
// JWTs, installation tokens, registration tokens and runner group ids in
// memory, so a warm Lambda container reuses them across invocations. It is
// safe for concurrent use.
type Client struct {
	baseRaw   string
	base      *url.URL
	hc        *http.Client
	now       func() time.Time
	sleep     func(ctx context.Context, d time.Duration) error
	rand      func() float64
	log       *slog.Logger
	retry     RetryPolicy
	userAgent string
	reserve   float64

	apps    []*appState
	appByID map[int64]*appState

	flights flightGroup

	mu        sync.Mutex
	installs  map[int64]*install
	accounts  map[string]*account
	groups    map[string]groupEntry
	regTokens map[string]RegistrationToken
	rr        uint64
}

// NewClient returns a client for the given Apps. With several Apps, the same
// organization may have each of them installed; every call then acts as the
// installation with the most remaining hourly budget, so the Apps' budgets
// add up (see docs/github.md).
func NewClient(apps []App, opts ...Option) (*Client, error) {
	c := &Client{
		baseRaw:   DefaultBaseURL,
		now:       time.Now,
		sleep:     sleepCtx,
		rand:      rand.Float64,
		log:       slog.New(slog.DiscardHandler),
		userAgent: "skiff",
		reserve:   0.05,
		appByID:   map[int64]*appState{},
		installs:  map[int64]*install{},
		accounts:  map[string]*account{},
		groups:    map[string]groupEntry{},
		regTokens: map[string]RegistrationToken{},
	}
	for _, o := range opts {
		o(c)
	}
	if len(apps) == 0 {
		return nil, errors.New("creating github client: no App configured")
	}
	for _, a := range apps {
		if a.ID <= 0 || a.Key == nil {
			return nil, fmt.Errorf("creating github client: App %d has no id or no private key", a.ID)
		}
		if _, dup := c.appByID[a.ID]; dup {
			return nil, fmt.Errorf("creating github client: App %d configured twice", a.ID)
		}
		st := &appState{App: a}
		c.apps = append(c.apps, st)
		c.appByID[a.ID] = st
	}
	u, err := url.Parse(c.baseRaw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("creating github client: base URL %q is not an http(s) URL", c.baseRaw)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	u.RawQuery, u.Fragment = "", ""
	c.base = u
	if c.hc == nil {
		c.hc = &http.Client{Timeout: 30 * time.Second}
	}
	p := &c.retry
	if p.MaxRetries == 0 {
		p.MaxRetries = 3
	}
	if p.BaseDelay == 0 {
		p.BaseDelay = 500 * time.Millisecond
	}
	if p.MaxDelay == 0 {
		p.MaxDelay = 8 * time.Second
	}
	if p.MaxRateLimitWaits == 0 {
		p.MaxRateLimitWaits = 2
	}
	if p.MaxRateLimitWait == 0 {
		p.MaxRateLimitWait = time.Minute
	}
	return c, nil
}

// Apps returns the configured App ids, in configuration order.
func (c *Client) Apps() []int64 {
	out := make([]int64, len(c.apps))
	for i, a := range c.apps {
		out[i] = a.ID
	}
	return out
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

type authKind int

const (
	authInstallation authKind = iota
	authApp
)

// request is one logical API call; send retries it as needed.
type request struct {
	op     string
	method string
	path   string     // escaped, relative to the base URL, starting with "/"
	query  url.Values // nil for none
	abs    string     // absolute URL of a next page; overrides path and query
	body   any
	auth   authKind
	inst   *install  // for authInstallation
	app    *appState // for authApp

	// uncertain is set by send when an attempt failed in a way that leaves unknown
	// whether GitHub acted on it (a 5xx answer or a transport error) and another
	// attempt followed: a later 409 may then be this call's own doing.
	uncertain bool
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (c *Client) url(rq *request) (string, error) {
	if rq.abs != "" {
		u, err := url.Parse(rq.abs)
		if err != nil {
			return "", fmt.Errorf("parsing next page link: %w", err)
		}
		// A credential goes only to the configured API host.
		if u.Scheme != c.base.Scheme || u.Host != c.base.Host || !strings.HasPrefix(u.Path, c.base.Path+"/") {
			return "", fmt.Errorf("github %s: next page link leaves the API base URL", rq.op)
		}
		return rq.abs, nil
	}
	s := c.base.Scheme + "://" + c.base.Host + escapePath(c.base.Path) + rq.path
	if len(rq.query) > 0 {
		s += "?" + rq.query.Encode()
	}
	return s, nil
}

func escapePath(p string) string { return (&url.URL{Path: p}).EscapedPath() }

// send performs rq with pacing, authentication, rate-limit waits and 5xx
// backoff, and returns the first 2xx answer or an error.
func (c *Client) send(ctx context.Context, rq *request) (*response, error) {
	var body []byte
	if rq.body != nil {
		b, err := json.Marshal(rq.body)
		if err != nil {
			return nil, fmt.Errorf("encoding %s request: %w", rq.op, err)
		}
		body = b
	}
	target, err := c.url(rq)
	if err != nil {
		return nil, err
	}
	log := c.log.With("op", rq.op, "method", rq.method)
	if rq.inst != nil {
		log = log.With("installation_id", rq.inst.id)
	}
	retries, rlWaits, reauthed := 0, 0, false
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("github %s: %w", rq.op, err)
		}
		if rq.inst != nil {
			if err := c.pace(ctx, rq); err != nil {
				return nil, err
			}
		}
		cred, err := c.credential(ctx, rq)
		if err != nil {
			return nil, err
		}
		start := time.Now()
		resp, err := c.roundTrip(ctx, rq.method, target, body, cred)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("github %s: %w", rq.op, ctx.Err())
			}
			if d := c.backoff(retries); retries < c.retry.MaxRetries && fitsDeadline(ctx, d) {
				log.Warn("github request failed, retrying", "attempt", attempt, "error", err, "retry_in_ms", d.Milliseconds())
				retries++
				rq.uncertain = true
				if err := c.sleep(ctx, d); err != nil {
					return nil, fmt.Errorf("github %s: %w", rq.op, err)
				}
				continue
			}
			return nil, fmt.Errorf("github %s: %w", rq.op, err)
		}
		if rq.inst != nil {
			c.observe(rq.inst, resp.header)
		}
		log.Debug("github request", "path", pathOf(target), "status", resp.status, "attempt", attempt,
			"duration_ms", time.Since(start).Milliseconds(), "request_id", resp.header.Get("X-GitHub-Request-Id"))
		switch {
		case resp.status < 300:
			return resp, nil
		case resp.status == http.StatusUnauthorized && !reauthed:
			// A token can be revoked or expire early; mint a fresh one once.
			c.dropCredential(rq)
			reauthed = true
			continue
		case isRateLimited(resp):
			rle := c.rateLimitError(rq, resp)
			wait := rle.RetryAfter(c.now())
			if rlWaits < c.retry.MaxRateLimitWaits && c.canWait(ctx, wait) {
				log.Warn("github rate limited, waiting", "secondary", rle.Secondary, "status", resp.status, "wait_ms", wait.Milliseconds())
				rlWaits++
				if err := c.sleep(ctx, wait); err != nil {
					return nil, fmt.Errorf("github %s: %w", rq.op, err)
				}
				continue
			}
			log.Warn("github rate limited, giving up", "secondary", rle.Secondary, "status", resp.status, "reset", rle.Reset)
			return nil, rle
		case resp.status >= 500 && retries < c.retry.MaxRetries:
			d := c.backoff(retries)
			if !fitsDeadline(ctx, d) {
				return nil, c.apiError(rq, target, resp)
			}
			log.Warn("github server error, retrying", "status", resp.status, "attempt", attempt, "retry_in_ms", d.Milliseconds())
			retries++
			rq.uncertain = true
			if err := c.sleep(ctx, d); err != nil {
				return nil, fmt.Errorf("github %s: %w", rq.op, err)
			}
			continue
		}
		return nil, c.apiError(rq, target, resp)
	}
}

func pathOf(raw string) string {
	if i := strings.IndexByte(raw, '?'); i >= 0 {
		raw = raw[:i]
	}
	if u, err := url.Parse(raw); err == nil {
		return u.EscapedPath()
	}
	return ""
}

func (c *Client) roundTrip(ctx context.Context, method, target string, body []byte, cred string) (*response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return nil, fmt.Errorf("building request: %w", err)
	}
	req.Header.Set("Accept", "application/vnd.github+json")
	req.Header.Set("X-GitHub-Api-Version", apiVersion)
	req.Header.Set("User-Agent", c.userAgent)
	req.Header.Set("Authorization", "Bearer "+cred)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, maxBody))
	if err != nil {
		return nil, fmt.Errorf("reading response: %w", err)
	}
	return &response{status: res.StatusCode, header: res.Header, body: b}, nil
}

// backoff is the n-th (0-based) retry delay: full jitter over an exponential cap.
func (c *Client) backoff(n int) time.Duration {
	d := c.retry.BaseDelay << n
	if d > c.retry.MaxDelay || d <= 0 {
		d = c.retry.MaxDelay
	}
	return time.Duration(c.rand() * float64(d))
}

// fitsDeadline reports whether ctx leaves more than d: a backoff that cannot be
// followed by another attempt returns the error at once instead of sleeping into
// the deadline.
func fitsDeadline(ctx context.Context, d time.Duration) bool {
	dl, ok := ctx.Deadline()
	return !ok || time.Until(dl) > d
}

// canWait reports whether a wait of d fits both the policy and ctx's deadline.
func (c *Client) canWait(ctx context.Context, d time.Duration) bool {
	if d > c.retry.MaxRateLimitWait {
		return false
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= d {
		return false
	}
	return true
}

func (c *Client) apiError(rq *request, target string, resp *response) error {
	var b struct {
		Message string `json:"message"`
	}
	_ = json.Unmarshal(resp.body, &b)
	msg := b.Message
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	return &APIError{Op: rq.op, Method: rq.method, Path: pathOf(target), Status: resp.status,
		Message: msg, RequestID: resp.header.Get("X-GitHub-Request-Id")}
}

// isRateLimited tells a rate-limit answer from a permission error, as GitHub
// documents: 429, or 403 with Retry-After, x-ratelimit-remaining: 0, or a
// message naming a rate limit.
func isRateLimited(resp *response) bool {
	if resp.status != http.StatusForbidden && resp.status != http.StatusTooManyRequests {
		return false
	}
	if resp.status == http.StatusTooManyRequests || resp.header.Get("Retry-After") != "" ||
		resp.header.Get("X-RateLimit-Remaining") == "0" {
		return true
	}
	return bytes.Contains(bytes.ToLower(resp.body), []byte("rate limit"))
}

func (c *Client) rateLimitError(rq *request, resp *response) *RateLimitError {
	now := c.now()
	e := &RateLimitError{Op: rq.op, Status: resp.status, Secondary: true}
	if rq.inst != nil {
		e.InstallationID = rq.inst.id
		c.mu.Lock()
		if a := rq.inst.app; a != nil {
			e.AppID = a.ID
		}
		c.mu.Unlock()
	} else if rq.app != nil {
		e.AppID = rq.app.ID
	}
	// GitHub's order: Retry-After, then x-ratelimit-reset when remaining is 0,
	// else at least one minute.
	if s, err := strconv.Atoi(resp.header.Get("Retry-After")); err == nil && s >= 0 {
		e.Reset = now.Add(time.Duration(s) * time.Second)
		return e
	}
	if resp.header.Get("X-RateLimit-Remaining") == "0" {
		if r, err := strconv.ParseInt(resp.header.Get("X-RateLimit-Reset"), 10, 64); err == nil {
			e.Secondary = false
			e.Reset = time.Unix(r, 0)
			return e
		}
	}
	e.Reset = now.Add(time.Minute)
	return e
}

// decode unmarshals a response body into out.
func decode(op string, resp *response, out any) error {
	if err := json.Unmarshal(resp.body, out); err != nil {
		return fmt.Errorf("decoding %s response: %w", op, err)
	}
	return nil
}

// nextLink returns the rel="next" URL of a Link header, or "".
func nextLink(h http.Header) string {
	for _, v := range h.Values("Link") {
		for _, part := range strings.Split(v, ",") {
			segs := strings.Split(part, ";")
			if len(segs) < 2 {
				continue
			}
			u := strings.TrimSpace(segs[0])
			if !strings.HasPrefix(u, "<") || !strings.HasSuffix(u, ">") {
				continue
			}
			for _, s := range segs[1:] {
				if strings.TrimSpace(s) == `rel="next"` {
					return u[1 : len(u)-1]
				}
			}
		}
	}
	return ""
}

// paginate calls rq and every rel="next" page after it, handing each body to
// page; page returns false to stop early.
func (c *Client) paginate(ctx context.Context, rq *request, page func(*response) (bool, error)) error {
	for n := 0; ; n++ {
		if n > 10000 {
			return fmt.Errorf("github %s: more than 10000 pages", rq.op)
		}
		resp, err := c.send(ctx, rq)
		if err != nil {
			return err
		}
		more, err := page(resp)
		if err != nil || !more {
			return err
		}
		next := nextLink(resp.header)
		if next == "" {
			return nil
		}
		cp := *rq
		cp.abs = next
		rq = &cp
	}
}

// flightGroup runs one function per key at a time; later callers wait for the
// running one's result (a tiny singleflight). The function runs detached from
// the first caller's cancellation so that one cancelled caller does not fail
// the others; every caller still returns when its own context ends.
type flightGroup struct {
	mu sync.Mutex
	m  map[string]*flight
}

type flight struct {
	done chan struct{}
	val  any
	err  error
}

func (g *flightGroup) do(ctx context.Context, key string, timeout time.Duration, fn func(context.Context) (any, error)) (any, error) {
	g.mu.Lock()
	if g.m == nil {
		g.m = map[string]*flight{}
	}
	f, ok := g.m[key]
	if !ok {
		f = &flight{done: make(chan struct{})}
		g.m[key] = f
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		go func() {
			defer cancel()
			f.val, f.err = fn(fctx)
			g.mu.Lock()
			delete(g.m, key)
			g.mu.Unlock()
			close(f.done)
		}()
	}
	g.mu.Unlock()
	select {
	case <-f.done:
		return f.val, f.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
