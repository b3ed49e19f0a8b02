package expiry_test

import (
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/store/expiry"
)

// TestExpiry: an expiry inside a second is rounded up to the next one, a
// whole second is kept; a record is live until that second begins; the
// zero time never expires.
func TestExpiry(t *testing.T) {
	t.Parallel()
	whole := time.Unix(1_800_000_000, 0)
	half := whole.Add(500 * time.Millisecond)
	if got := expiry.Ceil(whole); got != 1_800_000_000 {
		t.Errorf("Ceil(whole second) = %d", got)
	}
	if got := expiry.Ceil(half); got != 1_800_000_001 {
		t.Errorf("Ceil(half a second past) = %d, want the next second", got)
	}
	for _, tc := range []struct {
		name         string
		expires, now time.Time
		want         bool
	}{
		{"before", half, whole, true},
		{"past the expiry, inside its second", half, half.Add(time.Millisecond), true},
		{"at the rounded-up second", half, whole.Add(time.Second), false},
		{"at a whole-second expiry", whole, whole, false},
		{"never", time.Time{}, whole.Add(100 * 365 * 24 * time.Hour), true},
	} {
		if got := expiry.Live(tc.expires, tc.now); got != tc.want {
			t.Errorf("%s: Live = %v, want %v", tc.name, got, tc.want)
		}
	}
	if expiry.Seconds(time.Time{}) != 0 || expiry.Seconds(half) != 1_800_000_001 {
		t.Errorf("Seconds: %d, %d", expiry.Seconds(time.Time{}), expiry.Seconds(half))
	}
	// NanosFloor agrees with Live wherever an expiry falls around now's second.
	for _, e := range []time.Duration{-time.Second - 1, -time.Second, -1, 0, 1, 500 * time.Millisecond, time.Second - 1, time.Second, time.Second + 1} {
		for _, n := range []time.Duration{0, 1, 400 * time.Millisecond, time.Second - 1} {
			expires, now := whole.Add(e), whole.Add(n)
			if got, want := expires.UnixNano() > expiry.NanosFloor(now), expiry.Live(expires, now); got != want {
				t.Errorf("expires %v, now %v: NanosFloor says live %v, Live says %v", e, n, got, want)
			}
		}
	}
}
