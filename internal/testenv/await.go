package testenv

import (
	"context"
	"time"
)

// AwaitMargin is how long before its binary's -timeout a waiting test
// gives up, so that it fails with what it waited for, not with the
// timeout's panic and every goroutine's stack; at most a quarter of the
// time left, so that a short -timeout still leaves its tests time to wait.
const AwaitMargin = time.Minute

// Waiter is the part of a test Await uses: *testing.T and *testing.B.
type Waiter interface {
	Helper()
	Fatalf(format string, args ...any)
}

// AwaitDeadline is when the waits of t give up: AwaitMargin (or a quarter
// of the time left, if less) before its binary's -timeout. ok is false for
// a test without a deadline (-timeout 0, a benchmark), which waits as long
// as it takes.
func AwaitDeadline(t any) (deadline time.Time, ok bool) {
	if d, has := t.(interface{ Deadline() (time.Time, bool) }); has {
		if at, ok := d.Deadline(); ok {
			return at.Add(-min(AwaitMargin, max(time.Until(at)/4, 0))), true
		}
	}
	return time.Time{}, false
}

// Await calls cond every interval until it reports true: the one wait of
// the tests for another goroutine's or process's progress. No wait is
// bounded by a guess of how fast the machine is: a test still waiting at
// AwaitDeadline fails, naming what it waited for and, when state is not
// nil, what state says then (logs, counts). The interval follows the
// condition's cost: milliseconds for a read of memory, longer for a
// command or another server.
func Await(t Waiter, what string, interval time.Duration, cond func() bool, state func() string) {
	t.Helper()
	deadline, bounded := AwaitDeadline(t)
	start := time.Now()
	for !cond() {
		if bounded && time.Now().After(deadline) {
			detail := ""
			if state != nil {
				detail = "\n" + state()
			}
			t.Fatalf("waited %s for %s, until the test binary's timeout was near%s", time.Since(start).Round(time.Second), what, detail)
			return
		}
		time.Sleep(interval)
	}
}

// AwaitState is Await for a condition that says what it saw: the state
// the last call reported is the failure's detail.
func AwaitState(t Waiter, what string, interval time.Duration, cond func() (bool, string)) {
	t.Helper()
	var last string
	Await(t, what, interval, func() bool {
		ok, s := cond()
		last = s
		return ok
	}, func() string { return last })
}

// AwaitContext is a context for a wait on another process or server (a
// provider's Wait or Close, a command), ending at AwaitDeadline, never
// after a guess of the machine's speed. It does not end with the test, so
// that a cleanup can use it; the caller cancels it.
func AwaitContext(t any) (context.Context, context.CancelFunc) {
	if deadline, ok := AwaitDeadline(t); ok {
		return context.WithDeadline(context.Background(), deadline)
	}
	return context.WithCancel(context.Background())
}
