package scaleup_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/provider/ec2"
	"github.com/skiffci/skiff/pkg/queue"
	"github.com/skiffci/skiff/pkg/scaleup"
	"github.com/skiffci/skiff/pkg/userdata"
)

func TestBatchLaunchesOneFleet(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	resp := e.handle(context.Background(), e.svc, jobs(1000, 10)...)
	if len(resp.BatchItemFailures) != 0 {
		t.Fatalf("failures: %+v\nlogs:\n%s", resp.BatchItemFailures, e.logs.String())
	}
	if got := e.ec2.Calls("CreateFleet"); got != 1 {
		t.Errorf("%d CreateFleet calls for one batch of one spec, want 1", got)
	}
	if got := len(e.ec2.Live()); got != 10 {
		t.Fatalf("%d instances, want 10", got)
	}
	regs := e.regs.all()
	names := map[string]bool{}
	for arn, r := range regs {
		if r.Mode != userdata.ModeJIT || r.JITConfig == "" {
			t.Errorf("%s: registration %v", arn, r)
		}
		names[r.RunnerName] = true
	}
	if len(regs) != 10 || len(names) != 10 {
		t.Errorf("%d registrations with %d runner names, want 10 and 10", len(regs), len(names))
	}
	if got := e.sim.Requests(ghsim.OpGenerateOrgJITConfig); got != 10 {
		t.Errorf("%d JIT configs generated, want 10", got)
	}
	if got, _ := e.ledger.Live(context.Background(), "cpu"); got != 10 {
		t.Errorf("runner count %d, want 10", got)
	}
	if got := e.counter.Get(scaleup.MetricLaunched, "cpu"); got != 10 {
		t.Errorf("launched metric %d", got)
	}
	if lat := e.timings.Get(scaleup.MetricLaunchLatency, "cpu"); len(lat) != 10 || lat[0] != 2*time.Second {
		t.Errorf("launch latencies %v, want ten of 2s", lat)
	}
	in := e.ec2.CreateFleetInputs()[0]
	if got := aws.ToString(in.LaunchTemplateConfigs[0].LaunchTemplateSpecification.LaunchTemplateName); got != "skiff-cpu" {
		t.Errorf("launch template %q", got)
	}
	tags := e.ec2.Live()[0].Tags
	for _, k := range []string{"skiff:pool", "skiff:owner", "skiff:repository", "skiff:job-ids", "skiff:run-ids", "skiff:runner-names", "skiff:fleet-token"} {
		if tags[k] == "" {
			t.Errorf("instance tag %s missing: %v", k, tags)
		}
	}
	if tags["skiff:repository"] != "acme/app" || !strings.Contains(tags["skiff:job-ids"], "1009") {
		t.Errorf("tags %v", tags)
	}
	// Ten jobs share the fleet: each instance is then tagged with its own
	// job, run and runner, the one its registration names.
	if got := e.ec2.Calls("CreateTags"); got != 10 {
		t.Errorf("%d CreateTags calls, want one per instance", got)
	}
	for _, in := range e.ec2.Live() {
		r := regs[userdata.InstanceARN("aws", "eu-west-1", "123456789012", in.ID)]
		jobID := strings.Split(r.RunnerName, "-")[1]
		id, _ := strconv.ParseInt(jobID, 10, 64)
		if in.Tags["skiff:runner-name"] != r.RunnerName || in.Tags["skiff:job-id"] != jobID ||
			in.Tags["skiff:run-id"] != strconv.FormatInt(id/10+1, 10) || in.Tags["skiff:repository"] != "acme/app" {
			t.Errorf("instance %s (runner %s) tags %v", in.ID, r.RunnerName, in.Tags)
		}
	}
	// A second delivery of the whole batch (late duplicates) launches nothing.
	resp = e.handle(context.Background(), e.svc, jobs(1000, 10)...)
	if len(resp.BatchItemFailures) != 0 || len(e.ec2.Instances()) != 10 || e.counter.Get(scaleup.MetricDuplicates, "launched") != 10 {
		t.Errorf("redelivery: failures %v, %d instances, duplicates %d", resp.BatchItemFailures, len(e.ec2.Instances()),
			e.counter.Get(scaleup.MetricDuplicates, "launched"))
	}
}

