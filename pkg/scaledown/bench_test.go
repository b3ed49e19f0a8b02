package scaledown_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	sdkec2 "github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/provider/ec2"
	"github.com/skiffci/skiff/pkg/provider/ec2/ec2fake"
	"github.com/skiffci/skiff/pkg/queue"
	"github.com/skiffci/skiff/pkg/room"
	"github.com/skiffci/skiff/pkg/scaledown"
	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/userdata"
)

// The mix of one 5,000-instance world (the scale a reconciler pass is sized for). Every class is
// an instance of the EC2 fake (launched through CreateFleet with its own
// tags), most have a ledger record and a GitHub runner; ghosts are runners
// only. 5,000 instances, 5,000 runners, 4,970 live records.
const (
	benchBusy      = 3057 // running a job: ledger job started, job-started tag, GitHub busy
	benchFresh     = 1560 // registered a minute ago, idle: kept
	benchBooting   = 100  // launched 2 min ago; GitHub lists them online, the ledger does not know yet: advanced
	benchIdle      = 100  // registered 20 min ago, no job: delete runner, terminate, end
	benchGone      = 100  // instance terminated, record live, runner offline: delete runner, end
	benchCompleted = 50   // job completed 5 min ago, runner still listed: terminate, end
	benchOrphans   = 30   // alive skiff instances without a record, 20 min old: terminate
	benchVanished  = 3    // registered, instance alive, runner no longer on GitHub: confirm, terminate, end
	benchQueued    = 3    // of the idle ones, whose job the records say is still queued: a GitHub job check
	benchGhosts    = 33   // offline skiff runners with no instance and no record: delete
)

type countingLedger struct {
	ledger.Ledger
	c *testenv.OpCount
}

func (l countingLedger) Reserve(ctx context.Context, pool string, max int, rs []ledger.Runner) (int, error) {
	l.c.Add("Reserve")
	return l.Ledger.Reserve(ctx, pool, max, rs)
}

func (l countingLedger) Launched(ctx context.Context, name string, x ledger.LaunchReport) error {
	l.c.Add("Launched")
	return l.Ledger.Launched(ctx, name, x)
}

func (l countingLedger) Advance(ctx context.Context, name string, to ledger.State, at time.Time, job int64) error {
	l.c.Add("Advance")
	return l.Ledger.Advance(ctx, name, to, at, job)
}

func (l countingLedger) End(ctx context.Context, name string, at time.Time, reason string) (bool, error) {
	l.c.Add("End")
	return l.Ledger.End(ctx, name, at, reason)
}

func (l countingLedger) EndInstance(ctx context.Context, id string, at time.Time, reason string) (bool, error) {
	l.c.Add("EndInstance")
	return l.Ledger.EndInstance(ctx, id, at, reason)
}

func (l countingLedger) Runner(ctx context.Context, name string) (ledger.Runner, error) {
	l.c.Add("Runner")
	return l.Ledger.Runner(ctx, name)
}

func (l countingLedger) RunnerByInstance(ctx context.Context, id string) (ledger.Runner, error) {
	l.c.Add("RunnerByInstance")
	return l.Ledger.RunnerByInstance(ctx, id)
}

func (l countingLedger) LiveRunners(ctx context.Context, pool string) ([]ledger.Runner, error) {
	l.c.Add("LiveRunners")
	return l.Ledger.LiveRunners(ctx, pool)
}

func (l countingLedger) Live(ctx context.Context, pool string) (int, error) {
	l.c.Add("Live")
	return l.Ledger.Live(ctx, pool)
}

type countingClaims struct {
	scaledown.Claims
	c *testenv.OpCount
}

func (k countingClaims) LaunchClaims(ctx context.Context, ids []int64, now time.Time) (map[int64]ledger.Claim, error) {
	k.c.Add("LaunchClaims")
	return k.Claims.LaunchClaims(ctx, ids, now)
}

func (k countingClaims) ClaimLaunch(ctx context.Context, c ledger.Claim, prev int, now time.Time) error {
	k.c.Add("ClaimLaunch")
	return k.Claims.ClaimLaunch(ctx, c, prev, now)
}

type countingJobs struct {
	scaledown.JobRecords
	c *testenv.OpCount
}

func (r countingJobs) Job(ctx context.Context, id int64) (store.JobRecord, error) {
	r.c.Add("Job")
	return r.JobRecords.Job(ctx, id)
}

