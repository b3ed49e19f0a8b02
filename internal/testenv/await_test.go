package testenv_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/skiffci/skiff/internal/testenv"
)

// fakeT is a test whose deadline is near, and which records a failure
// instead of ending the goroutine.
type fakeT struct {
	deadline time.Time
	failed   string
}

func (f *fakeT) Helper()                                 {}
func (f *fakeT) Fatalf(format string, args ...any)       { f.failed = fmt.Sprintf(format, args...) }
func (f *fakeT) Deadline() (deadline time.Time, ok bool) { return f.deadline, !f.deadline.IsZero() }

// TestAwait: a condition that comes true ends the wait without a failure;
// one that never does fails once the deadline is within AwaitMargin,
// naming the wait and the last state seen.
func TestAwait(t *testing.T) {
	t.Parallel()
	calls := 0
	ok := &fakeT{deadline: time.Now().Add(time.Hour)}
	testenv.Await(ok, "the third call", time.Millisecond, func() bool { calls++; return calls == 3 }, nil)
	if ok.failed != "" || calls != 3 {
		t.Errorf("a wait that ends: failure %q after %d calls, want none after 3", ok.failed, calls)
	}

	// Past the deadline already: the first poll that fails is the last.
	near := &fakeT{deadline: time.Now().Add(-time.Second)}
	seen := 0
	testenv.AwaitState(near, "a job that never ends", time.Millisecond, func() (bool, string) {
		seen++
		return false, fmt.Sprintf("%d polls", seen)
	})
	if seen != 1 || !strings.Contains(near.failed, "a job that never ends") || !strings.Contains(near.failed, "1 polls") {
		t.Errorf("the failure says %q after %d polls, want the wait's name and the state of the one poll", near.failed, seen)
	}
}

// TestAwaitDeadline: the waits give up AwaitMargin before the test's
// deadline, or a quarter of the time left when that is less; a test
// without a deadline has none.
func TestAwaitDeadline(t *testing.T) {
	t.Parallel()
	now := time.Now()
	for _, tc := range []struct {
		left, want time.Duration
	}{{time.Hour, time.Hour - testenv.AwaitMargin}, {8 * time.Second, 6 * time.Second}} {
		got, ok := testenv.AwaitDeadline(&fakeT{deadline: now.Add(tc.left)})
		if d := got.Sub(now); !ok || d < tc.want-time.Second || d > tc.want+time.Second {
			t.Errorf("%v left: the waits give up after %v (%v), want %v", tc.left, d, ok, tc.want)
		}
	}
	if _, ok := testenv.AwaitDeadline(&fakeT{}); ok {
		t.Error("a test without a deadline has a deadline to wait for")
	}
	ctx, cancel := testenv.AwaitContext(t)
	defer cancel()
	got, ok := ctx.Deadline()
	want, has := t.Deadline()
	if ok != has || (has && (got.After(want) || got.Before(want.Add(-testenv.AwaitMargin)))) {
		t.Errorf("AwaitContext's deadline %v (%v), want within %v before the test's %v (%v)", got, ok, testenv.AwaitMargin, want, has)
	}
}
