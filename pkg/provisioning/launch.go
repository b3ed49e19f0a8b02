// Package provisioning holds the records of making a runner for a job, the
// plain types that scale-up's decisions (package scaler), the store (package
// store) and the services share: a job's launch claim (Claim), the fleet
// record a launch made (Fleet), and the runner ledger's record of each
// runner (Runner) through its states. It imports only the standard library,
// so the decisions that use it stay free of SDKs and network code.
//
// The runner ledger keeps one record per runner, from the moment scale-up
// reserves it to its instance's termination. It only moves forward:
//
//	reserved ──▶ launched ──▶ registered ──▶ job started ──▶ job completed ──▶ terminated
//	    │                                                                          ▲
//	    └──── never launched: scale-up releases the reservation ───────────────────┘
//
// Releasing is not a state: scale-up (or, at start, skiff local) ends a
// reservation that did not launch, and the record is terminated with Reason
// "not_launched". Who writes each step:
//
//	reserved       scale-up, when it admits the job under the pool's maxRunners
//	launched       scale-up, when the provider returns the runner's instance
//	registered     the reconciler, when GitHub lists the runner
//	job started    the webhook (workflow_job in_progress naming the runner), the
//	               reconciler (the instance's job-started hook tag, GitHub's busy flag)
//	job completed  the webhook (workflow_job completed), the reconciler (the hook's tag)
//	terminated     the EC2 state-change function (EventBridge), the reconciler, scale-up
//	               (a released reservation)
//
// Whichever writer arrives first wins; a late or repeated report changes
// nothing. A record counts toward its pool's live count from reserved until
// terminated, and leaves it exactly once.
package provisioning

import "time"

// Claim is a job's launch claim.
type Claim struct {
	JobID int64
	// Attempt is the launch attempt, from 1. It moves on only when the
	// previous attempt is known to be over (its fleet is done, or never
	// reached the provider), so a retry after a crash keeps the attempt, and
	// the fleet token, of the call that may have launched.
	Attempt int
	// Gen counts the claims of the job (fresh, next attempt or takeover),
	// from 1; it makes each runner name unique.
	Gen int
	// Token is the fleet token the job was planned into.
	Token string
	// Pool is the job's pool.
	Pool string
	// LeaseUntil is when the claim may be taken over if its fleet is not done.
	LeaseUntil time.Time
	// UpdatedAt is when the claim was taken.
	UpdatedAt time.Time
	// ExpiresAt is when the store may forget the claim (TTL). It must outlive
	// the queue's message retention, so that a late duplicate still finds it.
	ExpiresAt time.Time
}

// FleetState is how far a fleet got.
type FleetState string

// The fleet states.
const (
	// FleetIntent: the plan is recorded; the provider may or may not have
	// been asked to launch it.
	FleetIntent FleetState = "intent"
	// FleetDone: the launch and the registrations are finished.
	FleetDone FleetState = "done"
)

// Member is one job of a fleet.
type Member struct {
	JobID   int64
	Attempt int
}

// Fleet is one launch request of scale-up: its plan and, once done, what it
// launched.
type Fleet struct {
	Token string
	Pool  string
	State FleetState
	// Plan is the provider's plan, opaque to everyone else: replaying it
	// after a crash asks the provider for exactly the same launch.
	Plan    string
	Members []Member
	// Instances are aligned with Members: the instance id each member got, or "".
	Instances []string
	// Reason says why members got no instance ("" when all did).
	Reason    string
	CreatedAt time.Time
	ExpiresAt time.Time
}

// Instance returns the instance the job got in this fleet, and whether the
// job is a member at all.
func (f Fleet) Instance(jobID int64) (string, bool) {
	for i, m := range f.Members {
		if m.JobID == jobID {
			if i < len(f.Instances) {
				return f.Instances[i], true
			}
			return "", true
		}
	}
	return "", false
}