// noRegistrations: the bench launches nothing through the provider.
type noRegistrations struct{}

func (noRegistrations) Put(context.Context, userdata.Registration) error { return nil }

// ghOps are the simulator's API operations, to count every GitHub request.
var ghOps = []string{ghsim.OpCreateInstallationToken, ghsim.OpGetOrgInstallation, ghsim.OpGetRepoInstallation,
	ghsim.OpListHookDeliveries, ghsim.OpRedeliverHookDelivery, ghsim.OpGenerateOrgJITConfig, ghsim.OpGenerateRepoJITConfig,
	ghsim.OpListRunnerGroups, ghsim.OpCreateOrgRegToken, ghsim.OpCreateRepoRegToken, ghsim.OpListOrgRunners,
	ghsim.OpListRepoRunners, ghsim.OpGetOrgRunner, ghsim.OpGetRepoRunner, ghsim.OpDeleteOrgRunner, ghsim.OpDeleteRepoRunner,
	ghsim.OpGetJob, ghsim.OpGetWorkflowRun, ghsim.OpGetPermissionLevel}

func ghCalls(sim *ghsim.Server) map[string]int {
	out := map[string]int{}
	for _, op := range ghOps {
		out[op] = sim.Requests(op)
	}
	return out
}

var ec2Ops = []string{"CreateFleet", "DescribeInstances", "TerminateInstances", "CreateTags"}

func ec2Calls(f *ec2fake.Fake) int {
	n := 0
	for _, op := range ec2Ops {
		n += f.Calls(op)
	}
	return n
}

// benchWorld is one 5,000-instance world, ready for one reconcile pass.
type benchWorld struct {
	fake   *ec2fake.Fake
	sim    *ghsim.Server
	down   *scaledown.Service
	ops    *testenv.OpCount
	ledger *ledger.Memory
	// expected actions of the pass
	idle, gone, completed, orphans int
}

// benchInstance launches one instance through the fake's CreateFleet with
// its own tags, at launch time at.
func benchInstance(tb testing.TB, f *ec2fake.Fake, at time.Time, tags map[string]string) string {
	tb.Helper()
	f.SetClock(func() time.Time { return at })
	var tl []types.Tag
	for k, v := range tags {
		tl = append(tl, types.Tag{Key: aws.String(k), Value: aws.String(v)})
	}
	out, err := f.CreateFleet(context.Background(), &sdkec2.CreateFleetInput{
		Type: types.FleetTypeInstant,
		TargetCapacitySpecification: &types.TargetCapacitySpecificationRequest{
			TotalTargetCapacity: aws.Int32(1), DefaultTargetCapacityType: types.DefaultTargetCapacityTypeSpot,
		},
		LaunchTemplateConfigs: []types.FleetLaunchTemplateConfigRequest{{
			LaunchTemplateSpecification: &types.FleetLaunchTemplateSpecificationRequest{
				LaunchTemplateName: aws.String("skiff-cpu"), Version: aws.String("$Default")},
			Overrides: []types.FleetLaunchTemplateOverridesRequest{{InstanceType: "c7i.large", SubnetId: aws.String("subnet-0aaaaaaaa")}},
		}},
		TagSpecifications: []types.TagSpecification{{ResourceType: types.ResourceTypeInstance, Tags: tl}},
	})
	if err != nil || len(out.Instances) != 1 || len(out.Instances[0].InstanceIds) != 1 {
		tb.Fatalf("launching a bench instance: %v", err)
	}
	return out.Instances[0].InstanceIds[0]
}