// TestOutcomes: every job ends launched, skipped (reason), retried (reason)
// or dead-lettered (reason).
// outcomeWant is what handling a batch must give: launches, retries, dead
// letters, a counter and CreateFleet calls.
type outcomeWant struct {
	launched   int
	retried    int
	deadReason string // the reason of every dead letter, "" for none
	dead       int
	metric     string // a counter that must be non-zero, "name/reason"
	fleetCalls int    // -1: do not check
}

// checkOutcome fails t unless e, after answering resp, is as want says.
func checkOutcome(t *testing.T, e *env, resp response, want outcomeWant) {
	t.Helper()
	if got := len(e.ec2.Live()); got != want.launched {
		t.Errorf("launched %d, want %d", got, want.launched)
	}
	if got := len(resp.BatchItemFailures); got != want.retried {
		t.Errorf("retried %d, want %d: %+v", got, want.retried, resp.BatchItemFailures)
	}
	dead := e.dlq.DeadLetters()
	if len(dead) != want.dead {
		t.Errorf("dead letters %+v, want %d", dead, want.dead)
	}
	for _, d := range dead {
		if d.Reason != want.deadReason {
			t.Errorf("dead letter reason %q, want %q", d.Reason, want.deadReason)
		}
	}
	if want.metric != "" && e.counter.Snapshot()[want.metric] == 0 {
		t.Errorf("metric %s not counted: %v", want.metric, e.counter.Snapshot())
	}
	if want.fleetCalls >= 0 && e.ec2.Calls("CreateFleet") != want.fleetCalls {
		t.Errorf("%d CreateFleet calls, want %d", e.ec2.Calls("CreateFleet"), want.fleetCalls)
	}
	if got, _ := e.ledger.Live(context.Background(), "cpu"); want.launched == 0 && got != 0 {
		t.Errorf("cpu runner count %d after launching nothing", got)
	}
}

