// Package ledger is the runner ledger and the launch records: the plain
// types that scale-up's decisions (package decide), the stores and the
// services share, and the ports that keep them. A job's launch claim
// (Claim), the record of one launch request to any backend (Launch: an EC2
// fleet, local processes, pods, batch jobs), and the ledger's record of each
// runner (Runner) through its states. Ledger and Launches are the ports,
// Interruptions the spot warnings' extra; Memory and LaunchMemory implement
// them in process memory, package dynamostore in DynamoDB and package
// sqlitestore in SQLite, and package ledgertest is their conformance suite.
// It imports neither an SDK nor network code, so that the decisions that use
// it stay free of both.
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
// terminated, and leaves it exactly once, whoever reports its end first (the
// EC2 state-change event, the reconciler, scale-up releasing a reservation
// that did not launch).
package ledger

import (
	"context"
	"errors"
	"time"
)

// Errors the ports return; callers test them with errors.Is. They are
// store.ErrNotFound and store.ErrConflict, the same values.
var (
	// ErrNotFound: no record with that key.
	ErrNotFound = errors.New("not found")
	// ErrConflict: a conditional write lost to a concurrent writer (the claim
	// changed since it was read, or the launch already exists).
	ErrConflict = errors.New("conflicting write")
)

// Ledger is the runner ledger (Memory implements it here, LedgerDynamo in
// package dynamostore, whose doc holds the key design). Every method is
// safe for concurrent use and bounded by its context. Errors other than
// ErrNotFound are failures of the store itself: retry later.
type Ledger interface {
	// Reserve creates reserved records for a prefix of the runners: in
	// order, until one does not fit under the pool's max live count or
	// already exists (a concurrent or repeated reservation: its record
	// stands). It returns how many it reserved, the first n, which count
	// toward the pool from now on. All runners must be of pool.
	Reserve(ctx context.Context, pool string, max int, runners []Runner) (int, error)
	// Launched records a reserved runner's instance (reserved → launched)
	// and makes the runner findable by its instance id. A runner already
	// past launched only gets the instance facts it lacks.
	Launched(ctx context.Context, name string, l LaunchReport) error
	// Advance moves the runner forward to registered, job started or job
	// completed (job: the job it ran). A report of a state it passed, or
	// for an ended runner, changes nothing but missing times and a missing
	// busy job: an event after the runner's end still names the job it
	// ran. ErrNotFound: no such runner (not one of skiff's).
	Advance(ctx context.Context, name string, to State, at time.Time, job int64) error
	// End ends the runner: terminated, or a reservation released. The first
	// call takes it off its pool's live count and returns true; later calls
	// return false and change nothing. ErrNotFound: no such runner.
	End(ctx context.Context, name string, at time.Time, reason string) (bool, error)
	// EndInstance is End by instance id. ErrNotFound: the instance is not a
	// skiff runner's (or its record has expired).
	EndInstance(ctx context.Context, instanceID string, at time.Time, reason string) (bool, error)
	// EndAwaiting is End for a runner whose job's metrics record may still
	// be due while nothing has said which job it ran (an event naming it
	// may come after the end): the runner is ended as End ends it (true:
	// this call took it off its pool's count) and, ended by this call or
	// before, is on its pool's awaiting list until StopAwaiting — in the same
	// write, so that no crash loses it. ErrNotFound: no such runner.
	EndAwaiting(ctx context.Context, name string, at time.Time, reason string) (bool, error)
	// Awaiting lists the pool's awaiting runners, sorted by name: their
	// records as they are now (a lifecycle event that named the job since
	// has filled BusyJob).
	Awaiting(ctx context.Context, pool string) ([]Runner, error)
	// StopAwaiting takes the runner off its pool's awaiting list. A runner not on
	// it, or unknown, is no error.
	StopAwaiting(ctx context.Context, name string) error
	// Runner returns the runner's record, or ErrNotFound.
	Runner(ctx context.Context, name string) (Runner, error)
	// RunnerByInstance returns the record of the runner on an instance, or ErrNotFound.
	RunnerByInstance(ctx context.Context, instanceID string) (Runner, error)
	// LiveRunners lists the pool's live runners.
	LiveRunners(ctx context.Context, pool string) ([]Runner, error)
	// Live returns the pool's live count.
	Live(ctx context.Context, pool string) (int, error)
}

// DefaultRunnerTTL keeps an ended runner's record for a while (the
// reconciler and the metrics records read it after the instance is gone);
// a live record never expires.
const DefaultRunnerTTL = 14 * 24 * time.Hour

// ValidateRunners is the rule every Ledger implementation applies to a
// reservation of runners in pool.
func ValidateRunners(pool string, runners []Runner) error {
	for _, r := range runners {
		switch {
		case r.Name == "":
			return errors.New("reserving runners: a runner has no name")
		case r.Pool != pool:
			return errors.New("reserving runners: a runner of another pool")
		case r.JobID < 0 || r.JobID == 0 && !IsWarm(r.Name):
			return errors.New("reserving runners: job id is required (but for a warm machine's record)")
		}
	}
	return nil
}

// ErrInvalidAdvance refuses an advance to a state that is not reported.
var ErrInvalidAdvance = errors.New("advancing runner: only registered, job started and job completed are reported")
