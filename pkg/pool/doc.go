// Package pool is skiff's label language: the pools file's types (Config,
// Pool, the backends' sections, Warm, Policy) and the pure decisions every
// service takes with them at run time — which pool a job's runs-on labels
// resolve to and what to launch for it (Resolve, Spec), who may run
// (Policy.Admit), how a backend is asked for sizes (Slurm, Kubernetes and
// container requests), warm capacity's schedule and cost.
//
// # What lives where
//
//	pkg/pool                       types and decisions; imports no file, schema or SDK
//	pkg/pool/poolfile              the pools file: Load and Parse (YAML, the embedded
//	                               JSON Schema, the semantic checks, each finding a
//	                               Diagnostic with line and fix), *ValidationError
//	pkg/provider/ec2/ec2prices     the EC2 instance families and the embedded price table
//	cmd/skiff (planview.go)        skiff plan's rendering of a Spec
//
// Decode turns a schema-valid document into a Config with the defaults
// applied; poolfile calls it between the schema and its own checks, and
// poolfile imports pool, never the other way. A Config carries the file's
// warnings as Diagnostics. The returned Config is immutable and safe for
// concurrent use.
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
