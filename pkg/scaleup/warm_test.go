package scaleup_test

import (
	"context"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/scaleup"
	"github.com/skiffci/skiff/pkg/userdata"
)

var warmLabels = []string{"self-hosted", "linux", "x64", "warm"}

// readyWarm launches a warm machine of pool warm as the reconciler does
// (a ledger record without a job, the launch, the machine's ready tag, a
// stop for the stopped kind) and records it ready; it returns its instance.
func (e *env) readyWarm(kind pool.WarmKind, id string) string {
	e.t.Helper()
	ctx := context.Background()
	spec, ok := e.opts.Pools.WarmSpec("warm")
	if !ok {
		e.t.Fatal("pool warm keeps no warm machines")
	}
	name := names.WarmRunnerName("", string(kind), spec.WarmKey(""), id)
	if n, err := e.ledger.Reserve(ctx, "warm", spec.MaxRunners, []ledger.Runner{{Name: name, Pool: "warm", ReservedAt: e.clock.now()}}); err != nil || n != 1 {
		e.t.Fatalf("reserving the warm record: %d, %v", n, err)
	}
	prov := e.provider()
	plan, err := prov.Plan(ctx, provider.Launch{Token: "skiff-warm-" + id, Spec: spec, Runners: []provider.RunnerRequest{{Name: name, Warm: kind}}})
	if err != nil {
		e.t.Fatal(err)
	}
	res, err := prov.Launch(ctx, plan, []provider.Registration{{Mode: provider.ModeWarm, RunnerName: name, WarmKind: string(kind),
		WarmUntil: e.clock.now().Add(24 * time.Hour)}})
	if err != nil || res.Runners[0].Err != nil {
		e.t.Fatalf("launching the warm machine: %v, %+v", err, res)
	}
	in := res.Runners[0].Instance
	if err := e.ledger.Launched(ctx, name, ledger.LaunchReport{InstanceID: in.ID, InstanceType: in.InstanceType, At: e.clock.now()}); err != nil {
		e.t.Fatal(err)
	}
	e.ec2.SetState(in.ID, "running")
	if kind == pool.WarmStopped {
		if err := prov.Stop(ctx, []string{in.ID}); err != nil {
			e.t.Fatal(err)
		}
		e.ec2.SetState(in.ID, "stopped")
	}
	if err := e.ledger.Advance(ctx, name, ledger.StateRegistered, e.clock.now(), 0); err != nil {
		e.t.Fatal(err)
	}
	return in.ID
}

// jobRunner is the ledger record of the job's runner (generation 1).
func (e *env) jobRunner(jobID int64) ledger.Runner {
	e.t.Helper()
	r, err := e.ledger.Runner(context.Background(), names.RunnerName("", jobID, 1))
	if err != nil {
		e.t.Fatalf("the runner of job %d: %v", jobID, err)
	}
	return r
}

func TestWarmStart(t *testing.T) {
	for _, kind := range []pool.WarmKind{pool.WarmStopped, pool.WarmHot} {
		t.Run(string(kind), func(t *testing.T) {
			e := newEnv(t, nil)
			id := e.readyWarm(kind, "a")
			fleets := e.ec2.Calls("CreateFleet")
			if r := e.handle(context.Background(), e.svc, message(job(501, warmLabels...), 1)); len(r.BatchItemFailures) != 0 {
				t.Fatalf("failures: %+v\n%s", r, e.logs)
			}
			if n := e.ec2.Calls("CreateFleet"); n != fleets {
				t.Errorf("%d fleet calls for a job a warm machine waited for; want none", n-fleets)
			}
			r := e.jobRunner(501)
			want := map[pool.WarmKind]string{pool.WarmStopped: ledger.StartStopped, pool.WarmHot: ledger.StartHot}[kind]
			if r.InstanceID != id || r.StartKind != want || r.State != ledger.StateLaunched {
				t.Errorf("the job's runner = %+v; want launched on %s, started %s", r, id, want)
			}
			starts := e.ec2.Calls("StartInstances")
			if kind == pool.WarmStopped && starts != 1 || kind == pool.WarmHot && starts != 0 {
				t.Errorf("%d StartInstances calls for a %s machine", starts, kind)
			}
			reg, ok := e.regs.all()[userdata.InstanceARN("aws", "eu-west-1", "123456789012", id)]
			if !ok || reg.Mode != userdata.ModeJIT {
				t.Errorf("the warm machine's registration = %+v, %v; want the job's JIT registration", reg, ok)
			}
			if live, _ := e.ledger.Live(context.Background(), "warm"); live != 1 {
				t.Errorf("live %d; want 1 (the machine, now the job's)", live)
			}
			for _, in := range e.ec2.Instances() {
				if in.ID == id && in.Tags[names.TagRunnerName] != names.RunnerName("", 501, 1) {
					t.Errorf("the machine's runner-name tag = %q; want the job's runner", in.Tags[names.TagRunnerName])
				}
			}
			if got := e.counter.Get(scaleup.MetricWarm, "started_"+string(kind)); got != 1 {
				t.Errorf("%s started_%s = %v", scaleup.MetricWarm, kind, got)
			}
		})
	}
}

// TestWarmTakenOnce: two jobs arrive together and one warm machine waits:
// one job takes it, the other launches cold; the machine serves one job.
func TestWarmTakenOnce(t *testing.T) {
	e := newEnv(t, nil)
	id := e.readyWarm(pool.WarmHot, "a")
	if r := e.handle(context.Background(), e.svc, jobs(601, 2, warmLabels...)...); len(r.BatchItemFailures) != 0 {
		t.Fatalf("failures: %+v\n%s", r, e.logs)
	}
	on := map[string]int{}
	for _, j := range []int64{601, 602} {
		on[e.jobRunner(j).InstanceID]++
	}
	if on[id] != 1 || len(on) != 2 {
		t.Errorf("instances of the two jobs: %v; want the warm machine %s once and a cold one", on, id)
	}
	if e.ec2.Calls("CreateFleet") != 2 { // the warm machine's launch and one cold
		t.Errorf("%d fleet calls; want 2", e.ec2.Calls("CreateFleet"))
	}
}

