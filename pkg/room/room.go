// Package room is the per-pool waiting room: where a job that cannot
// launch now, for a reason time cures, waits without spending delivery
// attempts, and from which it is offered again the moment a slot frees.
//
//	scale-up refuses: max_runners ──▶ Enter (wake at the next freed slot)
//	                  capacity, throttled, quota (not final)
//	                               ──▶ Refused: the pool and place's shared backoff
//	                                   (15 s, doubling, ≤ 5 min) ──▶ Enter + a delayed
//	                                   send for when it ends
//	while a place backs off          ──▶ the probe: its oldest job sent again every
//	                                   20–30 s (ArmProbe, one at a time); refused, it
//	                                   only arms the next; lost, the next refusal or
//	                                   the sweep arms it again
//	a launch in a backing-off place succeeds ──▶ Recovered: the backoff ends, its
//	                                   jobs are offered at once, one per free slot
//	a runner of the pool ends (any reporter: the ledger's End)
//	                               ──▶ Wake: the next job in fair order is offered
//	                                   (conditional mark, then sent to the queue)
//	every reconciler pass           ──▶ Sweep: offers for the free slots, lost
//	                                   offers and probes again, 24 h limit
//	scale-up launches or skips a job it was offered ──▶ Leave
//	the job started elsewhere or completed (its record) ──▶ Leave at its offer
//
// The room is a hint: the launch claim stays the one gate, so an entry
// offered twice launches nothing more, and an offer lost in a crash is
// offered again once its lease is over.
//
// Everything of the room is here: the service (this file), its store port
// and the in-memory store (store.go), the pure rules — the fair order, the
// backoff and probe intervals (order.go) — and the store's conformance
// suite (roomtest), which the DynamoDB and SQLite adapters in pkg/store run.
// Scale-up declares the part it calls (scaleup.Waiter).
package room

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/queue"
	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/telemetry"
)

