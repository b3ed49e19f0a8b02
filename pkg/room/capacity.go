package room

import (
	"context"
	"time"
)

// CapacityMemory is the one memory of failed capacity: a provider that
// splits a launch over places of its own (EC2's: instance
// type, subnet, purchase option) remembers the ones that failed as
// backoffs of the room, beside the backoffs of the places whole launches
// were refused in, and reads them back before it plans the next launch of
// the pool, so that it asks for them no more until they end. It implements
// ec2.CapacityMemory.
//
// A place's backoff is the room's rule: a failure while one is under way
// changes nothing, so a place is left out for the memory's length
// after its first failure, then tried again.
type CapacityMemory struct{ Store Store }

// MarkCapacityFailed remembers that the pool's places (ec2.PlaceKey)
// failed at now, each until now + d.
func (c CapacityMemory) MarkCapacityFailed(ctx context.Context, pool string, places []string, now time.Time, d time.Duration) error {
	for _, p := range places {
		if _, err := c.Store.Refused(ctx, pool, p, now, func(int) time.Duration { return d }); err != nil {
			return err
		}
	}
	return nil
}

// FailedCapacity returns the pool's places remembered as failed at now.
func (c CapacityMemory) FailedCapacity(ctx context.Context, pool string, now time.Time) (map[string]bool, error) {
	bs, err := c.Store.Backoffs(ctx, pool, now)
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(bs))
	for place := range bs {
		out[place] = true
	}
	return out, nil
}
