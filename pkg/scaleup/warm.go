package scaleup

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/scaleup/decide"
)

// Warm starts (docs/warm-pools.md). A job of a pool with warm capacity
// takes a ready warm machine of its own launch settings when one waits:
//
//	ready warm record ──End (the first call wins)──▶ taken ──Reserve──▶ the job's runner
//	   ──register──▶ Hand (tag, start a stopped one, deliver) ──▶ launched (stopped or hot)
//
// Taking ends the warm record before the job's runner is reserved, so the
// pool's count never holds both and a pool full of warm machines still
// admits the jobs that take them. Whatever goes wrong after the take (no
// room left, no registration, the machine does not start) terminates the
// machine — the reconciler replaces it — and the job launches cold, in the
// same invocation, under the same claim: exactly one of the two paths
// gives the job its runner.

// MetricWarm counts warm starts and their misses, Reason = started_stopped,
// started_hot, lost_race (another job took the machine first),
// start_failed (the machine did not start: the job launched cold).
const MetricWarm = "ScaleUpWarm"

// warmTake is the warm machine a job took.
type warmTake struct {
	record ledger.Runner // the ended warm record
	kind   pool.WarmKind
}

// warmCandidates are one invocation's ready warm machines, read once per
// pool, handed out at most once each.
type warmCandidates struct {
	mu     sync.Mutex
	byPool map[string][]ledger.Runner
}

// eligible reports whether the job's pool keeps warm machines this
// provider can hand over.
func (s *Service) eligible(w *work) bool {
	_, ok := s.o.Provider.(provider.Warmer)
	return ok && w.spec.Warm.Total() > 0 && w.spec.EC2 != nil
}

// warmKey is the key of the warm machines the job may take (pool.Spec.WarmKey).
func (s *Service) warmKey(ctx context.Context, w *work) string {
	d, ok := s.runnerDownload(ctx, w)
	if !ok {
		return w.spec.WarmKey("")
	}
	return w.spec.WarmKey(d.Version)
}

// markWarm picks, before grouping, the jobs a ready warm machine of their
// own settings waits for: each goes alone into its launch group (its
// launch record names its one instance), the others group as before. It
// reads each warm pool's live records once.
func (s *Service) markWarm(ctx context.Context, items []*work) *warmCandidates {
	c := &warmCandidates{byPool: map[string][]ledger.Runner{}}
	read := map[string]bool{}
	wanted := map[string]int{} // pool/key → jobs marked
	for _, w := range items {
		if !s.eligible(w) {
			continue
		}
		p := w.spec.Pool
		if !read[p] {
			read[p] = true
			live, err := s.o.Ledger.LiveRunners(ctx, p)
			if err != nil {
				s.o.Logger.Warn("reading the pool's warm machines; its jobs start cold", "pool", p, "err", err)
			}
			for _, r := range live {
				if ledger.IsWarm(r.Name) && r.State == ledger.StateRegistered && r.InstanceID != "" {
					c.byPool[p] = append(c.byPool[p], r)
				}
			}
			// Hot first (a start costs nothing), then in random order, so
			// that two invocations rarely race for the same machine.
			rand.Shuffle(len(c.byPool[p]), func(i, j int) { c.byPool[p][i], c.byPool[p][j] = c.byPool[p][j], c.byPool[p][i] })
			sortHotFirst(c.byPool[p])
		}
		w.cands, w.warmKey = c, s.warmKey(ctx, w)
		n := 0
		for _, r := range c.byPool[p] {
			if _, key, _ := warmParts(r.Name); key == w.warmKey {
				n++
			}
		}
		if k := p + "/" + w.warmKey; wanted[k] < n {
			wanted[k]++
			w.tryWarm = true
		}
	}
	return c
}

func sortHotFirst(rs []ledger.Runner) {
	hot := 0
	for i := range rs {
		if ledger.WarmKindOf(rs[i].Name) == string(pool.WarmHot) {
			rs[hot], rs[i] = rs[i], rs[hot]
			hot++
		}
	}
}

func warmParts(name string) (kind, key string, ok bool) {
	kind = ledger.WarmKindOf(name)
	if kind == "" {
		return "", "", false
	}
	// The key is the name's second-to-last part (names.WarmRunnerName).
	end := len(name)
	for i := len(name) - 1; i >= 0; i-- {
		if name[i] == '-' {
			if end != len(name) {
				return kind, name[i+1 : end], true
			}
			end = i
		}
	}
	return "", "", false
}

