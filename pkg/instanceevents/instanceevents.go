// Package instanceevents turns what the compute platform reports about an
// instance (EC2 state changes and spot interruption warnings, delivered by
// EventBridge) into runner ledger writes. It speaks in neutral terms — an
// instance id, a state name, a time — so the Lambda translation
// (functions/ec2events) is the only place that knows the event's JSON.
//
//	state change  shutting-down, terminated,  → Ledger.EndInstance(reason "state_<state>")
//	              stopping, stopped              (the first report ends the runner; later ones change nothing),
//	                                             except a runner left to the reconciler: one that did not
//	                                             run its own job, was interrupted, or has a metrics record due
//	              pending, running, other     → ignored; so are a warm machine's stops (its record's, or
//	                                             one from before its runner's launch on it)
//	spot warning                              → Interruptions.MarkInterrupted (the state does not move)
//
// EventBridge rules cannot match on tags, so every instance of the account
// arrives here; one that is not a skiff runner (the ledger answers
// ErrNotFound) is ignored with a debug log.
package instanceevents

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/telemetry"
)

// Ledger is the part of the runner ledger the service writes.
type Ledger interface {
	EndInstance(ctx context.Context, instanceID string, at time.Time, reason string) (bool, error)
	RunnerByInstance(ctx context.Context, instanceID string) (ledger.Runner, error)
	ledger.Interruptions
}

// A ledger with its interruptions implements Ledger (the EC2-event function
// wires one value that is both).
var _ Ledger = struct {
	ledger.Ledger
	ledger.Interruptions
}{}

// Metric names the service counts, with their reasons.
const (
	// MetricRunnerEnded counts runners the events ended first (reason: the state).
	MetricRunnerEnded = "RunnerEnded"
	// MetricSpotInterruption counts spot warnings for skiff runners.
	MetricSpotInterruption = "SpotInterruption"
	// MetricIgnored counts events about instances that are not skiff
	// runners, or states that end nothing (reason: not_skiff, state).
	MetricIgnored = "InstanceEventIgnored"
	// MetricLeftToReconciler counts runners left live for the reconciler
	// (reason: pool): those that ended without running the job they were
	// launched for, those a spot interruption ended, and those of pools
	// whose metrics records are on.
	MetricLeftToReconciler = "RunnerLeftToReconciler"
)

// ending lists the states after which an instance never runs a job again:
// a runner instance is launched with shutdown behaviour terminate, so
// stopping and stopped only happen when someone stops it by hand, and the
// runner is gone either way.
var ending = map[string]bool{"shutting-down": true, "terminated": true, "stopping": true, "stopped": true}

// Ends reports whether an instance in state no longer counts as a runner.
func Ends(state string) bool { return ending[state] }

// Options configures a Service. Ledger is required.
type Options struct {
	Ledger  Ledger
	Counter telemetry.Counter // default telemetry.Discard
	Logger  *slog.Logger      // default: discards
	// RecordPools are the pools whose metrics records are on ("*": all):
	// their runners are left for the reconciler, which writes a finished
	// job's record and only then ends its runner. Ending one here would
	// take it out of the reconciler's view, and its record would never be
	// written.
	RecordPools []string
}

// Service records instance events in the runner ledger.
type Service struct {
	ledger      Ledger
	counter     telemetry.Counter
	logger      *slog.Logger
	recordPools []string
}

