// Package room is the per-pool waiting room: where a job that cannot
// launch now, for a reason time cures, waits without spending delivery
// attempts, and from which it is offered again the moment a slot frees.
//
//	scale-up refuses: max_runners ──▶ Enter (wake at the next freed slot)
//	                  capacity, throttled, quota (not final)
//	                               ──▶ Enter + delayed send (15 s, doubling, ≤ 5 min)
//	a runner of the pool ends (any reporter: the ledger's End)
//	                               ──▶ Wake: the next job in fair order is offered
//	                                   (conditional mark, then sent to the queue)
//	every reconciler pass           ──▶ Sweep: offers for the free slots, lost
//	                                   offers again, 24 h limit
//	scale-up launches or skips a job it was offered ──▶ Leave
//	the job started elsewhere or completed (its record) ──▶ Leave at its offer
//
// The room is a hint: the launch claim stays the one gate, so an entry
// offered twice launches nothing more, and an offer lost in a crash is
// offered again once its lease is over.
package room

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/skiffci/skiff/pkg/launch"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/queue"
	"github.com/skiffci/skiff/pkg/scaler"
	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/telemetry"
)

// Metric names.
const (
	// MetricEntered counts jobs entering a room, Reason = why they wait.
	MetricEntered = "RoomEntered"
	// MetricOffered counts jobs offered again, Reason = the pool.
	MetricOffered = "RoomOffered"
	// MetricLeft counts jobs leaving, Reason = launched, skipped, started,
	// completed, github_limit.
	MetricLeft = "RoomLeft"
	// MetricWaitingJobs is each pool's count of waiting jobs, a gauge set
	// at every sweep.
	MetricWaitingJobs = "WaitingJobs"
	// MetricOldestWait is each pool's oldest wait in seconds, a gauge set
	// at every sweep (the alarm's metric).
	MetricOldestWait = "OldestWaitSeconds"
)

// DefaultOfferLease is how long an offer is under way before it counts as
// lost (a crash between the mark and the send, a message lost): longer
// than scale-up takes to launch or refuse an offered job, so that a slow
// launch is not offered twice.
const DefaultOfferLease = 2 * time.Minute

// Records reads job records: a job that started or completed leaves.
type Records interface {
	Job(ctx context.Context, id int64) (store.Job, error)
}

// Live counts a pool's live runners (store.Ledger).
type Live interface {
	Live(ctx context.Context, pool string) (int, error)
}

// Options configure the service.
type Options struct {
	Room    store.Room
	Queue   queue.Sender // a queue.DelayedSender gets the capacity backoff as a delay
	Records Records
	Pools   *pool.Config
	Ledger  Live
	Counter telemetry.Counter // default telemetry.Discard
	Gauges  telemetry.Gauges  // default telemetry.DiscardGauges
	Logger  *slog.Logger
	Now     func() time.Time
	// Jitter returns a number in [0, 1) for the backoff's spread (default
	// math/rand; tests inject their own).
	Jitter     func() float64
	OfferLease time.Duration // default DefaultOfferLease
}

// Service is the waiting room's logic over a store.Room.
type Service struct{ o Options }