func newBenchWorld(tb testing.TB) *benchWorld {
	ctx := context.Background()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	clock := ghsim.NewClock(now)
	key := testenv.Key()
	sim := ghsim.New(ghsim.Options{Now: clock.Now, RateLimit: 100_000})
	tb.Cleanup(sim.Close)
	installAcme(sim, key)
	gh := appClient(tb, sim, key, clock.Now)
	pools := parsePools(tb, poolsYAML)
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))

	fake := ec2fake.New()
	prov, err := ec2.NewProvider(ec2.ProviderOptions{API: fake, Registrations: noRegistrations{}, Capacity: room.CapacityMemory{Store: room.NewMemory()},
		Partition: "aws", Region: "eu-west-1", Account: "123456789012", Logger: log, Now: clock.Now})
	if err != nil {
		tb.Fatal(err)
	}
	led := ledger.NewMemory(clock.Now)
	claims := ledger.NewLaunchMemory()
	records := store.NewMemory()
	records.SetClock(clock.Now)

	recs, idleFrom := benchInstances(tb, fake, now)
	fake.SetClock(clock.Now)

	benchLedger(tb, led, recs, now)
	benchJobRecords(tb, records, recs[idleFrom:idleFrom+benchIdle], now)
	benchGitHub(tb, sim, gh, recs)
	var nBusy, nRunners int
	for _, r := range sim.Runners() {
		nRunners++
		if r.Busy {
			nBusy++
		}
	}
	if nBusy != benchBusy || nRunners != 5000 || len(fake.Instances()) != 5000 {
		tb.Fatalf("world: %d runners (%d busy), %d instances; want 5000 (%d busy), 5000", nRunners, nBusy, len(fake.Instances()), benchBusy)
	}
	// Warm the client (installation lookup and token), as a warm function
	// instance would be: the pass's calls are then its own.
	if _, err := gh.ListRunners(ctx, 0, github.OrgScope("acme"), "skiff-warm"); err != nil {
		tb.Fatal(err)
	}

	ops := &testenv.OpCount{}
	down, err := scaledown.New(scaledown.Options{Pools: pools, Ledger: countingLedger{led, ops}, Claims: countingClaims{claims, ops},
		Jobs: countingJobs{records, ops}, Provider: prov, GitHub: gh, Queue: &queue.Memory{}, Logger: log, Now: clock.Now,
		Scopes: []github.Scope{github.OrgScope("acme")}})
	if err != nil {
		tb.Fatal(err)
	}
	return &benchWorld{fake: fake, sim: sim, down: down, ops: ops, ledger: led,
		idle: benchIdle, gone: benchGone, completed: benchCompleted, orphans: benchOrphans}
}

// benchRec is one runner of the bench world: its record, instance and
// GitHub runner ("online", "busy", "offline", "" for none).
type benchRec struct {
	name   string
	job    int64
	inst   string
	state  ledger.State
	at     time.Time // launched
	regAt  time.Time
	runner string // "online", "busy", "offline", "" (none)
}

// benchInstances launches the bench world's instances in fake, by kind of
// runner, and the orphans; it returns the runners' records and where the
// idle ones start.
func benchInstances(tb testing.TB, fake *ec2fake.Fake, now time.Time) (recs []benchRec, idleFrom int) {
	job := int64(1_000_000)
	add := func(n int, launched time.Time, state ledger.State, regAt time.Time, runner, instState string, extra map[string]string) {
		for range n {
			job++
			name := "skiff-" + strconv.FormatInt(job, 10) + "-1"
			tags := map[string]string{names.TagManaged: names.ManagedValue, names.TagPool: "cpu", names.TagOwner: "acme",
				names.TagRepository: "acme/app", names.TagRunnerName: name, names.TagJobID: strconv.FormatInt(job, 10)}
			for k, v := range extra {
				tags[k] = v
			}
			id := benchInstance(tb, fake, launched, tags)
			if instState != "" {
				fake.SetState(id, instState)
			}
			recs = append(recs, benchRec{name: name, job: job, inst: id, state: state, at: launched, regAt: regAt, runner: runner})
		}
	}
	started := map[string]string{names.TagJobStarted: now.Add(-20 * time.Minute).Format(time.RFC3339)}
	add(benchBusy, now.Add(-25*time.Minute), ledger.StateJobStarted, now.Add(-24*time.Minute), "busy", "", started)
	add(benchFresh, now.Add(-3*time.Minute), ledger.StateRegistered, now.Add(-time.Minute), "online", "", nil)
	add(benchBooting, now.Add(-2*time.Minute), ledger.StateLaunched, time.Time{}, "online", "", nil)
	idleFrom = len(recs)
	add(benchIdle, now.Add(-22*time.Minute), ledger.StateRegistered, now.Add(-20*time.Minute), "online", "", nil)
	add(benchGone, now.Add(-30*time.Minute), ledger.StateRegistered, now.Add(-29*time.Minute), "offline", "terminated", nil)
	add(benchCompleted, now.Add(-40*time.Minute), ledger.StateJobCompleted, now.Add(-39*time.Minute), "online", "", nil)
	add(benchVanished, now.Add(-15*time.Minute), ledger.StateRegistered, now.Add(-14*time.Minute), "", "", nil)
	// Orphans: instances only.
	for i := range benchOrphans {
		benchInstance(tb, fake, now.Add(-20*time.Minute), map[string]string{names.TagManaged: names.ManagedValue, names.TagPool: "cpu",
			names.TagOwner: "acme", names.TagRunnerName: fmt.Sprintf("skiff-9%06d-1", i)})
	}
	return recs, idleFrom
}

