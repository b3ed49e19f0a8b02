package store

import "time"

// EpochCeil is t in epoch seconds, rounded up so that a TTL never cuts a
// record short. Every adapter compares expiry at this precision.
func EpochCeil(t time.Time) int64 {
	s := t.Unix()
	if t.Nanosecond() > 0 {
		s++
	}
	return s
}
