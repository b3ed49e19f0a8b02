package ec2

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"time"

	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/userdata"
)

// Warm instances (docs/warm-pools.md) on EC2. A warm instance is launched
// by Plan and Launch like any other, from a launch of one runner whose Warm
// is its kind: tagged names.TagWarm=<kind> and names.TagRunnerName=<its
// warm name>, no job, run or repository tag, its registration item mode
// warm. Its boot script prepares everything but the registration, tags it
// names.TagWarmReady and waits for a second item under the same key. The
// reconciler stops the ready "stopped" ones (Stop); a job's scale-up hands
// one over (Hand):
//
//	launch ──► pending ──► running, warm-ready ──Stop──► stopping ──► stopped
//	                           │ hot                                     │ stopped
//	                           ▼                                         ▼
//	                 Hand: tag, registration            Hand: tag, StartInstances, registration
//
// Hand tags before it starts or delivers anything, so that the reconciler
// sees the instance as the job's before its runner runs.

var _ provider.Warmer = (*Provider)(nil)

// checkWarm refuses a launch that mixes a warm runner with others, or whose
// warm runner has a job or an unknown kind: one warm runner is one launch,
// its instance tagged as its own at creation.
func checkWarm(runners []provider.RunnerRequest) error {
	for _, r := range runners {
		switch {
		case r.Warm == "":
			continue
		case len(runners) != 1:
			return &provider.Error{Kind: provider.ErrInvalid, Code: "WarmLaunch", Final: true,
				Message: "a warm runner is launched alone, not with other runners"}
		case r.Warm != pool.WarmStopped && r.Warm != pool.WarmHot:
			return &provider.Error{Kind: provider.ErrInvalid, Code: "WarmLaunch", Final: true,
				Message: fmt.Sprintf("warm kind %q is neither %s nor %s", r.Warm, pool.WarmStopped, pool.WarmHot)}
		case r.JobID != 0:
			return &provider.Error{Kind: provider.ErrInvalid, Code: "WarmLaunch", Final: true,
				Message: "a warm runner has no job"}
		}
	}
	return nil
}

// warmMatches refuses a registration that does not go with its runner: a
// warm runner's is mode warm of its kind, a job's runner's is not (a secret
// never goes to an instance tagged warm, nor a wait to a job's).
func warmMatches(r provider.RunnerRequest, g provider.Registration) error {
	if (r.Warm != "") == (g.Mode == provider.ModeWarm) && g.WarmKind == string(r.Warm) {
		return nil
	}
	return &provider.Error{Kind: provider.ErrInvalid, Code: "WarmRegistration", Final: true,
		Message: fmt.Sprintf("runner %s (warm %q) cannot take a registration of mode %s (warm %q)", r.Name, r.Warm, g.Mode, g.WarmKind)}
}

// item is the registration table's item of instance id.
func (p *Provider) item(id string, g provider.Registration, now time.Time) userdata.Registration {
	return userdata.Registration{InstanceARN: userdata.InstanceARN(p.o.Partition, p.o.Region, p.o.Account, id),
		Mode: g.Mode, JITConfig: g.JITConfig, Token: g.Token, URL: g.URL, RunnerName: g.RunnerName, Labels: g.Labels,
		RunnerGroup: g.RunnerGroup, RunnerVersion: g.RunnerVersion, RunnerSHA256: g.RunnerSHA256,
		WarmKind: g.WarmKind, WarmUntil: g.WarmUntil, ExpiresAt: now.Add(p.o.RegistrationTTL)}
}

// Stop implements provider.Warmer with StopInstances (Launcher.Stop): an
// instance already stopping or stopped, unknown, terminated or shutting
// down is not an error, and one refused never spares the others. Errors:
// a spot instance is refused by EC2 (it stops no instance of a one-time
// spot request) — ErrInvalid, final: warm stopped instances launch
// on-demand (request), so only a wrong caller asks; an instance still
// pending from its launch is ErrTransient (code IncorrectInstanceState):
// it can be stopped once running; the rest as every call (throttling,
// server errors).
func (p *Provider) Stop(ctx context.Context, ids []string) error {
	if _, err := p.launcher.Stop(ctx, ids); err != nil {
		if errorCode(err) == "UnsupportedOperation" {
			e := neutral(asError(err), "")
			e.Kind, e.Final = provider.ErrInvalid, true
			return fmt.Errorf("stopping warm instances: %w", e)
		}
		return fmt.Errorf("stopping warm instances: %w", neutralErr(err))
	}
	return nil
}

