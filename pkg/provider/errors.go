package provider

import (
	"errors"
	"fmt"
)

// The kinds of provider failure. Every error a Provider returns, and every
// per-runner error in a Result, wraps exactly one of them.
var (
	// ErrCapacity: the backend has no capacity for the launch now (no
	// instances of these types in these zones, a partial fill, an
	// unsupported type in a zone, a spot price above the maximum). Another
	// try in a few minutes may succeed.
	ErrCapacity = errors.New("insufficient capacity")
	// ErrQuota: an account or site quota is exhausted. Error.Permanent tells
	// whether the quota is zero, which no retry can overcome.
	ErrQuota = errors.New("quota exceeded")
	// ErrInvalid: the request is wrong (a missing launch template, image or
	// subnet; a bad parameter; missing permissions). Only the operator can
	// fix it.
	ErrInvalid = errors.New("invalid launch request")
	// ErrThrottled: the backend's API rate limit. Retry the whole request later.
	ErrThrottled = errors.New("provider request rate exceeded")
	// ErrTransient: a server error, a lost answer, or a failure of the
	// registration's delivery. Retry later.
	ErrTransient = errors.New("transient provider error")
)

// Error is a classified provider failure with what the operator needs to
// act on it. It never holds a secret.
type Error struct {
	// Kind is one of the Err* kinds above.
	Kind error
	// Code is the backend's own code (e.g. EC2's VcpuLimitExceeded), for logs.
	Code string
	// Message is the backend's message.
	Message string
	// Detail tells the operator what to change, e.g. the quota to raise;
	// it goes with a dead letter. May be empty.
	Detail string
	// Final marks a failure no retry can fix without an operator's change
	// (a quota of zero); ErrInvalid is always final.
	Final bool
}

// Error renders the code and message.
func (e *Error) Error() string {
	switch {
	case e.Code == "":
		return e.Message
	case e.Message == "":
		return e.Code
	}
	return e.Code + ": " + e.Message
}

// Is matches the error's kind.
func (e *Error) Is(target error) bool { return target == e.Kind }

// Permanent reports whether retrying cannot help without an operator's change.
func Permanent(err error) bool {
	if errors.Is(err, ErrInvalid) {
		return true
	}
	var e *Error
	return errors.As(err, &e) && e.Final
}

// Detail returns the operator's detail of a provider error, or "".
func Detail(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Detail
	}
	return ""
}

// Reason is the short, bounded name of an error's kind for logs, metrics
// and dead letters: capacity, quota, invalid, throttled, transient; "" for
// nil and "error" for an error of no kind.
func Reason(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrCapacity):
		return "capacity"
	case errors.Is(err, ErrQuota):
		return "quota"
	case errors.Is(err, ErrInvalid):
		return "invalid"
	case errors.Is(err, ErrThrottled):
		return "throttled"
	case errors.Is(err, ErrTransient):
		return "transient"
	}
	return "error"
}

// Invalid returns a final ErrInvalid with code and message: a request the
// provider refuses, and would refuse again.
func Invalid(code, msg string) *Error {
	return &Error{Kind: ErrInvalid, Code: code, Message: msg, Final: true}
}

// Canceled is a context's end (err, from ctx.Err) as a transient error
// coded Canceled: the caller's deadline, not the backend, ended the call.
func Canceled(err error) *Error {
	return &Error{Kind: ErrTransient, Code: "Canceled", Message: err.Error()}
}

// Errorf returns an *Error of the kind with a formatted message.
func Errorf(kind error, format string, args ...any) *Error {
	return &Error{Kind: kind, Message: fmt.Sprintf(format, args...)}
}