// New returns the service.
func New(o Options) (*Service, error) {
	switch {
	case o.Room == nil:
		return nil, errors.New("room: a store is required")
	case o.Queue == nil:
		return nil, errors.New("room: a queue is required")
	case o.Records == nil:
		return nil, errors.New("room: job records are required")
	}
	if o.Counter == nil {
		o.Counter = telemetry.Discard
	}
	if o.Gauges == nil {
		o.Gauges = telemetry.DiscardGauges
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Jitter == nil {
		o.Jitter = rand.Float64
	}
	if o.OfferLease <= 0 {
		o.OfferLease = DefaultOfferLease
	}
	return &Service{o: o}, nil
}

// backsOff reports whether a reason waits on a backoff (the provider
// refused) rather than on a freed slot.
func backsOff(reason string) bool { return reason != "max_runners" }

// Wait puts the job in its pool's room (scale-up's Waiter). A job refused
// by the provider waits out a backoff, sent again after it when the queue
// delays messages; one refused for a full pool is offered at the next
// freed slot. nil means the job is in the room and its message may go.
func (s *Service) Wait(ctx context.Context, job queue.Job, reason, detail string) error {
	now := s.o.Now()
	msg := job
	msg.Waited = job.Waited + 1
	body, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	w := store.Waiting{Pool: job.Pool, JobID: job.JobID, Repository: job.Repository, Message: string(body), Since: now,
		Reason: reason, Detail: detail, ExpiresAt: now.Add(store.RoomLimit)}
	var delay time.Duration
	delayed, canDelay := s.o.Queue.(queue.DelayedSender)
	if backsOff(reason) {
		delay = scaler.CapacityBackoff(msg.Waited, s.o.Jitter())
		w.WakeAt = now.Add(delay)
		if canDelay {
			// The delayed message is the offer: no waker offers it before.
			w.OfferedUntil = w.WakeAt.Add(s.o.OfferLease)
		}
	}
	got, err := s.o.Room.Enter(ctx, w)
	if err != nil {
		return err
	}
	s.o.Counter.Count(MetricEntered, reason)
	log := s.o.Logger.With("job_id", job.JobID, "pool", job.Pool, "repository", job.Repository, "reason", reason)
	if delay > 0 && canDelay {
		if err := delayed.SendAfter(ctx, msg, delay); err != nil {
			// The entry stays; its offer counts as lost after the lease
			// and the next sweep offers it.
			log.Warn("scheduling the waiting job's next try; the reconciler offers it later", "err", err)
		}
	}
	log.Info("job waits in its pool's room", "detail", detail, "waiting_since", got.Since, "tries", got.Tries,
		"next_try_in_ms", delay.Milliseconds())
	return nil
}

// Leave takes a job that was offered out of the room: it launched, or
// scale-up skipped it for good (scale-up's Waiter).
func (s *Service) Leave(ctx context.Context, job queue.Job, reason string) {
	if err := s.o.Room.Leave(ctx, job.Pool, job.JobID); err != nil {
		s.o.Logger.Warn("taking a job out of the room; it is offered again and then left", "job_id", job.JobID, "pool", job.Pool,
			"err", err)
		return
	}
	s.o.Counter.Count(MetricLeft, reason)
	s.o.Logger.Info("job left its pool's room", "job_id", job.JobID, "pool", job.Pool, "reason", reason)
}

// Wake offers up to n of the pool's waiting jobs, in fair order, and
// returns how many it offered. A job whose record says it started or
// completed leaves instead, without taking a slot.
func (s *Service) Wake(ctx context.Context, pool string, n int) int {
	if n <= 0 {
		return 0
	}
	now := s.o.Now()
	ws, served, err := s.o.Room.Waiting(ctx, pool, now)
	if err != nil {
		s.o.Logger.Warn("reading the waiting room; the reconciler offers its jobs later", "pool", pool, "err", err)
		return 0
	}
	return s.offer(ctx, pool, ws, served, n, now)
}

func (s *Service) offer(ctx context.Context, pool string, ws []store.Waiting, served map[string]time.Time, n int, now time.Time) int {
	cs := make([]scaler.Candidate, len(ws))
	for i, w := range ws {
		cs[i] = scaler.Candidate{Repository: w.Repository, JobID: w.JobID, Since: w.Since, WakeAt: w.WakeAt, OfferedUntil: w.OfferedUntil}
	}
	offered := 0
	for _, i := range scaler.FairOrder(cs, served, now) {
		if offered >= n || ctx.Err() != nil {
			break
		}
		w := ws[i]
		log := s.o.Logger.With("job_id", w.JobID, "pool", pool, "repository", w.Repository)
		if gone, why := s.gone(ctx, w); gone {
			if err := s.o.Room.Leave(ctx, pool, w.JobID); err == nil {
				s.o.Counter.Count(MetricLeft, why)
				log.Info("job left its pool's room", "reason", why, "waited_ms", now.Sub(w.Since).Milliseconds())
			}
			continue
		}
		var job queue.Job
		if err := json.Unmarshal([]byte(w.Message), &job); err != nil {
			log.Error("a waiting job's message cannot be read; it leaves the room", "err", err)
			_ = s.o.Room.Leave(ctx, pool, w.JobID)
			continue
		}
		if err := s.o.Room.Offer(ctx, pool, w.JobID, now, now.Add(s.o.OfferLease)); err != nil {
			if !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrNotFound) {
				log.Warn("offering a waiting job", "err", err)
			}
			continue // another waker has it, or it left meanwhile
		}
		if err := s.o.Queue.Send(ctx, job); err != nil {
			log.Warn("sending a waiting job; offered again once the offer's lease is over", "err", err)
			continue
		}
		offered++
		s.o.Counter.Count(MetricOffered, pool)
		log.Info("waiting job offered", "waited_ms", now.Sub(w.Since).Milliseconds(), "reason", w.Reason)
	}
	return offered
}