// Hand implements provider.Warmer: it gives warm instance h.InstanceID to
// the job's runner h.Runner in three steps, each only after the one before
// succeeded:
//
//  1. CreateTags: the runner's own tags (names.TagRunnerName, TagJobID,
//     TagRunID, TagRepository, and TagOwner when the runner has one), as a
//     cold launch has them; names.TagWarm stays. From now on the
//     reconciler sees the instance as the job's.
//  2. For a stopped instance (h.Kind pool.WarmStopped), StartInstances.
//  3. The registration item, keyed by the instance's ARN, expiring
//     RegistrationTTL from now: the waiting boot script reads it.
//
// It returns what it knows without describing the instance (a call on the
// job's path): its id, its state (pending after a start; running for a
// hot one), its capacity for a stopped one (on-demand) and the tags it
// set; pool, type and zone are the caller's, from its List.
//
// Errors: on any error the job did not get the instance, and the caller
// terminates it and launches cold; nothing is undone here. A registration
// EC2 or the boot script could not use is ErrInvalid (final), before any
// call. An instance that is gone (unknown to EC2) or cannot start now
// (IncorrectInstanceState: still stopping, shutting down, terminated) is
// ErrTransient, never final: only this instance failed, and a cold launch
// can proceed at once. InsufficientInstanceCapacity on the start (no
// capacity of its type in its zone) is ErrCapacity. A registration not
// written is ErrTransient, code RegistrationNotDelivered. No error or log
// line carries the registration's secret.
func (p *Provider) Hand(ctx context.Context, h provider.Handover) (provider.Instance, error) {
	now := p.o.Now()
	if h.Kind != pool.WarmStopped && h.Kind != pool.WarmHot || h.InstanceID == "" || h.Registration.Mode == provider.ModeWarm {
		return provider.Instance{}, &provider.Error{Kind: provider.ErrInvalid, Code: "InvalidHandover", Final: true,
			Message: fmt.Sprintf("handing over instance %q of warm kind %q with a registration of mode %s", h.InstanceID, h.Kind, h.Registration.Mode)}
	}
	reg := p.item(h.InstanceID, h.Registration, now)
	if err := reg.Validate(); err != nil {
		return provider.Instance{}, &provider.Error{Kind: provider.ErrInvalid, Code: "InvalidRegistration", Final: true, Message: err.Error()}
	}
	log := p.o.Logger.With("instance_id", h.InstanceID, "runner_name", h.Runner.Name, "job_id", h.Runner.JobID, "warm", string(h.Kind))
	tags := map[string]string{
		names.TagRunnerName: h.Runner.Name,
		names.TagJobID:      strconv.FormatInt(h.Runner.JobID, 10),
		names.TagRunID:      strconv.FormatInt(h.Runner.RunID, 10),
		names.TagRepository: h.Runner.Repository,
	}
	if h.Runner.Owner != "" {
		tags[names.TagOwner] = h.Runner.Owner
	}
	// One attempt: a warm instance is long past EC2's eventual consistency,
	// and one it does not know is gone, which the job must not wait for.
	if err := p.launcher.tag(ctx, []string{h.InstanceID}, tags, 1); err != nil {
		return provider.Instance{}, fmt.Errorf("tagging warm instance %s for its job: %w", h.InstanceID, handErr(err))
	}
	out := provider.Instance{ID: h.InstanceID, State: provider.Running, Tags: maps.Clone(tags)}
	out.Tags[names.TagWarm] = string(h.Kind)
	if h.Kind == pool.WarmStopped {
		changes, err := p.launcher.Start(ctx, []string{h.InstanceID})
		if err != nil {
			return provider.Instance{}, fmt.Errorf("starting warm instance %s: %w", h.InstanceID, handErr(err))
		}
		out.State, out.Capacity = provider.Pending, provider.OnDemand
		if c, ok := changes[h.InstanceID]; ok {
			out.State = stateOf(c.Current)
		}
	}
	if err := p.o.Registrations.Put(ctx, reg); err != nil {
		log.Error("writing the registration of a warm instance's job", "err", err)
		return provider.Instance{}, &provider.Error{Kind: provider.ErrTransient, Code: "RegistrationNotDelivered",
			Message: "the registration item could not be written"}
	}
	return out, nil
}

// handErr is the provider's word for a failed step of a handover, as
// every call's (neutralErr; IncorrectInstanceState is ErrTransient there),
// except that an instance EC2 does not know is gone, not an invalid
// request: ErrTransient and not final (see Hand).
func handErr(err error) error {
	if notFound(err) || errorCode(err) == "InvalidInstanceID.NotFound" {
		e := neutral(asError(err), "")
		e.Kind, e.Final = provider.ErrTransient, false
		return e
	}
	return neutralErr(err)
}