func TestOutcomes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		msgs     func() []queue.Delivery
		setup    func(e *env)
		maxTries int
		want     outcomeWant
	}{
		{"unresolvable labels are skipped", func() []queue.Delivery { return jobs(1, 2, "self-hosted", "windows") }, nil, 0,
			outcomeWant{metric: scaleup.MetricSkipped + "/no_pool", fleetCalls: 0}},
		{"repository outside the pool's scope is skipped", func() []queue.Delivery { return jobs(1, 1, "private") }, nil, 0,
			outcomeWant{metric: scaleup.MetricSkipped + "/repository_not_allowed", fleetCalls: 0}},
		{"undecodable message is dropped", func() []queue.Delivery {
			return []queue.Delivery{queue.NewDelivery("junk", "{not json", 1, ""), queue.NewDelivery("empty", `{"job_id":1}`, 1, "")}
		}, nil, 0, outcomeWant{metric: scaleup.MetricSkipped + "/undecodable", fleetCalls: 0}},
		{"spot unavailable falls back to on-demand", func() []queue.Delivery { return jobs(1, 3) },
			func(e *env) { e.ec2.SetSpotUnavailable(true) }, 0,
			outcomeWant{launched: 3, metric: scaleup.MetricFallbacks + "/cpu", fleetCalls: 2}},
		{"no capacity anywhere is retried", func() []queue.Delivery { return jobs(1, 2, "ondemand") },
			func(e *env) { e.ec2.FailPool("c7i.xlarge/subnet-0aaaaaaaa/on-demand", "InsufficientInstanceCapacity") }, 0,
			outcomeWant{retried: 2, metric: ec2.MetricCapacityErrors + "/capacity", fleetCalls: 1}},
		{"no capacity on the last delivery is dead-lettered", func() []queue.Delivery {
			return []queue.Delivery{message(job(1, "ondemand"), 5)}
		}, func(e *env) { e.ec2.FailPool("c7i.xlarge/subnet-0aaaaaaaa/on-demand", "InsufficientInstanceCapacity") }, 5,
			outcomeWant{dead: 1, deadReason: "launch_capacity", fleetCalls: 1}},
		{"zero vCPU quota is dead-lettered at once", func() []queue.Delivery { return jobs(1, 2, "ondemand") },
			func(e *env) { e.ec2.FailPool("c7i.xlarge/subnet-0aaaaaaaa/on-demand", "VcpuLimitExceeded") }, 0,
			outcomeWant{dead: 2, deadReason: "launch_quota", metric: ec2.MetricCapacityErrors + "/quota", fleetCalls: 1}},
		{"zero quota for one type and no capacity for the other is retried", func() []queue.Delivery { return jobs(1, 2, "mixed") },
			func(e *env) {
				e.ec2.FailPool("g6.xlarge/subnet-0aaaaaaaa/on-demand", "VcpuLimitExceeded")
				e.ec2.FailPool("c7i.xlarge/subnet-0aaaaaaaa/on-demand", "InsufficientInstanceCapacity")
			}, 0,
			outcomeWant{retried: 2, metric: ec2.MetricCapacityErrors + "/quota", fleetCalls: 1}},
		{"a type with zero quota does not stop the others", func() []queue.Delivery { return jobs(1, 2, "mixed") },
			func(e *env) { e.ec2.FailPool("g6.xlarge/subnet-0aaaaaaaa/on-demand", "VcpuLimitExceeded") }, 0,
			outcomeWant{launched: 2, metric: ec2.MetricCapacityErrors + "/quota", fleetCalls: 1}},
		{"throttled fleet call is retried", func() []queue.Delivery { return jobs(1, 2) },
			func(e *env) { e.ec2.ThrottleNext(1) }, 0, outcomeWant{retried: 2, fleetCalls: 1}},
		{"missing launch template is dead-lettered", func() []queue.Delivery { return jobs(1, 1) },
			func(e *env) { e.ec2.SetLaunchTemplates("skiff-other") }, 0, outcomeWant{dead: 1, deadReason: "launch_invalid", fleetCalls: 1}},
		{"partial fill retries the rest", func() []queue.Delivery { return jobs(1, 5, "ondemand") },
			func(e *env) { e.ec2.SetFillLimit(3) }, 0, outcomeWant{launched: 3, retried: 2, fleetCalls: 1}},
		{"pool at max runners retries the rest", func() []queue.Delivery { return jobs(1, 3, "small") }, nil, 0,
			outcomeWant{launched: 2, retried: 1, metric: scaleup.MetricRetried + "/max_runners", fleetCalls: 1}},
		{"GitHub errors are retried without launching", func() []queue.Delivery { return jobs(1, 2) },
			func(e *env) { e.sim.SetFault(ghsim.OpGenerateOrgJITConfig, ghsim.Fault{ErrorRate: 1}) }, 0,
			outcomeWant{retried: 2, metric: scaleup.MetricRetried + "/github", fleetCalls: 0}},
		{"GitHub rate limit is retried", func() []queue.Delivery { return jobs(1, 1) },
			func(e *env) {
				e.sim.SetFault(ghsim.OpGenerateOrgJITConfig, ghsim.Fault{LimitUntil: time.Now().Add(time.Hour), RetryAfter: time.Hour})
			}, 0, outcomeWant{retried: 1, metric: scaleup.MetricRetried + "/github_rate_limited", fleetCalls: 0}},
		{"unknown runner group is dead-lettered", func() []queue.Delivery { return jobs(1, 1) },
			func(e *env) { e.sim.SetFault(ghsim.OpListRunnerGroups, ghsim.Fault{ErrorRate: 1, ErrorStatus: 404}) }, 0,
			outcomeWant{dead: 1, deadReason: "github_refused", fleetCalls: 0}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, func(o *scaleup.Options) { o.MaxAttempts = tc.maxTries })
			if tc.setup != nil {
				tc.setup(e)
			}
			msgs := tc.msgs()
			resp := e.handle(context.Background(), e.svc, msgs...)
			checkOutcome(t, e, resp, tc.want)
			if t.Failed() {
				t.Logf("logs:\n%s", e.logs.String())
			}
		})
	}
}

