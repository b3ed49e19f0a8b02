package scaleup

import (
	"context"
	"errors"

	"github.com/skiffci/skiff/pkg/queue"
	"github.com/skiffci/skiff/pkg/scaler"
)

// Waiter is the pools' waiting room as scale-up uses it (room.Service).
type Waiter interface {
	// Wait puts a job that cannot launch now, for a reason time cures, in
	// its pool's room; nil means it waits there and its message may go.
	Wait(ctx context.Context, job queue.Job, reason, detail string) error
	// Leave takes a job the room offered out of it: it launched, or it
	// was given up for good.
	Leave(ctx context.Context, job queue.Job, reason string)
}

// NoRoom is the Waiter without a room: every job that cannot launch now
// goes back to the queue, as before rooms existed.
type NoRoom struct{}

var errNoRoom = errors.New("no waiting room")

// Wait implements Waiter: there is no room.
func (NoRoom) Wait(context.Context, queue.Job, string, string) error { return errNoRoom }

// Leave implements Waiter.
func (NoRoom) Leave(context.Context, queue.Job, string) {}

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

// settleRoom moves the jobs that wait into their pools' rooms and takes
// the jobs the room offered out of it once they are decided.
func (s *Service) settleRoom(ctx context.Context, items []*work) {
	for _, w := range items {
		switch {
		case w.outcome == scaler.OutcomeRetry && waits(w.reason):
			if err := s.o.Room.Wait(ctx, w.job, w.reason, w.detail); err != nil {
				if !errors.Is(err, errNoRoom) {
					w.log.Warn("the job could not enter its pool's waiting room; it goes back to the queue", "err", err)
				}
				continue
			}
			w.outcome = scaler.OutcomeWaiting
			s.o.Counter.Count(MetricWaiting, w.reason)
		case w.job.Waited > 0 && (w.outcome == scaler.OutcomeLaunched || w.outcome == scaler.OutcomeSkipped ||
			w.outcome == scaler.OutcomePermanent):
			s.o.Room.Leave(ctx, w.job, w.reason)
		}
	}
}
