package loadtest

import (
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	sdkec2 "github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/userdata"
)

// instState is where a simulated instance is in its life:
//
//	booting ─► waiting for its registration ─► idle ─► busy ─► finishing ─► off
//	   │              │ (none within the           │       │ (spot warning)
//	   ▼              ▼  registration timeout)     │       ▼
//	 broken          off                           │   interrupted ─► off (EC2 ends it)
//	 (never starts; skiff must reap it)            └─► off (idle timeout, or its runner deleted)
//
// Whoever terminates it (itself, EC2, skiff), it is off from then on.
type instState int

const (
	booting instState = iota
	waitingReg
	broken
	idle
	busy
	interrupted
	finishing
	off
)

type instance struct {
	id       string
	spot     bool
	launched time.Time
	bootAt   time.Time
	state    instState
	runnerID int64
	runner   string
	job      int64
	since    time.Time // idle since
	warnAt   time.Time // spot warning planned (zero: none)
	at       time.Time // finishing: power off at; interrupted: EC2 ends it at
}

// ec2Event is an EC2 state change or spot warning on its way to the
// EC2-event function.
type ec2Event struct {
	due      time.Time
	instance string
	state    string // "" for a spot warning
	at       time.Time
}

// instances plays every instance EC2 runs for skiff.
func (w *world) instances(now time.Time) {
	runners := map[int64]ghsim.RunnerState{}
	for _, r := range w.sim.Runners() {
		runners[r.ID] = r
	}
	for _, fi := range w.fake.Instances() {
		in := w.insts[fi.ID]
		if in == nil {
			in = &instance{id: fi.ID, spot: fi.Spot, launched: fi.LaunchTime, bootAt: fi.LaunchTime.Add(w.bootTime())}
			if w.rng.Float64() < w.cfg.Faults.FailedBoots {
				in.state = broken
				w.faults["failed_boots"]++
			}
			w.insts[fi.ID] = in
			w.emit(fi.ID, "pending", fi.LaunchTime)
		}
		if in.state == off {
			continue
		}
		if fi.State != "pending" && fi.State != "running" { // terminated by skiff (or EC2)
			w.gone(in, now)
			continue
		}
		switch in.state {
		case booting:
			if now.Before(in.bootAt) {
				continue
			}
			w.emit(in.id, "running", now)
			in.state = waitingReg
			fallthrough
		case waitingReg:
			w.register(in, now)
		case broken:
			if !now.Before(in.bootAt) && in.bootAt.After(in.launched) {
				w.emit(in.id, "running", now)
				in.bootAt = in.launched // the event once
			}
		case idle:
			r, ok := runners[in.runnerID]
			switch {
			case !ok: // skiff deleted the runner: run.sh exits, the instance powers off
				w.powerOff(in, now)
			case r.Busy:
				in.state, in.job, in.runner = busy, r.JobID, r.Name
				probe := w.probeOf(r.JobID)
				if !probe.noTag() {
					w.tag(in, names.TagJobStarted, now)
				}
				if j := w.jobs[r.JobID]; in.spot && j != nil && j.original && probe == noProbe && w.rng.Float64() < w.cfg.Faults.SpotInterrupts {
					in.warnAt = now.Add(time.Duration(w.rng.IntN(50)) * time.Second)
				}
			case now.Sub(in.since) >= pool.DefaultIdleTimeout: // the boot script's idle timeout
				w.powerOff(in, now)
			}
		case busy:
			r, ok := runners[in.runnerID]
			switch {
			case !ok || !r.Busy: // the job is over; the ephemeral runner exits
				w.tag(in, names.TagJobCompleted, now)
				in.state, in.at = finishing, now.Add(time.Duration(5+w.rng.IntN(15))*time.Second)
			case !in.warnAt.IsZero() && !now.Before(in.warnAt):
				w.spotWarning(in, now)
			}
		case interrupted:
			if !now.Before(in.at) {
				w.faults["spot_interruptions"]++
				w.interrupted[in.runner] = true
				w.terminateSelf(in, now)
			}
		case finishing:
			if !now.Before(in.at) {
				w.powerOff(in, now)
			}
		}
	}
}

// bootTime is how long a cold instance takes from its launch to its boot
// script's first read of its registration: EC2's pending and the boot,
// drawn from the latency model (EC2Latency unless Config.Latency says
// otherwise). The real path launches cold instances only.
func (w *world) bootTime() time.Duration {
	m := EC2Latency
	if w.cfg.Latency != nil {
		m = *w.cfg.Latency
	}
	k := m.Kinds[Cold]
	return k.PendingToRunning.sample(w.rng) + k.BootToOnline.sample(w.rng)
}

