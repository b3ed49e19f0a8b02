// Package github is skiff's GitHub App client for the REST API of github.com
// or GitHub Enterprise Server, with the calls the control plane needs (JIT
// runner configuration, registration tokens, runner groups, runners, jobs,
// workflow runs, installation lookup, webhook deliveries) and nothing else,
// and the HMAC-SHA256 signing and verification of webhook deliveries.
//
// Requests are built and answers decoded by go-github v62 (its Actions and
// Apps services; its NewRequest/Do with go-github's types extended by the
// few fields v62 lacks, for runners, workflow runs and filtered delivery
// listings). Underneath go-github sits skiff's http.RoundTripper, which
// does per attempt what go-github does not: it picks and caches the
// credential (App JWT or installation token), paces calls under the
// primary budget, waits out or reports rate limits, retries 5xx and
// network errors within the context's deadline, and marks calls whose
// outcome is uncertain (for lost-JIT recovery). The call (its operation
// name and the installation or App it acts as) travels in the request's
// context. The transport owns rate-limit state and hides the X-RateLimit-*
// headers from go-github, whose own limiter (one per go-github client, on
// the wall clock) would otherwise refuse calls of every installation.
//
// Authentication: each App signs an RS256 JWT (iat 60 s in the past, exp
// 9 minutes ahead, reused for 7 minutes) to mint installation tokens.
// Tokens are cached per installation in the Client and replaced 5 minutes
// before they expire; concurrent callers share one mint. A Client kept in a
// package variable of a Lambda function therefore mints about once an hour
// per installation, however many invocations the warm container serves:
//
//	no token ──mint (one flight)──► valid ──55 min──► refreshing ──► valid
//	                                  │  401 from GitHub: drop, mint once more
//
// Rate limits: the X-RateLimit-* headers of every answer are kept per
// installation. Below 5% of the hourly budget, calls are spread evenly until
// the reset; at zero they wait for the reset when it fits the context's
// deadline and RetryPolicy.MaxRateLimitWait, and otherwise return a
// *RateLimitError (errors.Is ErrRateLimited) carrying the reset time, which
// a caller can turn into an SQS retry. Secondary limits (403/429 with
// Retry-After, x-ratelimit-remaining: 0, or a rate-limit message) are
// handled the same way, as GitHub documents. 5xx answers and transport
// errors are retried with exponential backoff and full jitter, 3 times by
// default, as long as the backoff fits the context's deadline. Every call is
// bounded by its context. A JIT configuration whose answer was lost (a 5xx or
// transport error, then 409 for the name on the retry) is regenerated once,
// after deleting the never-connected runner GitHub created for it.
//
// Several Apps: NewClient takes a list. When an account has more than one
// of them installed, each call acts as the installation with the most
// remaining budget (round-robin among equals), so the Apps' hourly budgets
// add up. The installation id from a webhook is a hint: with one App it is
// used as is, with several it joins the account's discovered installations.
//
// Secrets: JIT configurations and registration tokens come back as Secret,
// which redacts itself in fmt, slog and JSON. Errors and log lines carry
// operation names, paths and status codes, never a credential; a canary test
// checks this.
package github