// TestCapacityMemory: a place that just failed is not asked for by
// the next batch, until the memory ends.
func TestCapacityMemory(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	// No spot anywhere, and no on-demand c7i.large in subnet a: the pool
	// falls back to on-demand and fills from the next override.
	e.ec2.SetSpotUnavailable(true)
	e.ec2.FailPool("c7i.large/subnet-0aaaaaaaa/on-demand", "InsufficientInstanceCapacity")
	if r := e.handle(context.Background(), e.svc, jobs(1, 2)...); len(r.BatchItemFailures) != 0 {
		t.Fatalf("first batch: %+v", r)
	}
	overrides := func(call int) []string {
		var out []string
		for _, o := range e.ec2.CreateFleetInputs()[call].LaunchTemplateConfigs[0].Overrides {
			out = append(out, string(o.InstanceType)+"/"+aws.ToString(o.SubnetId))
		}
		return out
	}
	if got := overrides(0); len(got) != 4 {
		t.Fatalf("first fleet overrides %v, want all 4", got)
	}
	if r := e.handle(context.Background(), e.svc, jobs(10, 2)...); len(r.BatchItemFailures) != 0 {
		t.Fatalf("second batch: %+v", r)
	}
	last := len(e.ec2.CreateFleetInputs()) - 1
	for _, o := range overrides(last) {
		if o == "c7i.large/subnet-0aaaaaaaa" {
			t.Errorf("second fleet still asks for the failed pool: %v", overrides(last))
		}
	}
	e.clock.advance(ec2.DefaultCapacityMemory + time.Second)
	e.handle(context.Background(), e.svc, jobs(20, 1)...)
	if got := overrides(len(e.ec2.CreateFleetInputs()) - 1); len(got) != 4 {
		t.Errorf("after the memory ends, overrides %v, want all 4", got)
	}
}

// TestConcurrentDuplicateDelivery: the same jobs delivered to two
// invocations at once (SQS at-least-once, or the webhook enqueuing twice)
// get one instance each, never two; the loser is retried and then dropped.
func TestConcurrentDuplicateDelivery(t *testing.T) {
	t.Parallel()
	for round := range 20 {
		e := newEnv(t, nil)
		base := int64(1000 * (round + 1))
		first, second := jobs(base, 5), jobs(base, 5) // same jobs, other messages
		resps := e.handleAtOnce(first, second)
		pending := map[string]queue.Delivery{}
		for i, msgs := range [][]queue.Delivery{first, second} {
			f := failed(resps[i])
			for _, m := range msgs {
				if f[m.ID] {
					pending[m.ID] = m
				}
			}
		}
		// What was retried comes back (after the visibility timeout) until
		// every message is acknowledged; no job ever has two instances.
		for try := 0; len(pending) > 0; try++ {
			if try == 5 {
				t.Fatalf("round %d: messages still retried after 5 redeliveries\nlogs:\n%s", round, e.logs.String())
			}
			for job, n := range e.instancesPerJob() {
				if n > 1 {
					t.Fatalf("round %d: job %s has %d instances", round, job, n)
				}
			}
			e.clock.advance(time.Minute)
			var again []queue.Delivery
			for _, m := range pending {
				again = append(again, m)
			}
			f := failed(e.handle(context.Background(), e.svc, again...))
			for id := range pending {
				if !f[id] {
					delete(pending, id)
				}
			}
		}
		if got := len(e.ec2.Instances()); got != 5 {
			t.Errorf("round %d: %d instances for 5 jobs, want 5", round, got)
		}
		for job, n := range e.instancesPerJob() {
			if n != 1 {
				t.Errorf("round %d: job %s has %d instances", round, job, n)
			}
		}
		if got, _ := e.ledger.Live(context.Background(), "cpu"); got != 5 {
			t.Errorf("round %d: runner count %d, want 5", round, got)
		}
	}
}