// gone reports whether a waiting job needs no runner any more, and why:
// its record says it started (on some other runner) or completed
// (cancelled included), or it has waited GitHub's own limit.
func (s *Service) gone(ctx context.Context, w store.Waiting) (bool, string) {
	if s.o.Now().Sub(w.Since) >= store.RoomLimit-time.Minute {
		return true, "github_limit"
	}
	j, err := s.o.Records.Job(ctx, w.JobID)
	switch {
	case err != nil:
		return false, ""
	case j.Status == store.StatusCompleted:
		return true, "completed"
	case j.Status == store.StatusInProgress:
		return true, "started"
	}
	return false, ""
}

// Sweep runs with each reconciler pass: in every pool it offers as many
// waiting jobs as the pool has free slots (so an offer lost in a crash,
// or a wake-up that found the room empty a moment before a job entered,
// costs at most one pass), and it observes the room's size and oldest wait.
func (s *Service) Sweep(ctx context.Context) {
	if s.o.Pools == nil || s.o.Ledger == nil {
		return
	}
	now := s.o.Now()
	for _, p := range s.o.Pools.Pools {
		ws, served, err := s.o.Room.Waiting(ctx, p.Name, now)
		if err != nil {
			s.o.Logger.Warn("reading the waiting room", "pool", p.Name, "err", err)
			continue
		}
		oldest := time.Duration(0)
		if len(ws) > 0 {
			oldest = now.Sub(ws[0].Since)
		}
		s.o.Gauges.Gauge(MetricWaitingJobs, p.Name, int64(len(ws)))
		s.o.Gauges.Gauge(MetricOldestWait, p.Name, int64(oldest.Seconds()))
		if len(ws) == 0 {
			continue
		}
		free := len(ws)
		if p.MaxRunners > 0 {
			live, err := s.o.Ledger.Live(ctx, p.Name)
			if err != nil {
				s.o.Logger.Warn("counting the pool's runners", "pool", p.Name, "err", err)
				continue
			}
			free = min(free, p.MaxRunners-live)
		}
		if n := s.offer(ctx, p.Name, ws, served, free, now); n > 0 {
			s.o.Logger.Info("reconciler offered waiting jobs", "pool", p.Name, "offered", n, "waiting", len(ws),
				"oldest_wait_s", int(oldest.Seconds()))
		}
	}
}

// Ledger is a store.Ledger that wakes a pool's room when one of its
// runners' records ends, whoever reports it: the EC2 state-change
// function, the reconciler, scale-up's release, local mode's watch of its
// processes. One freed slot offers one waiting job.
type Ledger struct {
	store.Ledger
	Room *Service
}

// End implements store.Ledger.
func (l Ledger) End(ctx context.Context, name string, at time.Time, reason string) (bool, error) {
	ended, err := l.Ledger.End(ctx, name, at, reason)
	if err == nil && ended {
		if r, rerr := l.Ledger.Runner(ctx, name); rerr == nil {
			l.wake(ctx, r)
		}
	}
	return ended, err
}

// EndInstance implements store.Ledger.
func (l Ledger) EndInstance(ctx context.Context, id string, at time.Time, reason string) (bool, error) {
	ended, err := l.Ledger.EndInstance(ctx, id, at, reason)
	if err == nil && ended {
		if r, rerr := l.Ledger.RunnerByInstance(ctx, id); rerr == nil {
			l.wake(ctx, r)
		}
	}
	return ended, err
}

func (l Ledger) wake(ctx context.Context, r launch.Runner) {
	if n := l.Room.Wake(ctx, r.Pool, 1); n > 0 {
		l.Room.o.Logger.Debug("a runner ended; woke the pool's room", "pool", r.Pool, "runner_name", r.Name, "job_id", r.JobID)
	}
}