// TestWarmStartFails: the stopped machine does not start; the job
// launches cold in the same delivery, and the machine is terminated.
func TestWarmStartFails(t *testing.T) {
	e := newEnv(t, nil)
	id := e.readyWarm(pool.WarmStopped, "a")
	e.ec2.FailOp("StartInstances", "InsufficientInstanceCapacity")
	if r := e.handle(context.Background(), e.svc, message(job(701, warmLabels...), 1)); len(r.BatchItemFailures) != 0 {
		t.Fatalf("failures: %+v\n%s", r, e.logs)
	}
	r := e.jobRunner(701)
	if r.InstanceID == "" || r.InstanceID == id || r.StartKind != ledger.StartCold {
		t.Errorf("the job's runner = %+v; want a cold launch", r)
	}
	for _, in := range e.ec2.Instances() {
		if in.ID == id && in.State != "terminated" && in.State != "shutting-down" {
			t.Errorf("the warm machine that did not start is %s; want terminated", in.State)
		}
	}
	if reg := e.regs.all()[userdata.InstanceARN("aws", "eu-west-1", "123456789012", id)]; reg.Mode != userdata.ModeWarm {
		t.Errorf("the machine that did not start has a %s registration; want only its warm item", reg.Mode)
	}
	if live, _ := e.ledger.Live(context.Background(), "warm"); live != 1 {
		t.Errorf("live %d; want 1 (the cold runner)", live)
	}
}

// TestWarmNeverForAnotherSpec: a job whose dynamic label asks for another
// instance type launches cold; the warm machine keeps waiting.
func TestWarmNeverForAnotherSpec(t *testing.T) {
	e := newEnv(t, nil)
	e.readyWarm(pool.WarmHot, "a")
	fleets := e.ec2.Calls("CreateFleet")
	labels := append(append([]string{}, warmLabels...), "skiff/disk=60")
	if r := e.handle(context.Background(), e.svc, message(job(801, labels...), 1)); len(r.BatchItemFailures) != 0 {
		t.Fatalf("failures: %+v\n%s", r, e.logs)
	}
	if r := e.jobRunner(801); r.StartKind != ledger.StartCold || e.ec2.Calls("CreateFleet") != fleets+1 {
		t.Errorf("the job's runner = %+v; want a cold launch of its own disk", r)
	}
	if live, _ := e.ledger.Live(context.Background(), "warm"); live != 2 {
		t.Errorf("live %d; want 2 (the warm machine still waits)", live)
	}
}

// TestWarmFullPoolAdmitsTakers: a pool whose maxRunners are all warm
// machines still admits the jobs that take them.
func TestWarmFullPoolAdmitsTakers(t *testing.T) {
	e := newEnv(t, nil)
	e.readyWarm(pool.WarmHot, "a")
	e.readyWarm(pool.WarmHot, "b")
	e.readyWarm(pool.WarmStopped, "c")
	if r := e.handle(context.Background(), e.svc, jobs(901, 3, warmLabels...)...); len(r.BatchItemFailures) != 0 {
		t.Fatalf("failures: %+v\n%s", r, e.logs)
	}
	for j := int64(901); j < 904; j++ {
		if r := e.jobRunner(j); r.StartKind == ledger.StartCold || r.InstanceID == "" {
			t.Errorf("job %d's runner = %+v; want a warm start", j, r)
		}
	}
	if live, _ := e.ledger.Live(context.Background(), "warm"); live != 3 {
		t.Errorf("live %d; want 3", live)
	}
}

// staleLedger answers LiveRunners with what the ledger held before: an
// invocation that read the warm machines just before another took one.
type staleLedger struct {
	*ledger.Memory
	live []ledger.Runner
}

func (s staleLedger) LiveRunners(context.Context, string) ([]ledger.Runner, error) {
	return s.live, nil
}

// TestWarmLostRace: two invocations read the same ready machine; the one
// that ends its record second launches cold, and the machine serves one job.
func TestWarmLostRace(t *testing.T) {
	e := newEnv(t, nil)
	id := e.readyWarm(pool.WarmHot, "a")
	before, err := e.ledger.LiveRunners(context.Background(), "warm")
	if err != nil {
		t.Fatal(err)
	}
	if r := e.handle(context.Background(), e.svc, message(job(1001, warmLabels...), 1)); len(r.BatchItemFailures) != 0 {
		t.Fatalf("failures: %+v", r)
	}
	o := e.opts
	o.Ledger = staleLedger{Memory: e.ledger, live: before}
	late, err := scaleup.New(o)
	if err != nil {
		t.Fatal(err)
	}
	if r := e.handle(context.Background(), late, message(job(1002, warmLabels...), 1)); len(r.BatchItemFailures) != 0 {
		t.Fatalf("failures: %+v\n%s", r, e.logs)
	}
	if a, b := e.jobRunner(1001), e.jobRunner(1002); a.InstanceID != id || b.InstanceID == id || b.StartKind != ledger.StartCold {
		t.Errorf("runners %+v and %+v; want the first on the warm machine %s, the second cold", a, b, id)
	}
	if got := e.counter.Get(scaleup.MetricWarm, "lost_race"); got != 1 {
		t.Errorf("lost_race = %v, want 1", got)
	}
	for _, in := range e.ec2.Instances() {
		if in.ID == id && in.State == "terminated" {
			t.Error("the loser terminated the machine the winner runs on")
		}
	}
}
