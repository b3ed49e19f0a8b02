package ledger

import (
	"context"
	"errors"
	"time"
)

// Launches is scale-up's launch state: what it keeps so that a queued job
// launches at most one runner and re-runs of interrupted jobs launch
// on-demand (LaunchMemory implements it here, LaunchDynamo in package dynamostore, whose doc holds the key
// design). Every method is safe for concurrent use and bounded by its
// context. Errors other than ErrConflict and ErrNotFound are failures of
// the store itself: retry the job later.
type Launches interface {
	// LaunchClaims returns the live (unexpired) claims of the jobs, keyed by
	// job id; jobs without one are absent. One strongly consistent read.
	LaunchClaims(ctx context.Context, jobIDs []int64, now time.Time) (map[int64]Claim, error)
	// ClaimLaunch writes c if the job's claim is still the one read: absent
	// or expired when prevGen is 0, else with gen prevGen. Otherwise it
	// returns ErrConflict. c.Gen must be prevGen+1.
	ClaimLaunch(ctx context.Context, c Claim, prevGen int, now time.Time) error

	// PutLaunch records a launch's intent or, for a launch never made, its
	// final state. It is fenced: it returns ErrConflict when a launch with
	// that token exists, or when a member's claim no longer names the
	// launch's token (another invocation took the job over after the lease).
	PutLaunch(ctx context.Context, f Launch) error
	// FinishLaunch marks a launch in intent done with the instances (aligned
	// with its members) and the reason for those missing. The first finish
	// wins: a launch already done (recovered by another invocation) or gone
	// returns ErrConflict and keeps what it has.
	FinishLaunch(ctx context.Context, token string, instances []string, reason string) error
	// Launch returns the launch with that token, or ErrNotFound.
	Launch(ctx context.Context, token string, now time.Time) (Launch, error)

	// MarkOnDemand records that the jobs of pool in attempt (and later
	// attempts) of workflow run run launch on on-demand capacity, until
	// until: scale-down marks a run before it re-runs the jobs a spot
	// interruption failed. A later mark replaces an earlier one.
	MarkOnDemand(ctx context.Context, run int64, pool string, attempt int, until time.Time) error
	// OnDemandFrom returns the attempt of run from which pool's jobs launch
	// on on-demand capacity, or 0 when the run is not marked (or the mark
	// expired) at now.
	OnDemandFrom(ctx context.Context, run int64, pool string, now time.Time) (int, error)
}

// OnDemandTTL is how long a run's on-demand mark lasts: GitHub cancels a
// job queued for 24 hours, so no job of the re-run attempt can need the
// mark after that.
const OnDemandTTL = 24 * time.Hour

// ValidateOnDemand is the rule every Launches implementation applies to a mark.
func ValidateOnDemand(run int64, pool string, attempt int) error {
	switch {
	case run <= 0:
		return errors.New("marking a run on-demand: run id is required")
	case pool == "":
		return errors.New("marking a run on-demand: pool is required")
	case attempt <= 1:
		return errors.New("marking a run on-demand: the attempt of a re-run is 2 or more")
	}
	return nil
}

// ValidateClaim is the rule every Launches implementation applies to a
// claim that follows generation prevGen.
func ValidateClaim(c Claim, prevGen int) error {
	switch {
	case c.JobID <= 0:
		return errors.New("claiming launch: job id is required")
	case c.Attempt <= 0:
		return errors.New("claiming launch: attempt must be positive")
	case c.Gen != prevGen+1:
		return errors.New("claiming launch: gen must be the previous gen plus one")
	case c.Token == "":
		return errors.New("claiming launch: token is required")
	}
	return nil
}

// ValidateLaunch is the rule every Launches implementation applies to a
// launch record.
func ValidateLaunch(f Launch) error {
	switch {
	case f.Token == "":
		return errors.New("recording launch: token is required")
	case f.State != LaunchIntent && f.State != LaunchDone:
		return errors.New("recording launch: state must be intent or done")
	}
	return nil
}
