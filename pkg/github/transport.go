package github

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	gh "github.com/google/go-github/v62/github"
)

// How a call reaches GitHub:
//
//	Client method (GetJob, ListRunners, …)        picks the installation or App, names the op
//	  └─ go-github v62 (Actions, Apps services;    builds the URL and JSON body, decodes the
//	     NewRequest/Do where v62 lacks a field)    answer, turns a non-2xx answer into ErrorResponse
//	       └─ transport (this file)                per attempt: pacing, credential, 401 re-mint,
//	            │                                  rate-limit waits, 5xx/network retries
//	            └─ Client.hc (net/http)            one attempt
//
// The call descriptor travels in the request's context. The transport is the
// only owner of rate-limit state: it keeps it per installation on the
// client's clock, and hands go-github answers without X-RateLimit-* headers,
// so go-github's own limiter (one per go-github client, shared by every
// installation, on the wall clock) never refuses a call by itself. A
// rate-limited answer the transport does not wait out becomes a
// *RateLimitError returned by RoundTrip.

type authKind int

const (
	authInstallation authKind = iota
	authApp
)

// call describes one logical API call; the transport reads it from the
// request's context.
type call struct {
	op   string
	auth authKind
	inst *install  // for authInstallation
	app  *appState // for authApp

	// uncertain is set by the transport when an attempt failed in a way that
	// leaves unknown whether GitHub acted on it (a 5xx answer or a transport
	// error) and another attempt followed: a later 409 may then be this
	// call's own doing. RoundTrip runs on the caller's goroutine, so the
	// caller reads it after go-github returns without a lock.
	uncertain bool
}

type callKey struct{}

// asInstallation returns ctx carrying a call acting as installation in.
func asInstallation(ctx context.Context, op string, in *install) (context.Context, *call) {
	cl := &call{op: op, auth: authInstallation, inst: in}
	return context.WithValue(ctx, callKey{}, cl), cl
}

// asApp returns ctx carrying a call authenticated with a's JWT.
func asApp(ctx context.Context, op string, a *appState) (context.Context, *call) {
	cl := &call{op: op, auth: authApp, app: a}
	return context.WithValue(ctx, callKey{}, cl), cl
}

// transport is the http.RoundTripper under skiff's go-github client.
type transport struct{ c *Client }

// RoundTrip performs req with pacing, authentication, rate-limit waits and
// 5xx backoff. It returns the first answer that is final (2xx, or an error
// answer not worth another attempt) for go-github to decode, or an error:
// *RateLimitError, a context error, or the last transport error.
func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		// Attempts send copies from GetBody; the original is closed, as the
		// RoundTripper contract asks.
		defer req.Body.Close()
	}
	rq, _ := req.Context().Value(callKey{}).(*call)
	if rq == nil {
		return nil, errors.New("github: request made outside the client's methods")
	}
	return t.c.send(req, rq)
}

// send makes the attempts of one call: each paced, with its credential,
// until an answer is handed up or the call fails.
func (c *Client) send(req *http.Request, rq *call) (*http.Response, error) {
	ctx := req.Context()
	s := &sendState{log: c.log.With("op", rq.op, "method", req.Method)}
	if rq.inst != nil {
		s.log = s.log.With("installation_id", rq.inst.id)
	}
	for s.attempt = 1; ; s.attempt++ {
		out, err := c.prepare(ctx, req, rq)
		if err != nil {
			return nil, err
		}
		start := time.Now()
		resp, err := c.hc.Do(out)
		var n next
		if err != nil {
			n = c.afterFailure(ctx, rq, s, err)
		} else {
			if rq.inst != nil {
				c.observe(rq.inst, resp.Header)
			}
			s.log.Debug("github request", "path", req.URL.EscapedPath(), "status", resp.StatusCode, "attempt", s.attempt,
				"duration_ms", time.Since(start).Milliseconds(), "request_id", resp.Header.Get("X-GitHub-Request-Id"))
			n = c.afterStatus(ctx, req, rq, s, resp)
		}
		if !n.again {
			return n.resp, n.err
		}
		if n.sleep {
			if err := c.sleep(ctx, n.wait); err != nil {
				return nil, err
			}
		}
	}
}

// sendState is what one send counts across its attempts.
type sendState struct {
	log      *slog.Logger
	attempt  int
	retries  int  // network and server-error retries
	rlWaits  int  // rate-limit waits
	reauthed bool // the credential was minted afresh after a 401
}