// benchLedger writes recs to ledger: one reservation of every record, then
// its launch and states.
func benchLedger(tb testing.TB, led *ledger.Memory, recs []benchRec, now time.Time) {
	ctx := context.Background()
	rs := make([]ledger.Runner, len(recs))
	for i, r := range recs {
		rs[i] = ledger.Runner{Name: r.name, Pool: "cpu", JobID: r.job, RunID: r.job, Attempt: 1, Token: "t-" + r.name,
			ReservedAt: r.at.Add(-10 * time.Second)}
	}
	if n, err := led.Reserve(ctx, "cpu", len(rs), rs); err != nil || n != len(rs) {
		tb.Fatalf("reserving: %d of %d, %v", n, len(rs), err)
	}
	for _, r := range recs {
		if err := led.Launched(ctx, r.name, ledger.LaunchReport{InstanceID: r.inst, InstanceType: "c7i.large", Zone: "subnet-0aaaaaaaa-az",
			Spot: true, At: r.at}); err != nil {
			tb.Fatal(err)
		}
		for _, st := range []ledger.State{ledger.StateRegistered, ledger.StateJobStarted, ledger.StateJobCompleted} {
			if r.state < st {
				break
			}
			at := r.regAt
			switch st {
			case ledger.StateJobStarted:
				at = r.regAt.Add(time.Minute)
			case ledger.StateJobCompleted:
				at = now.Add(-5 * time.Minute)
			}
			if err := led.Advance(ctx, r.name, st, at, r.job); err != nil {
				tb.Fatal(err)
			}
		}
	}
}

// benchJobRecords writes the job records of the idle runners: their jobs
// ran elsewhere (completed), but for a few still queued; the others have
// no record (expired).
func benchJobRecords(tb testing.TB, records *store.Memory, idle []benchRec, now time.Time) {
	ctx := context.Background()
	for i, r := range idle {
		st := store.StatusCompleted
		if i < benchQueued {
			st = store.StatusQueued
		}
		if _, err := records.RecordJob(ctx, store.JobRecord{ID: r.job, RunID: r.job, Attempt: 1, Repository: "acme/app", Owner: "acme",
			Status: st, Labels: []string{"self-hosted", "linux", "x64"}, Pool: "cpu", QueuedAt: now.Add(-25 * time.Minute),
			WorkflowName: "CI", JobName: "build"}); err != nil {
			tb.Fatal(err)
		}
	}

}

// benchGitHub registers the runners of recs on sim: the busy ones first,
// so that the jobs of one run go to them (lowest ids first), then the
// others; offline ones and the ghosts disconnect.
func benchGitHub(tb testing.TB, sim *ghsim.Server, gh *github.Client, recs []benchRec) {
	ctx := context.Background()
	tok, err := gh.RegistrationToken(ctx, 0, github.OrgScope("acme"))
	if err != nil {
		tb.Fatal(err)
	}
	register := func(name string) int64 {
		id, err := sim.RegisterRunner(tok.Token.Reveal(), ghsim.RunnerSpec{Name: name, Ephemeral: true, Labels: []string{"cpu"}})
		if err != nil {
			tb.Fatal(err)
		}
		return id
	}
	busy := 0
	for _, r := range recs {
		if r.runner == "busy" {
			register(r.name)
			busy++
		}
	}
	specs := make([]ghsim.JobSpec, busy)
	for i := range specs {
		specs[i] = ghsim.JobSpec{Labels: []string{"self-hosted", "cpu"}, Duration: 10 * time.Hour}
	}
	if _, err := sim.StartRun(ghsim.RunSpec{Repo: "acme/app", Jobs: specs}); err != nil {
		tb.Fatal(err)
	}
	for _, r := range recs {
		switch r.runner {
		case "online":
			register(r.name)
		case "offline":
			if err := sim.DisconnectRunner(register(r.name)); err != nil {
				tb.Fatal(err)
			}
		}
	}
	for i := range benchGhosts {
		if err := sim.DisconnectRunner(register(fmt.Sprintf("skiff-8%06d-1", i))); err != nil {
			tb.Fatal(err)
		}
	}
}

