package github

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Sentinel errors. Every error the client returns for an HTTP answer is an
// *APIError or a *RateLimitError; match them with errors.Is against these.
var (
	// ErrNotFound: the resource does not exist (HTTP 404).
	ErrNotFound = errors.New("github: not found")
	// ErrUnauthorized: the credential was refused (HTTP 401), even after a fresh one was minted.
	ErrUnauthorized = errors.New("github: unauthorized")
	// ErrForbidden: the App lacks a permission or the installation cannot reach the resource (HTTP 403, not a rate limit).
	ErrForbidden = errors.New("github: forbidden")
	// ErrConflict: the resource already exists, e.g. a runner with the same name (HTTP 409).
	ErrConflict = errors.New("github: conflict")
	// ErrValidation: GitHub refused the request's content (HTTP 422).
	ErrValidation = errors.New("github: validation failed")
	// ErrServer: GitHub kept answering 5xx after the bounded retries.
	ErrServer = errors.New("github: server error")
	// ErrRateLimited: a primary or secondary rate limit is in force; see *RateLimitError for when it ends.
	ErrRateLimited = errors.New("github: rate limited")
	// ErrRunnerBusy: a runner cannot be deleted because it is running a job (HTTP 422 on delete).
	ErrRunnerBusy = errors.New("github: runner is busy")
	// ErrNotInstalled: none of the configured Apps is installed on the account or repository.
	ErrNotInstalled = errors.New("github: app not installed")
)

// APIError is an answer from GitHub outside 2xx. It never holds a credential:
// only the operation, the request path, the status and GitHub's message.
type APIError struct {
	Op        string // the client operation, e.g. "generate_jit_config"
	Method    string // HTTP method
	Path      string // request path, without query
	Status    int    // HTTP status code
	Message   string // GitHub's "message" field, truncated
	RequestID string // X-GitHub-Request-Id, for GitHub support
}

// Error describes the failed call.
func (e *APIError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	return fmt.Sprintf("github %s: %s %s: %d %s", e.Op, e.Method, e.Path, e.Status, msg)
}

// Is maps the status code to the package's sentinels.
func (e *APIError) Is(target error) bool {
	switch target {
	case ErrNotFound:
		return e.Status == http.StatusNotFound
	case ErrUnauthorized:
		return e.Status == http.StatusUnauthorized
	case ErrForbidden:
		return e.Status == http.StatusForbidden
	case ErrConflict:
		return e.Status == http.StatusConflict
	case ErrValidation:
		return e.Status == http.StatusUnprocessableEntity
	case ErrServer:
		return e.Status >= 500
	}
	return false
}

// RateLimitError says a rate limit is in force until Reset. The caller can
// retry after Reset (e.g. by returning the message to SQS with a visibility
// timeout); the client returns it instead of waiting when the wait would not
// fit in the context's deadline or exceeds the configured maximum wait.
type RateLimitError struct {
	Op             string
	InstallationID int64 // 0 for calls authenticated as the App
	AppID          int64
	Status         int       // 403 or 429; 0 when the client refused before calling
	Secondary      bool      // a secondary (abuse) limit rather than the hourly budget
	Reset          time.Time // when a retry may succeed
}

// Error describes the limit and when it ends.
func (e *RateLimitError) Error() string {
	kind := "primary"
	if e.Secondary {
		kind = "secondary"
	}
	return fmt.Sprintf("github %s: %s rate limit (app %d, installation %d) until %s",
		e.Op, kind, e.AppID, e.InstallationID, e.Reset.UTC().Format(time.RFC3339))
}

// Is reports ErrRateLimited.
func (e *RateLimitError) Is(target error) bool { return target == ErrRateLimited }

// RetryAfter is how long after now a retry may succeed (never negative).
func (e *RateLimitError) RetryAfter(now time.Time) time.Duration {
	if d := e.Reset.Sub(now); d > 0 {
		return d
	}
	return 0
}
