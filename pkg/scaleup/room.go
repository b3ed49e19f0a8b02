package scaleup

import (
	"context"
	"errors"

	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/queue"
	"github.com/skiffci/skiff/pkg/scaleup/decide"
)

// Waiter is the pools' waiting room as scale-up uses it (room.Service).
type Waiter interface {
	// Wait puts a job that cannot launch now, for a reason time cures, in
	// its pool's room; nil means it waits there and its message may go.
	// place is the provider's place the refusal came from (provider.Placer;
	// "" for the pool as a whole): its capacity backoff is shared.
	Wait(ctx context.Context, job queue.Job, place, reason, detail string) error
	// Leave takes a job the room offered out of it: it launched, or it
	// was given up for good.
	Leave(ctx context.Context, job queue.Job, reason string)
	// Recovered says a launch in the pool and place succeeded: a backoff
	// there ends and the jobs that waited it out are offered, one per free
	// slot. It returns how many were offered.
	Recovered(ctx context.Context, pool, place string) int
}

// NoRoom is the Waiter without a room: every job that cannot launch now
// goes back to the queue, as before rooms existed.
type NoRoom struct{}

var errNoRoom = errors.New("no waiting room")

// Wait implements Waiter: there is no room.
func (NoRoom) Wait(context.Context, queue.Job, string, string, string) error { return errNoRoom }

// Leave implements Waiter.
func (NoRoom) Leave(context.Context, queue.Job, string) {}

// Recovered implements Waiter.
func (NoRoom) Recovered(context.Context, string, string) int { return 0 }

// waits reports whether a job retried for reason waits in the room: time
// cures it (a full pool; no capacity, throttling or a quota the provider
// said is not final). A store error, a claim conflict or a lost lease go
// back to the queue as before: they are not about capacity.
func waits(reason string) bool {
	switch reason {
	case "max_runners", "launch_capacity", "launch_throttled", "launch_quota":
		return true
	}
	return false
}

// updateRooms moves the jobs that wait into their pools' rooms, takes the
// jobs the room offered out of it once they are decided, and tells the
// room of each pool and place where a launch succeeded (once per batch).
func (s *Service) updateRooms(ctx context.Context, items []*work) {
	type placeKey struct{ pool, place string }
	var launched []placeKey
	seen := map[placeKey]bool{}
	for _, w := range items {
		if w.outcome == decide.OutcomeLaunched {
			k := placeKey{w.spec.Pool, provider.PlaceOf(s.o.Provider, w.spec)}
			if !seen[k] {
				seen[k] = true
				launched = append(launched, k)
			}
		}
		switch {
		case w.outcome == decide.OutcomeRetry && waits(w.reason):
			place := provider.PlaceOf(s.o.Provider, w.spec)
			if err := s.o.Room.Wait(ctx, w.job, place, w.reason, w.detail); err != nil {
				if !errors.Is(err, errNoRoom) {
					w.log.Warn("the job could not enter its pool's waiting room; it goes back to the queue", "err", err)
				}
				continue
			}
			w.outcome = decide.OutcomeWaiting
			if !w.job.Probe { // a refused probe's job already waits
				s.o.Counter.Count(MetricWaiting, w.reason)
			}
		case w.job.Waited > 0 && (w.outcome == decide.OutcomeLaunched || w.outcome == decide.OutcomeSkipped ||
			w.outcome == decide.OutcomePermanent):
			s.o.Room.Leave(ctx, w.job, w.reason)
		}
	}
	for _, k := range launched {
		s.o.Room.Recovered(ctx, k.pool, k.place)
	}
}

// GroupKeeper creates and keeps the runner groups skiff owns (groups.Keeper).
type GroupKeeper interface {
	// Ensure puts org's kept groups right now; an error says why it could not.
	Ensure(ctx context.Context, org string) error
}

// NoGroups is the GroupKeeper of a deployment that keeps no groups.
type NoGroups struct{}

// Ensure implements GroupKeeper: nothing to do.
func (NoGroups) Ensure(context.Context, string) error { return nil }