// BenchmarkReconcile5000 is one reconcile pass over 5,000 instances, 5,000
// GitHub runners of one org and 4,970 live ledger records, with a mix that
// makes the pass work (see the bench* constants). Per pass it reports the
// EC2 calls (target ≤ 10), the GitHub calls (target ≤ 60; split into
// listing, deletions, job checks and others), the store operations, and the
// process's CPU time (user + system, target ≤ 2 s) — which includes the
// GitHub simulator serving the client in this process. The pass's GitHub
// budget (DefaultMaxGitHubCalls) leaves most deletions to later passes: it
// also reports how many passes drain them (untimed).
//
//	go test -run '^$' -bench Reconcile5000 -benchtime 1x -count 3 ./pkg/scaledown/
func BenchmarkReconcile5000(b *testing.B) {
	ctx := context.Background()
	var ec2N, ghN, ghList, ghDelete, ghJob, storeN, passes int
	var cpu time.Duration
	var last scaledown.Report
	for range b.N {
		b.StopTimer()
		w := newBenchWorld(b)
		e0, g0 := ec2Calls(w.fake), ghCalls(w.sim)
		w.ops.Take()
		c0 := testenv.CPUTime()
		b.StartTimer()
		rep, err := w.down.Reconcile(ctx)
		b.StopTimer()
		cpu += testenv.CPUTime() - c0
		if err != nil {
			b.Fatal(err)
		}
		last = rep
		ec2N += ec2Calls(w.fake) - e0
		for op, n := range ghCalls(w.sim) {
			d := n - g0[op]
			ghN += d
			switch op {
			case ghsim.OpListOrgRunners:
				ghList += d
			case ghsim.OpDeleteOrgRunner:
				ghDelete += d
			case ghsim.OpGetJob, ghsim.OpGetWorkflowRun:
				ghJob += d
			}
		}
		storeN += w.ops.Total()
		// Within the GitHub budget the pass deletes the runners of live
		// instances first (idle), at least MinDeletes; records whose
		// instance is gone end at once, their runners left as ghosts.
		if rep.Instances != 5000 || rep.Runners != 5000 || rep.Errors != 0 || rep.Actions["idle"] != scaledown.DefaultMinDeletes ||
			rep.Actions["orphan"] != w.orphans || rep.Actions["job_completed"] != w.completed || rep.Actions["instance_gone"] != w.gone {
			b.Fatalf("unexpected pass: %+v", rep)
		}
		if n, _ := w.ledger.Live(ctx, "cpu"); n > 4970-w.gone-w.completed-scaledown.DefaultMinDeletes {
			b.Fatalf("%d live records after the pass: the gone, completed and reaped ones must have ended", n)
		}
		// The rest resumes on the next passes (at the same instant, so that
		// no new runner goes idle meanwhile): every idle runner reaped and
		// every ghost deleted.
		idle, ghosts := rep.Actions["idle"], 0
		for passes = 1; rep.Deferred > 0 && passes < 200; passes++ {
			if rep, err = w.down.Reconcile(ctx); err != nil {
				b.Fatal(err)
			}
			idle += rep.Actions["idle"]
			ghosts += rep.Actions["ghost"]
		}
		if idle != w.idle || ghosts != benchGhosts+w.gone {
			b.Fatalf("after %d passes: %d idle reaped (want %d), %d ghosts deleted (want %d)", passes, idle, w.idle, ghosts,
				benchGhosts+w.gone)
		}
		b.StartTimer()
	}
	n := float64(b.N)
	b.ReportMetric(float64(ec2N)/n, "ec2-calls/op")
	b.ReportMetric(float64(ghN)/n, "gh-calls/op")
	b.ReportMetric(float64(ghList)/n, "gh-list/op")
	b.ReportMetric(float64(ghDelete)/n, "gh-delete/op")
	b.ReportMetric(float64(ghJob)/n, "gh-jobcheck/op")
	b.ReportMetric(float64(storeN)/n, "store-ops/op")
	b.ReportMetric(cpu.Seconds()/n, "cpu-s/op")
	b.ReportMetric(float64(passes), "passes-to-drain")
	b.Logf("last pass: %+v", last)
}