// register is the boot script's wait for its registration: read and
// delete it, then start the runner with it; without one within the
// registration timeout, power off.
func (w *world) register(in *instance, now time.Time) {
	jit, ok, err := w.be.take(w.ctx, userdata.InstanceARN("aws", region, account, in.id))
	switch {
	case err != nil:
		return // the next try
	case !ok:
		if now.Sub(in.launched) >= userdata.DefaultRegistrationTimeout {
			w.faults["no_registration"]++
			w.powerOff(in, now)
		}
		return
	}
	id, err := w.sim.ConnectRunner(jit)
	if err != nil {
		w.violate("runner on " + in.id + " could not connect with its JIT configuration: " + err.Error())
		w.powerOff(in, now)
		return
	}
	in.state, in.runnerID, in.since = idle, id, now
}

func (w *world) spotWarning(in *instance, now time.Time) {
	in.state, in.at = interrupted, now.Add(2*time.Minute)
	w.queueEvent(ec2Event{instance: in.id, at: now}, now)
}

// tag is a runner hook tagging its own instance.
func (w *world) tag(in *instance, key string, now time.Time) {
	_, _ = w.fake.CreateTags(w.ctx, &sdkec2.CreateTagsInput{Resources: []string{in.id},
		Tags: []types.Tag{{Key: aws.String(key), Value: aws.String(now.UTC().Format(time.RFC3339))}}})
}

// powerOff is the instance shutting itself down (shutdown behaviour
// terminate); its runner process ends with it.
func (w *world) powerOff(in *instance, now time.Time) {
	w.terminateSelf(in, now)
}

func (w *world) terminateSelf(in *instance, now time.Time) {
	_, _ = w.fake.TerminateInstances(w.ctx, &sdkec2.TerminateInstancesInput{InstanceIds: []string{in.id}})
	w.gone(in, now)
}

// gone: the instance is shutting down; its runner process dies (a job it
// was running fails, as on GitHub), and EC2 reports the state changes.
func (w *world) gone(in *instance, now time.Time) {
	if in.runnerID != 0 {
		_ = w.sim.DisconnectRunner(in.runnerID) // unknown once an ephemeral runner finished
	}
	in.state = off
	w.emit(in.id, "shutting-down", now)
	w.emit(in.id, "terminated", now.Add(time.Duration(5+w.rng.IntN(20))*time.Second))
}

// emit sends an EC2 state change to EventBridge: with EventChaos, one in
// ten twice, and late (most within 5 s, as EventBridge delivers, one in
// five up to 90 s), so they arrive out of order.
func (w *world) emit(id, state string, at time.Time) {
	w.queueEvent(ec2Event{instance: id, state: state, at: at}, at)
	if w.cfg.Faults.EventChaos && w.rng.IntN(10) == 0 {
		w.queueEvent(ec2Event{instance: id, state: state, at: at}, at)
		w.faults["duplicate_events"]++
	}
}

func (w *world) queueEvent(e ec2Event, at time.Time) {
	e.due = at
	if w.cfg.Faults.EventChaos {
		late := 5
		if w.rng.IntN(5) == 0 {
			late = 90
		}
		e.due = at.Add(time.Duration(w.rng.IntN(late)) * time.Second)
	}
	w.pending = append(w.pending, e)
}

// deliverEvents invokes the EC2-event function for every event due, in a
// random order; one that fails is retried on the next tick, as Lambda
// retries an asynchronous invocation.
func (w *world) deliverEvents(now time.Time) {
	var due, rest []ec2Event
	for _, e := range w.pending {
		if now.Before(e.due) {
			rest = append(rest, e)
		} else {
			due = append(due, e)
		}
	}
	w.rng.Shuffle(len(due), func(i, j int) { due[i], due[j] = due[j], due[i] })
	for _, e := range due {
		var err error
		if e.state == "" {
			err = w.events.SpotInterruption(w.ctx, e.instance, e.at)
		} else {
			err = w.events.StateChanged(w.ctx, e.instance, e.state, e.at)
		}
		if err != nil {
			rest = append(rest, e)
		}
	}
	w.pending = rest
}

func jobTag(tags map[string]string) int64 {
	id, _ := strconv.ParseInt(tags[names.TagJobID], 10, 64)
	return id
}