// TestCrashes: an invocation that dies between steps never causes a second
// live instance for a job, and the job still gets one.
func TestCrashes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		// before: the crash comes before CreateFleet reached EC2.
		before bool
		// registered: the instance got its registration before the crash
		// (else it shuts itself down after the registration timeout).
		registered bool
		wantTotal  int // instances ever launched
	}{
		{"after CreateFleet, instance got no registration", false, false, 2},
		{"after CreateFleet, instance registered and running", false, true, 1},
		{"after the intent, before CreateFleet", true, false, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, nil)
			msg := message(job(77), 1)
			e.crashAtLaunch(msg, tc.before) // dies midway
			launched := e.ec2.Instances()
			for _, in := range launched {
				if tc.registered {
					e.ec2.SetState(in.ID, "running")
				} else {
					e.ec2.SetState(in.ID, "terminated") // no registration: it shut itself down
				}
			}
			// Before the lease ends, a redelivery waits.
			e.clock.advance(time.Minute)
			msg.ReceiveCount = 2
			if r := e.handle(context.Background(), e.svc, msg); len(r.BatchItemFailures) != 1 {
				t.Fatalf("redelivery within the lease: %+v", r)
			}
			// After the lease, the launch is recovered by replaying its plan.
			e.clock.advance(scaleup.DefaultClaimLease)
			msg.ReceiveCount = 3
			if r := e.handle(context.Background(), e.svc, msg); len(r.BatchItemFailures) != 0 {
				t.Fatalf("redelivery after the lease: %+v\nlogs:\n%s", r, e.logs.String())
			}
			if got := len(e.ec2.Live()); got != 1 {
				t.Errorf("%d live instances, want 1", got)
			}
			if got := len(e.ec2.Instances()); got != tc.wantTotal {
				t.Errorf("%d instances launched in all, want %d", got, tc.wantTotal)
			}
			if e.counter.Get(scaleup.MetricRecovered, "cpu") == 0 && !tc.before {
				t.Error("no recovery counted")
			}
			// And a later duplicate changes nothing.
			msg.ReceiveCount = 4
			if r := e.handle(context.Background(), e.svc, msg); len(r.BatchItemFailures) != 0 || len(e.ec2.Live()) != 1 {
				t.Errorf("late duplicate: %+v, %d live", r, len(e.ec2.Live()))
			}
		})
	}
}

// TestCrashBeforeIntent: an invocation that dies after generating the JIT
// configuration but before recording the launch leaves an orphan
// registration (the reaper's) and no instance; the retry launches one.
func TestCrashBeforeIntent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	o := e.opts
	o.Launches = &cancelOnPutLaunch{LaunchMemoryish: e.store, cancel: cancel}
	crashing, err := scaleup.New(o)
	if err != nil {
		t.Fatal(err)
	}
	msg := message(job(88), 1)
	e.handle(ctx, crashing, msg)
	if len(e.ec2.Instances()) != 0 {
		t.Fatal("launched despite dying before the intent")
	}
	e.clock.advance(scaleup.DefaultClaimLease + time.Second)
	if r := e.handle(context.Background(), e.svc, msg); len(r.BatchItemFailures) != 0 {
		t.Fatalf("retry: %+v\nlogs:\n%s", r, e.logs.String())
	}
	if got := len(e.ec2.Live()); got != 1 {
		t.Errorf("%d live instances, want 1", got)
	}
	if got := e.sim.Requests(ghsim.OpGenerateOrgJITConfig); got != 2 {
		t.Errorf("%d JIT configs, want 2 (one orphaned, with another runner name)", got)
	}
}

