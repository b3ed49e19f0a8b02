package store

import "time"

// Live reports whether a record that expires at expires (never, when it is
// the zero time) is live at now. Expiry is to the second, as the tables'
// TTLs round it (EpochCeil), so that every store ends a record at the same
// moment.
func Live(expires, now time.Time) bool { return live(expires, now) }

func live(expires, now time.Time) bool {
	return expires.IsZero() || now.Unix() < EpochCeil(expires)
}

// ExpirySeconds is EpochCeil for an optional expiry: 0 for the zero time
// (never), as the SQLite room stores it.
func ExpirySeconds(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return EpochCeil(t)
}
