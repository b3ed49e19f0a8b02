package github

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// defaultHourlyBudget is assumed for an installation whose headers have not
// been seen yet: GitHub's minimum for an App installation is 5,000 per hour.
const defaultHourlyBudget = 5000

// rateState is the primary rate limit of one installation, from the
// X-RateLimit-* headers of its latest answer, decremented optimistically by
// the calls in flight. Guarded by Client.mu.
type rateState struct {
	known     bool
	limit     int
	remaining int
	reset     time.Time
	nextSlot  time.Time // when spreading: the earliest start of the next call
}

// left is the remaining budget as of now; a passed reset restores the limit.
func (r rateState) left(now time.Time) int {
	if !r.known {
		return defaultHourlyBudget
	}
	if !now.Before(r.reset) {
		return r.limit
	}
	return r.remaining
}

// RateLimitState is the last known primary rate limit of an installation.
type RateLimitState struct {
	Limit     int
	Remaining int
	Reset     time.Time
}

// RateLimit returns the last known primary rate limit of an installation, and
// false when no answer for it has been seen.
func (c *Client) RateLimit(installationID int64) (RateLimitState, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	in := c.installs[installationID]
	if in == nil || !in.rl.known {
		return RateLimitState{}, false
	}
	return RateLimitState{Limit: in.rl.limit, Remaining: in.rl.remaining, Reset: in.rl.reset}, true
}

// observe records the X-RateLimit-* headers of an answer for in.
func (c *Client) observe(in *install, h http.Header) {
	limit, err1 := strconv.Atoi(h.Get("X-RateLimit-Limit"))
	remaining, err2 := strconv.Atoi(h.Get("X-RateLimit-Remaining"))
	reset, err3 := strconv.ParseInt(h.Get("X-RateLimit-Reset"), 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return // GHES with rate limits disabled sends none
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	rt := time.Unix(reset, 0)
	// Answers can arrive out of order: within one window keep the lowest.
	if in.rl.known && rt.Equal(in.rl.reset) && remaining > in.rl.remaining {
		return
	}
	in.rl.known, in.rl.limit, in.rl.remaining, in.rl.reset = true, limit, remaining, rt
}

// pace slows calls on an installation down before its budget runs out: below
// the reserve, the remaining calls are spread evenly until the reset; at zero
// the call waits for the reset, or returns *RateLimitError when that wait
// does not fit the context's deadline or the policy's longest wait.
func (c *Client) pace(ctx context.Context, rq *call) error {
	in := rq.inst
	c.mu.Lock()
	now := c.now()
	r := &in.rl
	if !r.known || !now.Before(r.reset) {
		c.mu.Unlock()
		return nil
	}
	var wait time.Duration
	exhausted := r.remaining <= 0
	switch {
	case exhausted:
		wait = r.reset.Sub(now)
	case float64(r.remaining) <= c.reserve*float64(r.limit):
		interval := r.reset.Sub(now) / time.Duration(r.remaining+1)
		slot := r.nextSlot
		if slot.Before(now) {
			slot = now
		}
		r.nextSlot = slot.Add(interval)
		wait = slot.Sub(now)
		r.remaining--
	default:
		r.remaining--
	}
	reset, appID := r.reset, int64(0)
	if in.app != nil {
		appID = in.app.ID
	}
	c.mu.Unlock()
	if wait <= 0 {
		return nil
	}
	if !c.canWait(ctx, wait) {
		return &RateLimitError{Op: rq.op, InstallationID: in.id, AppID: appID, Reset: reset}
	}
	c.log.Warn("github budget low, slowing down", "op", rq.op, "installation_id", in.id,
		"exhausted", exhausted, "wait_ms", wait.Milliseconds())
	if err := c.sleep(ctx, wait); err != nil {
		return fmt.Errorf("github %s: %w", rq.op, err)
	}
	if exhausted {
		c.mu.Lock()
		if !c.now().Before(r.reset) {
			r.known = false // a new window: the next answer tells its budget
		}
		c.mu.Unlock()
	}
	return nil
}
