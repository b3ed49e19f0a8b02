package loadtest

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	sdkec2 "github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provider/ec2/ec2fake"
	"github.com/skiffci/skiff/pkg/userdata"
)

// instState is where a simulated instance is in its life, as its boot
// script plays it (userdata/boot.sh.tmpl, docs/runner-boot.md):
//
//	booting ─► waiting for its registration ─► idle ─► busy ─► finishing ─► off
//	   │              │ (none within the      ▲   │       │ (spot warning)
//	   ▼              │  registration timeout)│   │       ▼
//	 broken           │ ─► off                │   │   interrupted ─► off (EC2 ends it)
//	 (never starts;   │                       │   └─► off (idle timeout, or its runner deleted)
//	 skiff reaps it)  │ a warm item           │ its job's item
//	                  ▼                       │
//	              preparing ─► warm (tagged ready, polling) ─► off (warm_until passed)
//	                              │ stopped by the reconciler       ▲
//	                              ▼                                 │ booting again after a
//	                           stopped ─► (a job's StartInstances) ─┘ job's start: its item
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
	preparing
	warmWait
	stopped
	off
)

type instance struct {
	id       string
	spot     bool
	launched time.Time
	bootAt   time.Time
	regSince time.Time // the boot's start: the registration timeout counts from it
	state    instState
	runnerID int64
	runner   string
	job      int64
	since    time.Time // idle since
	warnAt   time.Time // spot warning planned (zero: none)
	at       time.Time // finishing: power off at; interrupted: EC2 ends it at; preparing: ready at
	// warm is the kind its first registration item named ("" for a cold
	// instance), warmName the warm record it was launched for and warmUntil
	// the end of its wait.
	warm      string
	warmName  string
	warmUntil time.Time
	// wasStopped: it waited stopped, and its job's start booted it again.
	wasStopped bool
	// handSeq is the handover that gave it to a job (1 for the run's
	// first; 0: none) and reboot the boot its start takes, drawn then.
	handSeq int
	reboot  time.Duration
	// startKind is how it started for the runner it registered: cold,
	// stopped or hot ("" before it registers one).
	startKind string
	fakeState string // the fake's state last seen
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
	for _, fi := range w.inOrder(w.fake.Instances()) {
		in := w.insts[fi.ID]
		if in == nil {
			in = &instance{id: fi.ID, spot: fi.Spot, launched: fi.LaunchTime, bootAt: fi.LaunchTime.Add(w.bootTime(Cold, w.rng)),
				regSince: fi.LaunchTime, fakeState: fi.State}
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
		if w.stopOrStart(in, fi.State, now) {
			continue
		}
		switch in.state {
		case booting:
			if now.Before(in.bootAt) {
				continue
			}
			w.fake.SetState(in.id, "running")
			w.emit(in.id, "running", now)
			in.state = waitingReg
			fallthrough
		case waitingReg:
			w.register(in, now)
		case broken:
			if !now.Before(in.bootAt) && in.bootAt.After(in.launched) {
				w.fake.SetState(in.id, "running")
				w.emit(in.id, "running", now)
				in.bootAt = in.launched // the event once
			}
		case preparing:
			if !now.Before(in.at) {
				// Stage warm_ready: the boot script tags its own instance.
				w.tag(in, names.TagWarmReady, now)
				in.state = warmWait
			}
		case warmWait:
			w.register(in, now)
		case idle:
			r, ok := runners[in.runnerID]
			switch {
			case !ok: // skiff deleted the runner: run.sh exits, the instance powers off
				w.powerOff(in, now)
			case r.Busy:
				in.state, in.job, in.runner = busy, r.JobID, r.Name
				w.ranOn[r.JobID], w.byRunner[r.Name] = in, in
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

// stopOrStart follows the instance's EC2 state when someone else moved it:
// terminated (skiff or EC2), stopped (the reconciler stops a ready warm
// machine: the OS's shutdown ends the boot script's wait without a
// shutdown of its own) or started again (a job's StartInstances: the
// per-boot copy of the boot script runs from the top). True when the
// instance has nothing more to do this step.
func (w *world) stopOrStart(in *instance, state string, now time.Time) bool {
	prev := in.fakeState
	in.fakeState = state
	switch {
	case state == "stopping" || state == "stopped":
		if in.warm == "" {
			w.gone(in, now) // a cold instance is launched to terminate on shutdown
			return true
		}
		if in.state != stopped {
			if in.runnerID != 0 {
				w.violate(fmt.Sprintf("instance %s was stopped while its runner %s is registered", in.id, in.runner))
				_ = w.sim.DisconnectRunner(in.runnerID)
				in.runnerID = 0
			}
			in.state, in.wasStopped = stopped, true
		}
		if state != prev {
			w.emit(in.id, state, now)
		}
		return true
	case state != "pending" && state != "running": // terminated by skiff (or EC2)
		w.gone(in, now)
		return true
	case in.state == stopped: // a job's StartInstances
		in.state, in.regSince = booting, now
		in.bootAt = now.Add(in.reboot)
		w.emit(in.id, "pending", now)
		return true
	}
	return false
}

// inOrder is the order the instances act in within a step: as launched,
// but the warm machines handed to jobs last, in the order of their
// handovers. Which ready machine a job takes is scale-up's random draw
// (not the seed's); the machines are alike, and the jobs' order is the
// seed's, so a handed machine's part (its runner's connection, GitHub's
// assignment of a job to it, its draws) goes by its handover.
func (w *world) inOrder(fis []ec2fake.Instance) []ec2fake.Instance {
	seq := func(id string) int {
		if in := w.insts[id]; in != nil {
			return in.handSeq
		}
		return 0
	}
	sort.SliceStable(fis, func(i, j int) bool { return seq(fis[i].ID) < seq(fis[j].ID) })
	return fis
}

// bootTime is how long an instance takes from its launch (or, for a
// stopped one, its start) to its boot script's first read of its
// registration: EC2's pending and the boot of the kind, drawn from the
// latency model.
func (w *world) bootTime(kind StartKind, rng *rand.Rand) time.Duration {
	k := w.latency().Kinds[kind]
	return k.PendingToRunning.sample(rng) + k.BootToOnline.sample(rng)
}

// latency is the run's latency model: EC2Latency unless Config.Latency
// says otherwise.
func (w *world) latency() LatencyModel {
	if w.cfg.Latency != nil {
		return *w.cfg.Latency
	}
	return EC2Latency
}

// warmPrepare is a warm machine's preparation after it read its warm item:
// the runner user, the runner's download and checksum, the job hooks (the
// boot script's warm path before its ready tag); an assumption, as the
// model's boot is.
var warmPrepare = Spread{P50: 20 * time.Second, P95: 45 * time.Second}

// register is the boot script's wait for its registration: read and
// delete it, then act on its mode. A job's (jit) starts the runner; a warm
// item prepares the machine and makes it wait (again) until its
// warm_until. Nothing within the registration timeout (a warm machine:
// by its warm_until): power off.
func (w *world) register(in *instance, now time.Time) {
	reg, ok, err := w.be.take(w.ctx, userdata.InstanceARN("aws", region, account, in.id))
	switch {
	case err != nil:
		return // the next try
	case !ok && in.state == warmWait:
		if !now.Before(in.warmUntil) { // stage warm_expired
			w.faults["warm_expired"]++
			w.powerOff(in, now)
		}
		return
	case !ok:
		if now.Sub(in.regSince) >= userdata.DefaultRegistrationTimeout {
			w.faults["no_registration"]++
			w.powerOff(in, now)
		}
		return
	case reg.Mode == userdata.ModeWarm:
		if in.warm == "" {
			in.warm, in.warmName = reg.WarmKind, reg.RunnerName
			in.state, in.at = preparing, now.Add(warmPrepare.sample(w.rng))
		} else { // already prepared: ready again at once
			in.state, in.at = preparing, now
		}
		in.warmUntil = reg.WarmUntil
		return
	}
	id, err := w.sim.ConnectRunner(reg.JITConfig)
	if err != nil {
		w.violate("runner on " + in.id + " could not connect with its JIT configuration: " + err.Error())
		w.powerOff(in, now)
		return
	}
	in.state, in.runnerID, in.since = idle, id, now
	switch {
	case in.warm == "":
		in.startKind = string(Cold)
	case in.wasStopped:
		in.startKind = string(Stopped)
	default:
		in.startKind = string(Hot)
	}
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
	due, rest := takeDue(w.rng, now, w.pending, func(e ec2Event) time.Time { return e.due })
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

// takeDue splits items into those due at now (at returns when each is),
// in an order rng shuffles, and the rest, in their order.
func takeDue[T any](rng *rand.Rand, now time.Time, items []T, at func(T) time.Time) (due, rest []T) {
	for _, it := range items {
		if now.Before(at(it)) {
			rest = append(rest, it)
		} else {
			due = append(due, it)
		}
	}
	rng.Shuffle(len(due), func(i, j int) { due[i], due[j] = due[j], due[i] })
	return due, rest
}

func jobTag(tags map[string]string) int64 {
	id, _ := strconv.ParseInt(tags[names.TagJobID], 10, 64)
	return id
}