// next is what send does after an attempt: try again (after sleeping wait,
// when sleep is set), or return resp and err.
type next struct {
	again bool
	sleep bool
	wait  time.Duration
	resp  *http.Response
	err   error
}

// retryAfter is a next that sleeps d, then tries again.
func retryAfter(d time.Duration) next { return next{again: true, sleep: true, wait: d} }

// prepare paces the call, fetches its credential and builds one attempt.
func (c *Client) prepare(ctx context.Context, req *http.Request, rq *call) (*http.Request, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
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
	return attemptOf(req, cred)
}

// afterFailure decides on an attempt that got no answer: retried with
// backoff while retries are left and the deadline allows (the call is then
// uncertain: it may have reached GitHub).
func (c *Client) afterFailure(ctx context.Context, rq *call, s *sendState, err error) next {
	if ctx.Err() != nil {
		return next{err: ctx.Err()}
	}
	if d := c.backoff(s.retries); s.retries < c.retry.MaxRetries && fitsDeadline(ctx, d) {
		s.log.Warn("github request failed, retrying", "attempt", s.attempt, "err", err, "retry_in_ms", d.Milliseconds())
		s.retries++
		rq.uncertain = true
		return retryAfter(d)
	}
	return next{err: err}
}

// answer is how send treats a response's status.
type answer int

const (
	answerHandUp      answer = iota // hand the response up as it is
	answerReauth                    // mint a fresh credential and try again
	answerRateLimited               // a 403 or 429: rate limited, or handed up
	answerServerError               // a 5xx to retry
)

// answerTo classifies a status, given whether the credential was already
// minted afresh and whether retries are left.
func answerTo(status int, reauthed, retriesLeft bool) answer {
	switch {
	case status < 300:
		return answerHandUp
	case status == http.StatusUnauthorized && !reauthed:
		return answerReauth
	case status == http.StatusForbidden || status == http.StatusTooManyRequests:
		return answerRateLimited
	case status >= 500 && retriesLeft:
		return answerServerError
	}
	return answerHandUp
}

// afterStatus decides on an answered attempt by its status.
func (c *Client) afterStatus(ctx context.Context, req *http.Request, rq *call, s *sendState, resp *http.Response) next {
	st := resp.StatusCode
	switch answerTo(st, s.reauthed, s.retries < c.retry.MaxRetries) {
	case answerReauth:
		// A token can be revoked or expire early; mint a fresh one once.
		discard(resp)
		c.dropCredential(rq)
		s.reauthed = true
		return next{again: true}
	case answerRateLimited:
		return c.afterForbidden(ctx, req, rq, s, resp)
	case answerServerError:
		d := c.backoff(s.retries)
		if !fitsDeadline(ctx, d) {
			return next{resp: handUp(req, resp)}
		}
		discard(resp)
		s.log.Warn("github server error, retrying", "status", st, "attempt", s.attempt, "retry_in_ms", d.Milliseconds())
		s.retries++
		rq.uncertain = true
		return retryAfter(d)
	}
	return next{resp: handUp(req, resp)}
}

// afterForbidden decides on a 403 or 429: one that is not a rate limit is
// handed up; a rate limit is waited out while waits are left and the
// deadline allows, else returned as a *RateLimitError.
func (c *Client) afterForbidden(ctx context.Context, req *http.Request, rq *call, s *sendState, resp *http.Response) next {
	st := resp.StatusCode
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	resp.Body.Close()
	if err != nil {
		return next{err: fmt.Errorf("reading response: %w", err)}
	}
	if !isRateLimited(st, resp.Header, body) {
		resp.Body = io.NopCloser(bytes.NewReader(body))
		return next{resp: handUp(req, resp)}
	}
	rle := c.rateLimitError(rq, st, resp.Header)
	wait := rle.RetryAfter(c.now())
	if s.rlWaits < c.retry.MaxRateLimitWaits && c.canWait(ctx, wait) {
		s.log.Warn("github rate limited, waiting", "secondary", rle.Secondary, "status", st, "wait_ms", wait.Milliseconds())
		s.rlWaits++
		return retryAfter(wait)
	}
	s.log.Warn("github rate limited, giving up", "secondary", rle.Secondary, "status", st, "reset", rle.Reset)
	return next{err: rle}
}

// maxErrorBody caps how much of a 403/429 answer is read to tell a rate
// limit from a permission error; GitHub's error bodies are a few hundred bytes.
const maxErrorBody = 64 << 10

