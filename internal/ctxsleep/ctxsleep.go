// Package ctxsleep waits a while unless a context ends first: the one
// sleep every retry loop and poller in skiff needs, so that a shutdown or a
// deadline never waits out a backoff.
package ctxsleep

import (
	"context"
	"time"
)

// For waits d, or until ctx ends, whichever comes first. It returns
// ctx.Err() when the context ended (at once for d <= 0 only if it already
// has), nil when d passed.
func For(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Bound is how long a wait under ctx may last, for an API that takes a
// bound of its own (the SDK's waiters): the time to ctx's deadline, at
// least a millisecond, or fallback when ctx has none.
func Bound(ctx context.Context, fallback time.Duration) time.Duration {
	if deadline, ok := ctx.Deadline(); ok {
		return max(time.Until(deadline), time.Millisecond)
	}
	return fallback
}
