package ctxsleep

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestFor(t *testing.T) {
	if err := For(context.Background(), time.Millisecond); err != nil {
		t.Errorf("a wait that ran its course: %v, want nil", err)
	}
	if err := For(context.Background(), 0); err != nil {
		t.Errorf("no wait on a live context: %v, want nil", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// An hour on an ended context returns at once: the test would hang otherwise.
	if err := For(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("an ended context: %v, want context.Canceled", err)
	}
	if err := For(ctx, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("no wait on an ended context: %v, want context.Canceled", err)
	}
}

func TestBound(t *testing.T) {
	if got := Bound(context.Background(), time.Minute); got != time.Minute {
		t.Errorf("no deadline: %s, want the fallback", got)
	}
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(time.Hour))
	defer cancel()
	if got := Bound(ctx, time.Minute); got <= 59*time.Minute || got > time.Hour {
		t.Errorf("a deadline in an hour: %s, want the time to it, not the fallback", got)
	}
	past, cancelPast := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancelPast()
	if got := Bound(past, time.Minute); got != time.Millisecond {
		t.Errorf("a passed deadline: %s, want a millisecond (a waiter refuses 0)", got)
	}
}