// attemptOf is one attempt of req with the credential set; the original
// request stays untouched, as a RoundTripper must leave it.
func attemptOf(req *http.Request, cred string) (*http.Request, error) {
	out := req.Clone(req.Context())
	if req.Body != nil && req.Body != http.NoBody {
		if req.GetBody == nil {
			return nil, errors.New("github: request body cannot be replayed")
		}
		b, err := req.GetBody()
		if err != nil {
			return nil, fmt.Errorf("replaying request body: %w", err)
		}
		out.Body = b
	}
	out.Header.Set("Authorization", "Bearer "+cred)
	return out, nil
}

// handUp prepares a final answer for go-github: the request it refers to is
// go-github's own (without the credential), the body is bounded, and the
// rate-limit headers, already recorded per installation, are removed so that
// go-github's own limiter stays idle.
func handUp(req *http.Request, resp *http.Response) *http.Response {
	out := *resp
	out.Request = req
	out.Header = resp.Header.Clone()
	for k := range out.Header {
		if strings.HasPrefix(strings.ToLower(k), "x-ratelimit-") {
			out.Header.Del(k)
		}
	}
	out.Body = limitedBody{io.LimitReader(resp.Body, maxBody), resp.Body}
	return &out
}

type limitedBody struct {
	io.Reader
	io.Closer
}

func discard(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
	resp.Body.Close()
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

// isRateLimited tells a rate-limit answer from a permission error, as GitHub
// documents: 429, or 403 with Retry-After, x-ratelimit-remaining: 0, or a
// message naming a rate limit.
func isRateLimited(status int, h http.Header, body []byte) bool {
	if status != http.StatusForbidden && status != http.StatusTooManyRequests {
		return false
	}
	if status == http.StatusTooManyRequests || h.Get("Retry-After") != "" || h.Get("X-RateLimit-Remaining") == "0" {
		return true
	}
	return bytes.Contains(bytes.ToLower(body), []byte("rate limit"))
}

func (c *Client) rateLimitError(rq *call, status int, h http.Header) *RateLimitError {
	now := c.now()
	e := &RateLimitError{Op: rq.op, Status: status, Secondary: true}
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
	if s, err := strconv.Atoi(h.Get("Retry-After")); err == nil && s >= 0 {
		e.Reset = now.Add(time.Duration(s) * time.Second)
		return e
	}
	if h.Get("X-RateLimit-Remaining") == "0" {
		if r, err := strconv.ParseInt(h.Get("X-RateLimit-Reset"), 10, 64); err == nil {
			e.Secondary = false
			e.Reset = time.Unix(r, 0)
			return e
		}
	}
	e.Reset = now.Add(time.Minute)
	return e
}

// callError turns what go-github returned for rq into the package's errors:
// *RateLimitError as the transport made it, *APIError for an answer outside
// 2xx, and otherwise the cause (context or network) prefixed with the op.
// Nothing of it holds a credential: go-github's error refers to its own
// request, which never carries the Authorization header.
func callError(rq *call, err error) error {
	var rle *RateLimitError
	if errors.As(err, &rle) {
		return rle
	}
	var er *gh.ErrorResponse
	if errors.As(err, &er) && er.Response != nil {
		msg := er.Message
		if len(msg) > 200 {
			msg = msg[:200] + "…"
		}
		e := &APIError{Op: rq.op, Status: er.Response.StatusCode, Message: msg,
			RequestID: er.Response.Header.Get("X-GitHub-Request-Id")}
		if r := er.Response.Request; r != nil {
			e.Method, e.Path = r.Method, r.URL.EscapedPath()
		}
		return e
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // the URL is in the debug log; the op names the call
	}
	return fmt.Errorf("github %s: %w", rq.op, err)
}

// seg escapes one path segment for go-github, which joins paths with
// fmt.Sprintf and resolves them against BaseURL: "a/b" stays one segment,
// and "." or ".." cannot climb out of the API path.
func seg(s string) string {
	switch s {
	case ".":
		return "%2E"
	case "..":
		return "%2E%2E"
	}
	return url.PathEscape(s)
}

// do sends a request built with go-github's NewRequest and decodes the answer
// into out. It serves the calls whose query or answer go-github v62's typed
// methods do not carry (see docs/github.md).
func (c *Client) do(ctx context.Context, rq *call, method, path string, body, out any) (*gh.Response, error) {
	req, err := c.gh.NewRequest(method, path, body)
	if err != nil {
		return nil, fmt.Errorf("building %s request: %w", rq.op, err)
	}
	resp, err := c.gh.Do(ctx, req, out)
	if err != nil {
		return resp, callError(rq, err)
	}
	return resp, nil
}
