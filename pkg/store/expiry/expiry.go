// Package expiry is the one rule by which every store ends a record that
// expires: to the second, with the expiry rounded up, as DynamoDB's TTL
// reads an epoch-seconds attribute. The in-memory adapters (package store,
// the ledger's memories, the waiting room's), the DynamoDB adapter and the
// SQLite file (through NanosFloor, in its queries) compare by it, so that
// one record ends at the same moment in each. It
// imports only the standard library, so that the lowest packages (the
// ledger's) can use it too.
package expiry

import "time"

// Ceil is t in epoch seconds, rounded up so that a TTL never cuts a record
// short: the value a store writes for DynamoDB's TTL.
func Ceil(t time.Time) int64 {
	s := t.Unix()
	if t.Nanosecond() > 0 {
		s++
	}
	return s
}

// Live reports whether a record that expires at expires (never, when it is
// the zero time) is live at now.
func Live(expires, now time.Time) bool {
	return expires.IsZero() || now.Unix() < Ceil(expires)
}

// Seconds is Ceil for an optional expiry: 0 for the zero time (never).
func Seconds(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return Ceil(t)
}

// NanosFloor is Live's rule for a store that keeps expiries in Unix
// nanoseconds and compares them in its queries (the SQLite file): a record
// whose expiry e is not 0 is live at now exactly when e > NanosFloor(now),
// the start of now's second. (An expiry rounds up past now's second exactly
// when it is later than that second's start.)
func NanosFloor(now time.Time) int64 {
	return now.Unix() * int64(time.Second)
}
