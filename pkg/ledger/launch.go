package ledger

import "time"

// Claim is a job's launch claim.
type Claim struct {
	JobID int64
	// Attempt is the launch attempt, from 1. It moves on only when the
	// previous attempt is known to be over (its launch is done, or never
	// reached the provider), so a retry after a crash keeps the attempt, and
	// the launch token, of the call that may have launched.
	Attempt int
	// Gen counts the claims of the job (fresh, next attempt or takeover),
	// from 1; it makes each runner name unique.
	Gen int
	// Token is the launch token the job was planned into.
	Token string
	// Pool is the job's pool.
	Pool string
	// LeaseUntil is when the claim may be taken over if its launch is not done.
	LeaseUntil time.Time
	// UpdatedAt is when the claim was taken.
	UpdatedAt time.Time
	// ExpiresAt is when the store may forget the claim (TTL). It must outlive
	// the queue's message retention, so that a late duplicate still finds it.
	ExpiresAt time.Time
}

// LaunchState is how far a launch got.
type LaunchState string

// The launch states.
const (
	// LaunchIntent: the plan is recorded; the provider may or may not have
	// been asked to launch it.
	LaunchIntent LaunchState = "intent"
	// LaunchDone: the launch and the registrations are finished.
	LaunchDone LaunchState = "done"
)

// Member is one job of a launch.
type Member struct {
	JobID   int64
	Attempt int
}

// Launch is one launch request of scale-up, to whichever backend (an EC2
// fleet, local processes, pods, batch jobs): its plan and, once done, what
// it launched.
type Launch struct {
	Token string
	Pool  string
	State LaunchState
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

// Instance returns the instance the job got in this launch, and whether the
// job is a member at all.
func (f Launch) Instance(jobID int64) (string, bool) {
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