// Metric names.
const (
	// MetricEntered counts jobs entering a room, Reason = why they wait.
	MetricEntered = "RoomEntered"
	// MetricOffered counts jobs offered again, Reason = the pool.
	MetricOffered = "RoomOffered"
	// MetricProbes counts the probes sent to places that back off, Reason
	// = the pool.
	MetricProbes = "RoomProbes"
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

// JobRecords reads job records: a job that started or completed leaves.
type JobRecords interface {
	Job(ctx context.Context, id int64) (store.JobRecord, error)
}

// Live counts a pool's live runners (ledger.Ledger).
type Live interface {
	Live(ctx context.Context, pool string) (int, error)
}

// Options configure the service.
type Options struct {
	Room    Store
	Queue   queue.Sender // a queue.DelayedSender gets the capacity backoff as a delay
	Jobs    JobRecords
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

// Service is the waiting room's logic over a Store.
type Service struct {
	o Options

	mu sync.Mutex
	// lastOffer is the time of this service's latest offer: each offer is
	// stamped strictly after it, so that the fair order can tell which of
	// two repositories served within one clock tick was served last (a
	// burst of runner ends on a coarse or simulated clock would otherwise
	// tie them, and a tie goes to the repository with the oldest job).
	lastOffer time.Time
}

// offerTime is now, or just after this service's previous offer.
func (s *Service) offerTime(now time.Time) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !now.After(s.lastOffer) {
		now = s.lastOffer.Add(time.Nanosecond)
	}
	s.lastOffer = now
	return now
}

// New returns the service.
func New(o Options) (*Service, error) {
	switch {
	case o.Room == nil:
		return nil, errors.New("room: a store is required")
	case o.Queue == nil:
		return nil, errors.New("room: a queue is required")
	case o.Jobs == nil:
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
// by the provider waits out its pool and place's shared backoff (place ""
// for the pool as a whole), sent again when it ends if the queue delays
// messages, and the place's probe is armed if none is due; one refused
// for a full pool is offered at the next freed slot. A refused probe
// changes neither its job's entry nor the backoff: it only arms the next
// probe. nil means the job is in the room and its message may go.
func (s *Service) Wait(ctx context.Context, job queue.Job, place, reason, detail string) error {
	now := s.o.Now()
	log := s.o.Logger.With("job_id", job.JobID, "pool", job.Pool, "repository", job.Repository, "reason", reason)
	if job.Probe {
		s.probe(ctx, log, job.Pool, place, now)
		log.Info("the place's probe was refused; its job waits on", "place", place)
		return nil
	}
	msg := job
	msg.Waited = job.Waited + 1
	body, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	w := Waiting{Pool: job.Pool, JobID: job.JobID, Repository: job.Repository, Message: string(body), Since: now,
		Reason: reason, Detail: detail, ExpiresAt: now.Add(Limit)}
	var delay time.Duration
	var b Backoff
	delayed, canDelay := s.o.Queue.(queue.DelayedSender)
	if backsOff(reason) {
		w.Place = place
		b = s.backoff(ctx, log, job.Pool, place, msg.Waited, now)
		delay = b.Until.Sub(now)
		w.WakeAt = b.Until
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
	if delay > 0 && canDelay {
		if err := delayed.SendAfter(ctx, msg, delay); err != nil {
			// The entry stays; its offer counts as lost after the lease
			// and the next sweep offers it.
			log.Warn("scheduling the waiting job's next try; the reconciler offers it later", "err", err)
		}
		if b.Pool != "" && !b.Probing(now) {
			s.probe(ctx, log, job.Pool, place, now)
		}
	}
	log.Info("job waits in its pool's room", "detail", detail, "place", w.Place, "waiting_since", got.Since, "tries", got.Tries,
		"next_try_in_ms", delay.Milliseconds())
	return nil
}

// backoff records the refusal in the pool and place's shared backoff and
// returns it: the job waits until it ends. When the store cannot be read
// the job backs off on its own tries instead (a backoff without its pool).
func (s *Service) backoff(ctx context.Context, log *slog.Logger, pool, place string, tries int, now time.Time) Backoff {
	b, err := s.o.Room.Refused(ctx, pool, place, now, func(failures int) time.Duration {
		return CapacityBackoff(failures, s.o.Jitter())
	})
	if err != nil {
		log.Warn("recording the place's capacity backoff; the job backs off on its own", "place", place, "err", err)
		return Backoff{Until: now.Add(CapacityBackoff(tries, s.o.Jitter()))}
	}
	return b
}

// probe arms the place's next probe and sends it: the oldest job waiting
// out the place's backoff, offered again after ProbeInterval,
// whatever the backoff's length. The store arms one probe at a time, and
// only while the place backs off, so a probe that came due (it fired, or
// its message was lost) is armed again by its own refusal, the next
// refusal in the place, or the reconciler's sweep. A probe whose launch
// succeeds ends the backoff (Recovered); one refused changes nothing else.
func (s *Service) probe(ctx context.Context, log *slog.Logger, pool, place string, now time.Time) {
	ws, _, err := s.o.Room.Waiting(ctx, pool, now)
	if err != nil {
		log.Warn("reading the waiting room to probe the place; the reconciler probes it later", "place", place, "err", err)
		return
	}
	s.probeIn(ctx, log, pool, place, ws, now)
}

// probeIn is probe over the pool's entries as read at now (oldest first).
func (s *Service) probeIn(ctx context.Context, log *slog.Logger, pool, place string, ws []Waiting, now time.Time) bool {
	delayed, ok := s.o.Queue.(queue.DelayedSender)
	if !ok {
		return false
	}
	i := slices.IndexFunc(ws, func(w Waiting) bool { return w.Place == place && w.WakeAt.After(now) })
	if i < 0 {
		return false
	}
	var job queue.Job
	if err := json.Unmarshal([]byte(ws[i].Message), &job); err != nil {
		return false // the job leaves the room when it is offered
	}
	job.Probe = true
	delay := ProbeInterval(s.o.Jitter())
	armed, err := s.o.Room.ArmProbe(ctx, pool, place, now, now.Add(delay))
	if err != nil {
		log.Warn("arming the place's probe; the reconciler arms it later", "place", place, "err", err)
		return false
	}
	if !armed {
		return false
	}
	if err := delayed.SendAfter(ctx, job, delay); err != nil {
		log.Warn("sending the place's probe; armed again once it is due", "place", place, "err", err)
		return false
	}
	s.o.Counter.Count(MetricProbes, pool)
	log.Debug("the place's probe is armed", "place", place, "probe_job_id", job.JobID, "probe_in_ms", delay.Milliseconds())
	return true
}

// Recovered is told that a launch in the pool and place succeeded
// (scale-up's Waiter): capacity is back. When the place was backing off,
// its backoff ends and the jobs that waited it out are offered at once,
// one per free slot of the pool; it returns how many were offered.
func (s *Service) Recovered(ctx context.Context, pool, place string) int {
	log := s.o.Logger.With("pool", pool, "place", place)
	was, err := s.o.Room.Recovered(ctx, pool, place)
	if err != nil {
		log.Warn("ending the place's capacity backoff; its jobs try again when it ends", "err", err)
		return 0
	}
	if !was {
		return 0
	}
	now := s.o.Now()
	n, err := s.o.Room.Resume(ctx, pool, place, now)
	if err != nil {
		log.Warn("resuming the jobs that waited out the backoff; they try again when it ends", "err", err)
	}
	if n == 0 {
		log.Info("capacity is back in the place")
		return 0
	}
	ws, served, err := s.o.Room.Waiting(ctx, pool, now)
	if err != nil {
		log.Warn("reading the waiting room; the reconciler offers its jobs later", "err", err)
		return 0
	}
	free, err := s.free(ctx, pool, len(ws))
	if err != nil {
		log.Warn("counting the pool's runners; the next freed slot or the reconciler offers the jobs", "err", err)
		return 0
	}
	offered := s.offer(ctx, pool, ws, served, free, now)
	log.Info("capacity is back in the place; offered its waiting jobs", "resumed", n, "offered", offered, "free_slots", free)
	return offered
}

// free is how many of waiting jobs the pool has slots for: its maxRunners
// less its live runners, or all of them in a pool without a limit (or
// when the service has no pools).
func (s *Service) free(ctx context.Context, pool string, waiting int) (int, error) {
	if s.o.Pools == nil || s.o.Ledger == nil {
		return waiting, nil
	}
	p := s.o.Pools.Pool(pool)
	if p == nil || p.MaxRunners <= 0 {
		return waiting, nil
	}
	live, err := s.o.Ledger.Live(ctx, pool)
	if err != nil {
		return 0, err
	}
	return min(waiting, p.MaxRunners-live), nil
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

func (s *Service) offer(ctx context.Context, pool string, ws []Waiting, served map[string]time.Time, n int, now time.Time) int {
	cs := make([]Candidate, len(ws))
	for i, w := range ws {
		cs[i] = Candidate{Repository: w.Repository, JobID: w.JobID, Since: w.Since, WakeAt: w.WakeAt, OfferedUntil: w.OfferedUntil}
	}
	offered := 0
	for _, i := range FairOrder(cs, served, now) {
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
		at := s.offerTime(now)
		if err := s.o.Room.Offer(ctx, pool, w.JobID, at, at.Add(s.o.OfferLease)); err != nil {
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
func (s *Service) gone(ctx context.Context, w Waiting) (bool, string) {
	if s.o.Now().Sub(w.Since) >= Limit-time.Minute {
		return true, "github_limit"
	}
	j, err := s.o.Jobs.Job(ctx, w.JobID)
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
		s.probeAll(ctx, p.Name, ws, now)
		free, err := s.free(ctx, p.Name, len(ws))
		if err != nil {
			s.o.Logger.Warn("counting the pool's runners", "pool", p.Name, "err", err)
			continue
		}
		if n := s.offer(ctx, p.Name, ws, served, free, now); n > 0 {
			s.o.Logger.Info("reconciler offered waiting jobs", "pool", p.Name, "offered", n, "waiting", len(ws),
				"oldest_wait_s", int(oldest.Seconds()))
		}
	}
}

// probeAll arms the probe of each place the pool's entries wait out whose
// probe is not due (none yet, or one lost in a crash).
func (s *Service) probeAll(ctx context.Context, pool string, ws []Waiting, now time.Time) {
	seen := map[string]bool{}
	for _, w := range ws {
		if !w.WakeAt.After(now) || seen[w.Place] {
			continue
		}
		seen[w.Place] = true
		if s.probeIn(ctx, s.o.Logger.With("pool", pool), pool, w.Place, ws, now) {
			s.o.Logger.Info("reconciler armed the place's probe", "pool", pool, "place", w.Place)
		}
	}
}

// Ledger is a ledger.Ledger that wakes a pool's room when one of its
// runners' records ends, whoever reports it: the EC2 state-change
// function, the reconciler, scale-up's release, local mode's watch of its
// processes. One freed slot offers one waiting job.
type Ledger struct {
	ledger.Ledger
	Room *Service
}

// End implements ledger.Ledger.
func (l Ledger) End(ctx context.Context, name string, at time.Time, reason string) (bool, error) {
	return l.endedBy(ctx, name)(l.Ledger.End(ctx, name, at, reason))
}

// EndAwaiting implements ledger.Ledger.
func (l Ledger) EndAwaiting(ctx context.Context, name string, at time.Time, reason string) (bool, error) {
	return l.endedBy(ctx, name)(l.Ledger.EndAwaiting(ctx, name, at, reason))
}

// endedBy passes an end's result of the runner name on, first waking its
// pool's room when that end took it off the count.
func (l Ledger) endedBy(ctx context.Context, name string) func(bool, error) (bool, error) {
	return func(ended bool, err error) (bool, error) {
		if err == nil && ended {
			if r, rerr := l.Ledger.Runner(ctx, name); rerr == nil {
				l.wake(ctx, r)
			}
		}
		return ended, err
	}
}

// EndInstance implements ledger.Ledger.
func (l Ledger) EndInstance(ctx context.Context, id string, at time.Time, reason string) (bool, error) {
	ended, err := l.Ledger.EndInstance(ctx, id, at, reason)
	if err == nil && ended {
		if r, rerr := l.Ledger.RunnerByInstance(ctx, id); rerr == nil {
			l.wake(ctx, r)
		}
	}
	return ended, err
}

func (l Ledger) wake(ctx context.Context, r ledger.Runner) {
	if n := l.Room.Wake(ctx, r.Pool, 1); n > 0 {
		l.Room.o.Logger.Debug("a runner ended; woke the pool's room", "pool", r.Pool, "runner_name", r.Name, "job_id", r.JobID)
	}
}
