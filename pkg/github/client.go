package github

import (
	"context"
	"crypto/rsa"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	gh "github.com/google/go-github/v62/github"
	"golang.org/x/sync/singleflight"

	"github.com/skiffci/skiff/internal/ctxsleep"
)

// DefaultBaseURL is github.com's REST API. For GitHub Enterprise Server use
// "https://HOST/api/v3".
const DefaultBaseURL = "https://api.github.com"

// maxBody caps how much of a response go-github may read: the largest answer
// the client uses is a page of 100 runners or deliveries, well under 1 MiB.
// go-github sends X-GitHub-Api-Version 2022-11-28 with every request.
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

// WithHTTPClient sets the HTTP client that makes each attempt of a call
// (default: one with a 30 s timeout; every call is also bounded by its
// context). skiff's transport sits above it: retries, pacing and
// authentication wrap each attempt made with h.
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
	hc        *http.Client // makes each attempt; see transport
	gh        *gh.Client   // builds requests, decodes answers; its transport is skiff's
	now       func() time.Time
	sleep     func(ctx context.Context, d time.Duration) error
	rand      func() float64
	log       *slog.Logger
	retry     RetryPolicy
	userAgent string
	reserve   float64

	apps    []*appState
	appByID map[int64]*appState

	flights singleflight.Group

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
		sleep:     ctxsleep.For,
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
	// go-github joins relative paths to BaseURL, which must end in a slash;
	// WithEnterpriseURLs is not used because it appends /api/v3/ to any other path.
	u.Path = strings.TrimRight(u.Path, "/") + "/"
	u.RawPath = ""
	u.RawQuery, u.Fragment = "", ""
	if c.hc == nil {
		c.hc = &http.Client{Timeout: 30 * time.Second}
	}
	c.gh = gh.NewClient(&http.Client{Transport: &transport{c: c}})
	c.gh.BaseURL = u
	c.gh.UploadURL = u // unused: skiff uploads nothing
	c.gh.UserAgent = c.userAgent
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

// shared runs fn once per key at a time through g: later callers wait for
// the running call's result. fn runs detached from the first caller's
// cancellation, bounded by timeout, so that one cancelled caller does not
// fail the others; every caller still returns when its own context ends.
func shared(ctx context.Context, g *singleflight.Group, key string, timeout time.Duration, fn func(context.Context) (any, error)) (any, error) {
	ch := g.DoChan(key, func() (any, error) {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		defer cancel()
		return fn(fctx)
	})
	select {
	case r := <-ch:
		return r.Val, r.Err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
