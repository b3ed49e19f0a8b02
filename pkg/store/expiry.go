package store

import "time"

// Live reports whether a record that expires at expires (never, when it is
// the zero time) is live at now. Expiry is to the second, as the tables'
// TTLs round it (EpochCeil), so that every store ends a record at the same
// moment.
func Live(expires, now time.Time) bool { return live(expires, now) }

// EpochCeil is t in epoch seconds, rounded up so that a TTL never cuts a
// record short, or 0 for the zero time (no expiry).
func EpochCeil(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return epochCeil(t)
}