// pop hands out the next ready warm machine of the pool with the key.
func (c *warmCandidates) pop(p, key string) (ledger.Runner, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, r := range c.byPool[p] {
		if _, k, _ := warmParts(r.Name); k == key {
			c.byPool[p] = append(c.byPool[p][:i:i], c.byPool[p][i+1:]...)
			return r, true
		}
	}
	return ledger.Runner{}, false
}

// takeWarm takes a ready warm machine for the job: it ends the machine's
// warm record, which only one caller can do. It tries the invocation's
// candidates until one is taken or none is left.
func (s *Service) takeWarm(ctx context.Context, w *work, now time.Time) {
	for {
		r, ok := w.cands.pop(w.spec.Pool, w.warmKey)
		if !ok {
			return
		}
		took, err := s.o.Ledger.End(ctx, r.Name, now, "taken by "+w.runner)
		switch {
		case err != nil:
			w.log.Warn("taking a warm machine", "warm", r.Name, "err", err)
		case took:
			w.warm = &warmTake{record: r, kind: pool.WarmKind(ledger.WarmKindOf(r.Name))}
			w.log = w.log.With("warm_instance", r.InstanceID, "warm_kind", w.warm.kind)
			return
		default:
			s.o.Counter.Count(MetricWarm, "lost_race")
		}
	}
}

// handWarm gives the job's taken warm machine its runner: tags, a start
// when it waits stopped, the registration. True when the job launched so;
// false leaves the job to the cold launch (the machine is terminated when
// the job's work ends, see dropWarm).
func (s *Service) handWarm(ctx context.Context, log *slog.Logger, w *work, rec ledger.Launch) bool {
	warmer, _ := s.o.Provider.(provider.Warmer)
	wt := w.warm
	hctx, cancel := context.WithTimeout(ctx, w.leaseEnd.Sub(s.o.Now()))
	defer cancel()
	in, err := warmer.Hand(hctx, provider.Handover{InstanceID: wt.record.InstanceID, Kind: wt.kind,
		Runner:       provider.RunnerRequest{Name: w.runner, JobID: w.job.JobID, RunID: w.job.RunID, Repository: w.job.Repository, Owner: w.job.Owner},
		Registration: w.reg})
	if err != nil {
		s.o.Counter.Count(MetricWarm, "start_failed")
		log.Warn("the warm machine did not start; launching the job cold", "err", err, "reason", launchReason(err))
		return false
	}
	done := s.o.Now()
	rec.State, rec.Instances = ledger.LaunchDone, []string{in.ID}
	if err := s.o.Launches.PutLaunch(ctx, rec); err != nil {
		// A later duplicate of the job finds no launch and may launch it
		// again after the lease; the reconciler reaps the idle spare.
		log.Error("recording the warm start", "err", err)
	}
	kind := ledger.StartHot
	if wt.kind == pool.WarmStopped {
		kind = ledger.StartStopped
	}
	s.recordLaunched(ctx, w.runner, w.log, provider.Instance{ID: in.ID, InstanceType: wt.record.InstanceType, Zone: wt.record.Zone,
		Capacity: capacityOf(wt.record.Spot), LaunchedAt: done}, kind)
	w.instance = in.ID
	latency := done.Sub(w.job.ReceivedAt)
	s.o.Counter.Count(MetricWarm, "started_"+string(wt.kind))
	s.o.Counter.Count(MetricLaunched, w.spec.Pool)
	s.o.Timings.Observe(MetricLaunchLatency, w.spec.Pool, latency)
	w.log.Info("runner started on a warm machine", "instance_id", in.ID, "launch_latency_ms", latency.Milliseconds(),
		"start_kind", kind)
	w.finish(decide.OutcomeLaunched, "launched")
	return true
}

// dropWarm terminates a taken warm machine the job did not launch on (no
// room, no registration, it did not start, or it launched cold). Its warm
// record is already ended; a machine left running here is an orphan the
// reconciler terminates.
func (s *Service) dropWarm(ctx context.Context, w *work) {
	if w.warm == nil || w.instance == w.warm.record.InstanceID {
		return
	}
	if err := s.o.Provider.Terminate(ctx, []string{w.warm.record.InstanceID}); err != nil && !errors.Is(err, context.Canceled) {
		w.log.Error("terminating the unused warm machine; the reconciler will", "err", err)
	}
	w.warm = nil
}

func capacityOf(spot bool) provider.Capacity {
	if spot {
		return provider.Spot
	}
	return provider.OnDemand
}

// warmGroupKey keeps a job that may start warm alone in its launch group.
func warmGroupKey(key string, i int) string { return key + "\x00warm\x00" + strconv.Itoa(i) }
