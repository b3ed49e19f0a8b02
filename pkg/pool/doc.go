// Package pool loads the operator's pools file and resolves a job's runs-on
// labels to a launch spec: the label language of skiff.
//
// # Loading
//
// Parse and Load read YAML, check it against schema/pools.schema.json (JSON
// Schema 2020-12, embedded) and then run semantic checks the schema cannot
// express: duplicate names and label sets, impossible bounds, unknown
// instance families, architecture and GPU image mismatches. Every finding is
// a Diagnostic with file, line, column and a fix; a file with errors returns
// a *ValidationError (errors.Is(err, ErrInvalidConfig)). The returned Config
// is immutable and safe for concurrent use.
//
// # Matching
//
// Resolution is a pure function of the labels, the repository and the Config:
//
//	labels ──► set aside the one skiff/... label, parse it (malformed, unknown_key)
//	       ──► pools carrying every other label, case-insensitively, counting the
//	           implied self-hosted, linux, x64|arm64            (else no_pool)
//	       ──► pool=NAME keeps only that pool                    (else no_pool)
//	       ──► the repository's scope filter        (else repository_not_allowed)
//	       ──► from the fewest labels up, the first pool whose dynamic bounds admit
//	           the request wins; a second of the same size is   ambiguous;
//	           none admits it                                   out_of_bounds
//
// The runner registers with the job's labels plus the implied ones, so what
// GitHub matches is what was launched, and a job with run=ID runs only on a
// runner launched for that run. (GitHub may still give such a runner a job
// whose labels are a subset of its own: pin every job of a pool for strict
// pinning.)
//
// # Dynamic label
//
// One label such as skiff/pool=gpu/cpu=8/ram=32/gpu=1/family=g6+g5/spot=false/disk=200/run=123
// asks for sizes within a pool's bounds; see ParseLabel for the grammar and
// docs/pools.md for the full reference.
//
// # Who may run
//
// Each pool has a Policy: the repository visibilities it admits (private and
// internal by default) and whether it runs pull requests from forks (refused
// by default; allowed; or only for authors with write access). Policy.Admit
// is a pure decision over neutral Facts:
//
//	visibility admitted?          (else public_repository; unknown = public)
//	  └─► pool allows forks?      ─► admitted
//	      trigger unknown?        ─► fork_pull_request (look the run up first)
//	      head ≠ repository?      ─► collaborators and write access ─► admitted
//	                                 else fork_pull_request
//
// Errors are *ResolveError values wrapping one of ErrNoPool, ErrAmbiguous,
// ErrUnknownKey, ErrMalformed, ErrOutOfBounds, ErrRepositoryNotAllowed,
// ErrPublicRepository and ErrForkPullRequest; Reason(err) gives the short
// machine-readable reason for logs and metrics.
package pool