// New returns the service.
func New(o Options) (*Service, error) {
	if o.Ledger == nil {
		return nil, errors.New("instance events: a ledger is required")
	}
	if o.Counter == nil {
		o.Counter = telemetry.Discard
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Service{ledger: o.Ledger, counter: o.Counter, logger: o.Logger, recordPools: o.RecordPools}, nil
}

// records reports whether the pool's metrics records are on.
func (s *Service) records(name string) bool { return pool.Listed(s.recordPools, name) }

// StateChanged records that the instance entered state at time at. It
// returns an error only when the ledger failed (the caller retries the
// event); unknown instances and states that end nothing are not errors.
func (s *Service) StateChanged(ctx context.Context, instanceID, state string, at time.Time) error {
	log := s.logger.With("instance_id", instanceID, "state", state)
	if instanceID == "" {
		return errors.New("recording a state change: no instance id")
	}
	if !Ends(state) {
		log.Debug("instance state ends nothing")
		s.counter.Count(MetricIgnored, "state")
		return nil
	}
	reason := "state_" + state
	// A runner that did not run the job it was launched for (another job
	// took it, or it never got one) stays live for the reconciler: ending it
	// here would hide the job from the pass that checks whether it is still
	// queued and launches its replacement. The reconciler ends it within a
	// minute (its instance is gone).
	// A runner of a pool whose metrics records are on stays live too: the
	// reconciler writes its job's record, then ends it.
	// So does a runner a spot interruption ended: the job it ran failed,
	// and the reconciler, which reads live records only, decides whether to
	// re-run it (on on-demand capacity) once its run has completed, then
	// ends the record. Until then it counts toward its pool's maxRunners;
	// in a pool that does not re-run, the reconciler's next pass ends it.
	if r, err := s.ledger.RunnerByInstance(ctx, instanceID); err == nil && r.State.Live() {
		// A stopped-kind warm machine is stopped on purpose while it waits
		// (docs/warm-pools.md), and a job that takes it starts it again: a
		// stop of a warm record, or one from before the runner was launched
		// on the machine (a late event of the wait), ends nothing.
		if (state == "stopping" || state == "stopped") && (ledger.IsWarm(r.Name) || at.Before(r.LaunchedAt)) {
			log.Debug("a warm machine's stop ends nothing", "runner_name", r.Name)
			s.counter.Count(MetricIgnored, "warm_stop")
			return nil
		}
		if why := leftBecause(r, s.records(r.Pool)); why != "" {
			log.Info("leaving the runner to the reconciler", "why", why, "runner_name", r.Name, "job_id", r.JobID, "ran_job", r.BusyJob)
			s.counter.Count(MetricLeftToReconciler, r.Pool)
			return nil
		}
	}
	first, err := s.ledger.EndInstance(ctx, instanceID, at, reason)
	switch {
	case errors.Is(err, store.ErrNotFound):
		log.Debug("not a skiff runner's instance")
		s.counter.Count(MetricIgnored, "not_skiff")
		return nil
	case err != nil:
		return fmt.Errorf("ending the runner on instance %s: %w", instanceID, err)
	case first:
		log.Info("runner ended", "reason", reason)
		s.counter.Count(MetricRunnerEnded, state)
	default:
		log.Debug("runner already ended")
	}
	return nil
}

// leftBecause says why a live runner whose instance ended is the
// reconciler's to end ("" when it is not).
func leftBecause(r ledger.Runner, records bool) string {
	switch {
	case r.BusyJob != r.JobID:
		return "did not run its own job"
	case !r.InterruptedAt.IsZero():
		return "a spot interruption failed its job: the re-run is the reconciler's to decide"
	case records:
		return "its job's metrics record is the reconciler's to write"
	}
	return ""
}

// SpotInterruption records EC2's two-minute warning for the instance.
func (s *Service) SpotInterruption(ctx context.Context, instanceID string, at time.Time) error {
	log := s.logger.With("instance_id", instanceID)
	if instanceID == "" {
		return errors.New("recording a spot interruption: no instance id")
	}
	err := s.ledger.MarkInterrupted(ctx, instanceID, at)
	switch {
	case errors.Is(err, store.ErrNotFound):
		log.Debug("spot warning for an instance that is not a skiff runner's")
		s.counter.Count(MetricIgnored, "not_skiff")
		return nil
	case err != nil:
		return fmt.Errorf("marking instance %s interrupted: %w", instanceID, err)
	}
	log.Info("spot interruption warning")
	s.counter.Count(MetricSpotInterruption, "")
	return nil
}
