package pool

import (
	"errors"
	"strings"
)

// The kinds of resolution failure. A *ResolveError wraps exactly one of them,
// so callers test with errors.Is(err, pool.ErrOutOfBounds) and read the
// details with errors.As.
var (
	// ErrNoPool: no pool carries all of the job's labels (or pool= names none).
	ErrNoPool = errors.New("no pool matches")
	// ErrAmbiguous: several pools match with equally few extra labels.
	ErrAmbiguous = errors.New("ambiguous")
	// ErrUnknownKey: the dynamic label has a key skiff does not know.
	ErrUnknownKey = errors.New("unknown key")
	// ErrMalformed: the dynamic label does not follow the grammar.
	ErrMalformed = errors.New("malformed dynamic label")
	// ErrOutOfBounds: a dynamic value exceeds the pool's bounds.
	ErrOutOfBounds = errors.New("out of bounds")
	// ErrRepositoryNotAllowed: the matching pools are scoped to other repositories.
	ErrRepositoryNotAllowed = errors.New("repository not allowed")
	// ErrPublicRepository: the repository is public (or its visibility is
	// unknown) and the pool admits only private and internal ones.
	ErrPublicRepository = errors.New("public repository")
	// ErrForkPullRequest: the run's code comes from a fork and the pool
	// refuses it (or its trigger is not known yet).
	ErrForkPullRequest = errors.New("pull request from a fork")
)

// The machine-readable reasons, one per kind, for logs and metrics.
const (
	ReasonNoPool               = "no_pool"
	ReasonAmbiguous            = "ambiguous"
	ReasonUnknownKey           = "unknown_key"
	ReasonMalformed            = "malformed"
	ReasonOutOfBounds          = "out_of_bounds"
	ReasonRepositoryNotAllowed = "repository_not_allowed"
	ReasonPublicRepository     = "public_repository"
	ReasonForkPullRequest      = "fork_pull_request"
	reasonUnknown              = "error"
)

// ResolveError explains why a job's labels resolve to no launch spec.
type ResolveError struct {
	// Kind is one of the Err* sentinels above.
	Kind error
	// Label is the dynamic label at fault, if any.
	Label string
	// Key, Value and Bound name what exceeded which limit (out of bounds),
	// or which key was unknown or malformed.
	Key, Value, Bound string
	// Pool is the pool the error concerns, if one.
	Pool string
	// Pools lists the tied pools (ambiguous) or the pools that refused the
	// repository (repository not allowed).
	Pools []string
	// Detail is a human explanation.
	Detail string

	// rank orders out-of-bounds errors by how much they tell: a pool that
	// takes no dynamic sizes (0), a key the pool refuses (1), a bound
	// exceeded (2). When no pool fits, the most telling error is returned.
	rank int
}

// Error renders the error in one line, e.g.
// "out of bounds: pool gpu: gpu=8 (bound: maxGpus 4)".
func (e *ResolveError) Error() string {
	var b strings.Builder
	b.WriteString(e.Kind.Error())
	if e.Pool != "" {
		b.WriteString(": pool ")
		b.WriteString(e.Pool)
	}
	if len(e.Pools) > 0 {
		b.WriteString(": pools ")
		b.WriteString(strings.Join(e.Pools, ", "))
	}
	if e.Key != "" {
		b.WriteString(": ")
		b.WriteString(e.Key)
		if e.Value != "" {
			b.WriteString("=")
			b.WriteString(e.Value)
		}
	}
	if e.Bound != "" {
		b.WriteString(" (bound: ")
		b.WriteString(e.Bound)
		b.WriteString(")")
	}
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	if e.Label != "" && e.Kind != ErrOutOfBounds {
		b.WriteString(" (in ")
		b.WriteString(e.Label)
		b.WriteString(")")
	}
	return b.String()
}

// Unwrap returns the kind, for errors.Is.
func (e *ResolveError) Unwrap() error { return e.Kind }

// Reason returns the short machine-readable reason: no_pool, ambiguous,
// unknown_key, malformed, out_of_bounds, repository_not_allowed,
// public_repository or fork_pull_request.
func (e *ResolveError) Reason() string {
	switch e.Kind {
	case ErrNoPool:
		return ReasonNoPool
	case ErrAmbiguous:
		return ReasonAmbiguous
	case ErrUnknownKey:
		return ReasonUnknownKey
	case ErrMalformed:
		return ReasonMalformed
	case ErrOutOfBounds:
		return ReasonOutOfBounds
	case ErrRepositoryNotAllowed:
		return ReasonRepositoryNotAllowed
	case ErrPublicRepository:
		return ReasonPublicRepository
	case ErrForkPullRequest:
		return ReasonForkPullRequest
	}
	return reasonUnknown
}

// Reason returns the machine-readable reason of a resolution error: the
// ResolveError's reason, "" for nil, and "error" for anything else.
func Reason(err error) string {
	if err == nil {
		return ""
	}
	var re *ResolveError
	if errors.As(err, &re) {
		return re.Reason()
	}
	return reasonUnknown
}
