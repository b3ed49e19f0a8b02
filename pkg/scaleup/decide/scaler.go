// Package decide holds scale-up's decisions as pure functions over plain
// values: what to do with a job given its launch claim, which jobs share a
// launch request, how many of a pool's jobs are admitted, the launch's
// idempotency token, and whether a job that did not launch is retried or dead-lettered.
//
// A job's launch claim moves like this (see package ledger and store/launch.go):
//
//	no claim ───────────────────────────────────────────► Fresh (attempt 1)
//	claim, launch done, job got an instance ────────────► Launched (drop the duplicate)
//	claim, launch done, job got none (or not a member) ─► NextAttempt
//	claim, no launch, lease live ───────────────────────► InFlight (retry later)
//	claim, no launch, lease over (died before intent) ──► NextAttempt
//	claim, launch intent, lease live ───────────────────► InFlight
//	claim, launch intent, lease over (died after it) ───► Recover: replay the plan
//
// Only Recover keeps the attempt (and so the launch token), because only then
// may EC2 already have launched for it.
package decide

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/queue"
)

// Action is what to do with a job before launching.
type Action int

// The actions; see the package doc.
const (
	Fresh Action = iota
	NextAttempt
	InFlight
	Recover
	Launched
)

var actionNames = [...]string{"fresh", "next_attempt", "in_flight", "recover", "launched"}

// String names the action for logs.
func (a Action) String() string {
	if a < 0 || int(a) >= len(actionNames) {
		return "unknown"
	}
	return actionNames[a]
}

// ClaimDecision is the decision about one job's claim.
type ClaimDecision struct {
	Action Action
	// Attempt is the launch attempt to claim (Fresh, NextAttempt), or the
	// claim's own (Recover, InFlight, Launched).
	Attempt int
	// PrevGen is the gen of the claim read (0 without one): the claim write
	// is conditional on it.
	PrevGen int
	// Instance is the job's instance (Launched).
	Instance string
}

// DecideClaim decides from the job's claim (nil if none) and the launch its
// token names (nil if none), at now.
func DecideClaim(jobID int64, c *ledger.Claim, f *ledger.Launch, now time.Time) ClaimDecision {
	if c == nil {
		return ClaimDecision{Action: Fresh, Attempt: 1}
	}
	d := ClaimDecision{Attempt: c.Attempt, PrevGen: c.Gen}
	leaseOver := !now.Before(c.LeaseUntil)
	switch {
	case f != nil && f.State == ledger.LaunchDone:
		if id, _ := f.Instance(jobID); id != "" {
			d.Action, d.Instance = Launched, id
			return d
		}
		d.Action, d.Attempt = NextAttempt, c.Attempt+1
	case f == nil && leaseOver:
		d.Action, d.Attempt = NextAttempt, c.Attempt+1
	case f != nil && leaseOver:
		if _, member := f.Instance(jobID); !member {
			d.Action, d.Attempt = NextAttempt, c.Attempt+1 // planned, but left out before the launch
			return d
		}
		d.Action = Recover
	default:
		d.Action = InFlight
	}
	return d
}

// Token is the idempotency token of a launch for these members of a
// deployment's pool: derived from each job id and launch attempt, so the
// same jobs at the same attempts always give the same token, and a new
// attempt a new one. Two deployments launching for one job in one account
// get two tokens, so neither takes the other's launch for its own.
func Token(deployment, pool string, members []ledger.Member) string {
	keys := make([]string, len(members))
	for i, m := range members {
		keys[i] = strconv.FormatInt(m.JobID, 10) + ":" + strconv.Itoa(m.Attempt)
	}
	slices.Sort(keys)
	sum := sha256.Sum256([]byte(deployment + "\x00" + pool + "\x00" + strings.Join(keys, ",")))
	return "skiff-" + hex.EncodeToString(sum[:])[:40]
}

// Group splits items into launch requests: items with the same key (the same
// pool and launch spec) go together, in order of first appearance, at most
// maxSize per group. It returns indexes into keys.
func Group(keys []string, maxSize int) [][]int {
	if maxSize <= 0 {
		maxSize = 1
	}
	var groups [][]int
	open := map[string]int{} // key → index of its last, not yet full group
	for i, k := range keys {
		g, ok := open[k]
		if !ok || len(groups[g]) >= maxSize {
			groups = append(groups, nil)
			g = len(groups) - 1
			open[k] = g
		}
		groups[g] = append(groups[g], i)
	}
	return groups
}

// Outcome is how one job's processing ended in this delivery.
type Outcome int

// The outcomes.
const (
	// OutcomeLaunched: the job has its runner (now or before).
	OutcomeLaunched Outcome = iota
	// OutcomeSkipped: deliberately not launched (the reason says why).
	OutcomeSkipped
	// OutcomeRetry: not launched now; another delivery may succeed.
	OutcomeRetry
	// OutcomePermanent: can never launch without an operator's change.
	OutcomePermanent
	// OutcomeWait: another invocation is launching the job, or the outcome
	// of a launch is not known yet (its answer was lost); the claim's lease
	// completes it. Retried without using up an attempt: dead-lettering a job
	// that may have, or soon get, its runner would lose nothing but the
	// runner, and would say the wrong thing.
	OutcomeWait
	// OutcomeWaiting: not launched now for a reason time cures (a full
	// pool, no capacity); the job waits in its pool's waiting room, which
	// offers it again, so its message is done and spends no attempts.
	OutcomeWaiting
)

// Dispose decides the job's queue message's fate from the outcome and how
// many times the queue has delivered it: a retry on the last allowed
// delivery becomes a dead letter with its reason (SQS's own redrive would
// move it without one), and a permanent failure is dead-lettered at once.
func Dispose(o Outcome, receiveCount, maxAttempts int) queue.Verdict {
	switch o {
	case OutcomeLaunched, OutcomeSkipped, OutcomeWaiting:
		return queue.Done
	case OutcomePermanent:
		return queue.DeadLetter
	case OutcomeWait:
		return queue.Retry
	}
	if maxAttempts > 0 && receiveCount >= maxAttempts {
		return queue.DeadLetter
	}
	return queue.Retry
}

// Admit splits n jobs of a pool into those admitted within the granted
// reservation and those over the pool's max: the first granted go.
func Admit(n, granted int) (admitted, over int) {
	granted = max(0, min(n, granted))
	return granted, n - granted
}