// checkQueuedEnv is an env whose scale-up checks that a job is still
// queued before launching it, with a run of two queued jobs.
func checkQueuedEnv(t *testing.T) (*env, ghsim.RunInfo) {
	t.Helper()
	e := newEnv(t, func(o *scaleup.Options) { o.CheckQueued = true })
	run, err := e.sim.StartRun(ghsim.RunSpec{Repo: "acme/app", Jobs: []ghsim.JobSpec{
		{Labels: []string{"self-hosted", "linux", "x64"}}, {Labels: []string{"self-hosted", "linux", "x64"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return e, run
}

func TestCheckQueued(t *testing.T) {
	t.Parallel()
	e, run := checkQueuedEnv(t)
	if err := e.sim.CancelJob(run.JobIDs[0]); err != nil {
		t.Fatal(err)
	}
	resp := e.handle(context.Background(), e.svc, message(job(run.JobIDs[0]), 1), message(job(run.JobIDs[1]), 1))
	if len(resp.BatchItemFailures) != 0 || len(e.ec2.Live()) != 1 || e.counter.Get(scaleup.MetricSkipped, "not_queued") != 1 {
		t.Errorf("failures %v, %d live, skipped %v", resp.BatchItemFailures, len(e.ec2.Live()), e.counter.Snapshot())
	}
	// GitHub failing the check does not stop the launch (fails open).
	e.sim.SetFault(ghsim.OpGetJob, ghsim.Fault{ErrorRate: 1, ErrorStatus: 500})
	resp = e.handle(context.Background(), e.svc, message(job(5), 1))
	if len(resp.BatchItemFailures) != 0 || len(e.ec2.Live()) != 2 || !strings.Contains(e.logs.String(), "launching anyway") {
		t.Errorf("fail-open: failures %v, %d live", resp.BatchItemFailures, len(e.ec2.Live()))
	}
}

// TestCheckQueuedAcquiredAgain: a job a scale-set listener just acquired
// is known queued, so its first delivery launches without asking GitHub;
// the same message delivered again (the first try failed, or the listener's
// acknowledgement did and it sent the job twice) may be stale — the job may
// be running on another runner by then — and is checked like any other.
func TestCheckQueuedAcquiredAgain(t *testing.T) {
	t.Parallel()
	e, run := checkQueuedEnv(t)
	acquired := func(id int64) queue.Job { j := job(id); j.Acquired = true; return j }
	before := e.sim.Requests(ghsim.OpGetJob)
	if r := e.handle(context.Background(), e.svc, message(acquired(run.JobIDs[0]), 1)); len(r.BatchItemFailures) != 0 || len(e.ec2.Live()) != 1 {
		t.Fatalf("a first delivery of an acquired job: %+v, %d live", r, len(e.ec2.Live()))
	}
	if got := e.sim.Requests(ghsim.OpGetJob) - before; got != 0 {
		t.Errorf("%d GitHub job checks for an acquired job's first delivery, want 0", got)
	}
	if err := e.sim.CancelJob(run.JobIDs[1]); err != nil {
		t.Fatal(err)
	}
	if r := e.handle(context.Background(), e.svc, message(acquired(run.JobIDs[1]), 2)); len(r.BatchItemFailures) != 0 ||
		len(e.ec2.Live()) != 1 || e.counter.Get(scaleup.MetricSkipped, "not_queued") != 1 {
		t.Errorf("an acquired job delivered again after it ended: %+v, %d live, skipped %v; want it checked and skipped",
			r, len(e.ec2.Live()), e.counter.Snapshot())
	}
}

// TestCheckQueuedOnlyBeforeLaunching: the check costs a GitHub call, so it
// is made for jobs about to launch, not for jobs retried because their pool
// is full — a burst retried every few seconds would otherwise spend the
// installation's hourly GitHub budget on checks.
func TestCheckQueuedOnlyBeforeLaunching(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *scaleup.Options) { o.CheckQueued = true })
	ctx := context.Background()
	if r := e.handle(ctx, e.svc, jobs(1, 2, "small")...); len(r.BatchItemFailures) != 0 {
		t.Fatalf("filling the pool: %+v", r)
	}
	before := e.sim.Requests(ghsim.OpGetJob)
	for i := range 4 {
		if r := e.handle(ctx, e.svc, message(job(10, "small"), i+1)); len(r.BatchItemFailures) != 1 {
			t.Fatalf("full pool, delivery %d: %+v, want a retry", i+1, r)
		}
	}
	if got := e.sim.Requests(ghsim.OpGetJob) - before; got != 0 {
		t.Errorf("%d GitHub job checks for a job retried 4 times on a full pool, want 0", got)
	}
	if got := e.counter.Get(scaleup.MetricRetried, "max_runners"); got != 4 {
		t.Errorf("%v retries for max_runners, want 4", got)
	}
}

func TestTokenMode(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	for b := range 3 {
		if r := e.handle(context.Background(), e.svc, jobs(int64(100*(b+1)), 10, tokenLabels...)...); len(r.BatchItemFailures) != 0 {
			t.Fatalf("batch %d: %+v\nlogs:\n%s", b, r, e.logs.String())
		}
	}
	if got := e.sim.Requests(ghsim.OpCreateOrgRegToken); got != 1 {
		t.Errorf("%d registration token calls for 30 runners, want 1", got)
	}
	if got := e.sim.Requests(ghsim.OpGenerateOrgJITConfig); got != 0 {
		t.Errorf("%d JIT calls in token mode", got)
	}
	for _, r := range e.regs.all() {
		if r.Mode != userdata.ModeToken || r.URL != "https://github.com/acme" || r.Token == "" ||
			strings.Join(r.Labels, ",") != "self-hosted,linux,x64,tokens" || r.RunnerGroup != "skiff-tokens" {
			t.Errorf("registration %+v", r)
		}
	}
}

// TestSecretsNeverLogged: no JIT configuration, registration token or
// installation token reaches a log line or a metric, in either mode and on
// failure paths.
func TestSecretsNeverLogged(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"jit", "token"} {
		labels := []string{"self-hosted", "linux", "x64"}
		if mode == "token" {
			labels = tokenLabels
		}
		e := newEnv(t, nil)
		e.handle(context.Background(), e.svc, jobs(1, 5, labels...)...)
		e.regs.fail = errInjected // registration writes fail: secrets in hand on an error path
		e.handle(context.Background(), e.svc, jobs(100, 3, labels...)...)
		secrets := e.sim.Secrets()
		if len(secrets) == 0 {
			t.Fatal("the simulator issued no secrets")
		}
		logs := e.logs.String()
		if strings.Contains(logs, secretPrefix) {
			t.Errorf("mode %s: a credential reached the logs", mode)
		}
		for _, s := range secrets {
			if len(s) > 8 && strings.Contains(logs, s) {
				t.Errorf("mode %s: secret %.6s… logged", mode, s)
			}
		}
		for _, r := range e.regs.all() {
			if !strings.Contains(r.String(), "registration{") || strings.Contains(r.String(), secretPrefix) {
				t.Errorf("Registration.String leaks: %s", r.String())
			}
		}
		if !strings.Contains(logs, "terminating its instance") {
			t.Errorf("mode %s: the failure path was not exercised", mode)
		}
	}
}

// TestPerJobTags: a fleet of one job carries the job's own tags at creation
// (no CreateTags); a fleet of several is tagged per instance after the
// launch, and a tagging failure launches the runners all the same.
func TestPerJobTags(t *testing.T) {
	t.Parallel()
	t.Run("one job: tags at creation", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, nil)
		if r := e.handle(context.Background(), e.svc, message(job(4711), 1)); len(r.BatchItemFailures) != 0 {
			t.Fatalf("failures %+v", r.BatchItemFailures)
		}
		in := e.ec2.CreateFleetInputs()[0]
		tags := map[string]string{}
		for _, ts := range in.TagSpecifications {
			for _, tg := range ts.Tags {
				tags[aws.ToString(tg.Key)] = aws.ToString(tg.Value)
			}
		}
		if tags["skiff:job-id"] != "4711" || tags["skiff:run-id"] != "472" || tags["skiff:runner-name"] != "skiff-4711-1" ||
			tags["skiff:repository"] != "acme/app" || tags["skiff:owner"] != "acme" || tags["skiff:pool"] != "cpu" {
			t.Errorf("tags at creation %v", tags)
		}
		if n := e.ec2.Calls("CreateTags"); n != 0 {
			t.Errorf("%d CreateTags calls for a fleet of one", n)
		}
	})
	t.Run("several jobs: tagging failures are counted, not fatal", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, nil)
		e.ec2.FailOp("CreateTags", "RequestLimitExceeded", "RequestLimitExceeded")
		e.ec2.SetEventualConsistency(1) // every id unknown to its first CreateTags: retried
		r := e.handle(context.Background(), e.svc, jobs(500, 4)...)
		if len(r.BatchItemFailures) != 0 || len(e.ec2.Live()) != 4 || e.counter.Get(scaleup.MetricLaunched, "cpu") != 4 {
			t.Fatalf("failures %+v, %d live", r.BatchItemFailures, len(e.ec2.Live()))
		}
		if got := e.counter.Get(ec2.MetricTagFailures, "throttled"); got != 2 {
			t.Errorf("tag failures counted %d, want 2: %v", got, e.counter.Snapshot())
		}
		tagged := 0
		for _, in := range e.ec2.Live() {
			if in.Tags["skiff:job-id"] != "" {
				tagged++
			}
			if in.Tags["skiff:job-ids"] == "" {
				t.Errorf("instance %s lost its fleet tags: %v", in.ID, in.Tags)
			}
		}
		if tagged != 2 || !strings.Contains(e.logs.String(), "tagging the runner's instance") {
			t.Errorf("%d instances tagged, want 2 (two throttled)", tagged)
		}
	})
}

// TestQuotaReachesTheOperator: a zero quota is dead-lettered at once with
// EC2's own words, and logged once per fleet and purchase option with the
// name of the quota to raise, not once per place.
func TestQuotaReachesTheOperator(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	for _, typ := range []string{"c7i.large", "m7i.large"} {
		for _, sub := range []string{"subnet-0aaaaaaaa", "subnet-0bbbbbbbb"} {
			for _, spot := range []bool{true, false} {
				e.ec2.FailPool(ec2.PlaceKey(typ, sub, spot), "VcpuLimitExceeded")
			}
		}
	}
	e.handle(context.Background(), e.svc, jobs(1, 3)...)
	dead := e.dlq.DeadLetters()
	if len(dead) != 3 {
		t.Fatalf("dead letters %+v, want 3", dead)
	}
	for _, d := range dead {
		if d.Reason != "launch_quota" || !strings.Contains(d.Detail, "VcpuLimitExceeded") || !strings.Contains(d.Detail, "limit of 0") ||
			!strings.Contains(d.Detail, "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances") {
			t.Errorf("dead letter %+v", d)
		}
	}
	logs := e.logs.String()
	if n := strings.Count(logs, "EC2 quota exceeded"); n != 2 {
		t.Errorf("%d quota log lines, want 2 (spot and on-demand fleets)\n%s", n, logs)
	}
	for _, want := range []string{"All Standard (A, C, D, H, I, M, R, T, Z) Spot Instance Requests",
		"Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances", `"instance_types":["c7i.large","m7i.large"]`} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %s", want)
		}
	}
}
