package local_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/skiffci/skiff/internal/local"
	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/github/scaleset"
	"github.com/skiffci/skiff/pkg/metrics"
	"github.com/skiffci/skiff/pkg/provider"
)

// listenerPools is testenv.CPUPools with the pool's jobs taken from its
// runner scale set.
const listenerPools = testenv.CPUPools + "    jobs: listener\n"

var cpuLabels = []string{"self-hosted", "linux", "x64"}

// waitUntil polls cond (another process's or goroutine's progress) every
// 20 ms until it holds; a failure says cond's last state.
func waitUntil(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	testenv.AwaitState(t, what, 20*time.Millisecond, cond)
}

// scaleSet is acme's one scale set in sim.
func scaleSet(t *testing.T, sim *ghsim.Server) ghsim.ScaleSetState {
	t.Helper()
	ss := sim.ScaleSets("acme")
	if len(ss) != 1 {
		return ghsim.ScaleSetState{}
	}
	return ss[0]
}

// runListenerJobs starts n jobs and waits until each completed, the pool
// counts no runner and the scale set's queue is empty; it returns the job
// ids.
func runListenerJobs(t *testing.T, sim *ghsim.Server, l *local.Local, logs fmt.Stringer, n int) []int64 {
	t.Helper()
	spec := ghsim.RunSpec{Repo: "acme/app"}
	for range n {
		spec.Jobs = append(spec.Jobs, ghsim.JobSpec{Labels: cpuLabels})
	}
	run, err := sim.StartRun(spec)
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "every job completed and acknowledged", func() (bool, string) {
		live, _ := l.Ledger.Live(context.Background(), "cpu")
		ss := scaleSet(t, sim)
		return completedJobs(sim, run.JobIDs) == n && live == 0 && ss.Drained(),
			fmt.Sprintf("%d of %d completed, %d live, scale set %+v\n%s", completedJobs(sim, run.JobIDs), n, live, ss, logs)
	})
	return run.JobIDs
}

// checkOnce: one scale-set registration per runner launched, none through
// the REST JIT endpoint, and no job's offer acknowledged before it was
// acquired.
func checkOnce(t *testing.T, sim *ghsim.Server, l *local.Local) {
	t.Helper()
	all, err := l.Provider.List(context.Background(), provider.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if jit := sim.Requests(ghsim.OpScaleSetJITConfig); jit != len(all) {
		t.Errorf("%d scale-set JIT configurations for %d runners launched", jit, len(all))
	}
	if rest := sim.Requests(ghsim.OpGenerateOrgJITConfig); rest != 0 {
		t.Errorf("%d runners registered through the REST JIT endpoint, want 0", rest)
	}
	if n := sim.AckedUnacquired(); n != 0 {
		t.Errorf("%d jobs' offers were acknowledged before they were acquired", n)
	}
}

// TestLocalListener runs local mode with every pool on the listener: no
// port is opened, the jobs come from the scale set's long poll, each is
// launched once through the scale set's JIT configuration, every message
// is acknowledged, the job records are kept for the usage records, and the
// session is deleted on exit.
func TestLocalListener(t *testing.T) {
	t.Parallel()
	standin := buildStandin(t, t.TempDir())
	sim, pemKey := testenv.GitHubApp(t, "CANARYLISTEN")
	sim.SetScaleSetOptions(ghsim.ScaleSetOptions{Reoffer: time.Hour}) // nothing lost is recovered by an offer again
	l, logs, stop := startLocal(t, sim, pemKey, listenerPools, local.Config{
		RunnerCommand: []string{standin}, RunnerEnv: []string{"SKIFF_STANDIN_DURATION=200ms"}, Limits: map[string]int{"cpu": 2},
	})
	if l.URL() != "" {
		t.Errorf("local mode with every pool on the listener listens on %s", l.URL())
	}
	// Three jobs alike in name and labels, and messages that name them by
	// the service's opaque ids: each must still find a job of its own.
	const n = 3
	ids := runListenerJobs(t, sim, l, logs, n)
	checkOnce(t, sim, l)
	for _, id := range ids {
		j, _ := sim.Job(id)
		if j.Conclusion != "success" {
			t.Errorf("job %d: %+v", id, j)
		}
		rec, err := l.Store.Job(context.Background(), id)
		if err != nil || rec.Pool != "cpu" || rec.Repository != "acme/app" || rec.RunnerName != j.RunnerName || rec.Conclusion != "success" {
			t.Errorf("job %d's record: %+v, %v; want completed on the sim's runner %q", id, rec, err, j.RunnerName)
		}
	}
	if calls := sim.Requests(ghsim.OpListRunJobs); calls < 1 || calls > n {
		t.Errorf("%d reads of the run's jobs for %d jobs, want 1 to %d (at most one per message batch)", calls, n, n)
	}
	if strings.Contains(logs.String(), "cannot be told") {
		t.Errorf("a job message was not matched to its workflow job:\n%s", logs)
	}
	st, err := l.ListenerState()
	if err != nil || len(st) != 1 || st[0].Session == "" || st[0].LastMessageID == 0 || st[0].ScaleSetID != scaleSet(t, sim).ID {
		t.Errorf("the listener's state while running: %+v, %v", st, err)
	}
	if err := stop(); err != nil {
		t.Errorf("Run: %v", err)
	}
	if ss := scaleSet(t, sim); ss.Session != "" {
		t.Errorf("the session outlived skiff local: %+v", ss)
	}
	if st, _ := l.ListenerState(); len(st) != 1 || st[0].Session != "" {
		t.Errorf("the state after exit still names a session: %+v", st)
	}
	if strings.Contains(logs.String(), "CANARYLISTEN") {
		t.Error("a credential reached the log")
	}
}

// TestLocalListenerFaults runs jobs through the listener while the scale
// set's service fails the ways its users see: each job still runs once,
// and no offer is acknowledged before its job was acquired.
func TestLocalListenerFaults(t *testing.T) {
	t.Parallel()
	standin := buildStandin(t, t.TempDir())
	tests := []listenerFault{
		{
			name: "broker drops connections and answers 5xx in runs",
			setup: func(t *testing.T, sim *ghsim.Server, pemKey string) {
				// Two EOFs: Go's transport retries one on a fresh connection.
				sim.SetFault(ghsim.OpGetMessage, ghsim.Fault{FailNext: 2, ErrorRate: 0.3, EOF: true})
				sim.SetFault(ghsim.OpAcquireJobs, ghsim.Fault{FailNext: 1, ErrorRate: 0.3, ErrorStatus: 503})
				sim.SetFault(ghsim.OpDeleteMessage, ghsim.Fault{FailNext: 1, ErrorRate: 0.3})
				sim.SetFault(ghsim.OpScaleSetJITConfig, ghsim.Fault{FailNext: 1, ErrorRate: 0.3, ErrorStatus: 500})
			},
			check: func(t *testing.T, sim *ghsim.Server, logs string) {
				for _, want := range []string{"polling the scale set's messages", "handling a message; it will be delivered again",
					"acknowledging a handled message; it will be delivered again"} {
					if !strings.Contains(logs, want) {
						t.Errorf("no %q in the log: the fault was not exercised", want)
					}
				}
			},
		},
		{
			name: "queue and admin tokens expire",
			opts: ghsim.ScaleSetOptions{QueueTokenTTL: 300 * time.Millisecond, Poll: 500 * time.Millisecond},
			until: func(sim *ghsim.Server) (bool, string) {
				n := sim.Requests(ghsim.OpRefreshSession)
				return n > 0, fmt.Sprintf("%d session refreshes", n)
			},
			check: func(t *testing.T, sim *ghsim.Server, _ string) {
				if n := sim.Requests(ghsim.OpRefreshSession); n == 0 {
					t.Error("the session was never refreshed after its token expired")
				}
				if n := sim.Requests(ghsim.OpCreateSession); n != 1 {
					t.Errorf("%d sessions created, want 1: an expired token is refreshed, not the session replaced", n)
				}
			},
		},
		{
			name:    "a message that cannot be parsed",
			opts:    ghsim.ScaleSetOptions{Reoffer: 500 * time.Millisecond},
			setup:   func(t *testing.T, sim *ghsim.Server, _ string) { sim.CorruptMessages(1) },
			skipped: 3,
			check: func(t *testing.T, sim *ghsim.Server, logs string) {
				if !strings.Contains(logs, "acknowledging a message that cannot be parsed") {
					t.Error("no corrupt message was seen")
				}
			},
		},
		{
			name: "a stale session left by a crash without its state",
			opts: ghsim.ScaleSetOptions{SessionTimeout: time.Second},
			setup: func(t *testing.T, sim *ghsim.Server, pemKey string) {
				// The crashed process's scale set and session, never polled again.
				staleSession(t, sim, pemKey, "lab-cpu")
			},
			check: func(t *testing.T, sim *ghsim.Server, logs string) {
				if !strings.Contains(logs, "another client holds the session") {
					t.Error("the stale session did not refuse the new one")
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			runListenerFault(t, standin, tt)
		})
	}
}

// listenerFault is a fault of the scale set's broker (the simulator's
// options and setup) and what the daemon must make of it.
type listenerFault struct {
	name  string
	opts  ghsim.ScaleSetOptions
	setup func(t *testing.T, sim *ghsim.Server, pemKey string)
	// skipped is how many offers the listener acknowledges without
	// acquiring them on purpose.
	skipped int
	// until, when set, is what the daemon is left running for after
	// the jobs are done: the fault's effect, which the jobs may not
	// have waited for on a fast or a slow machine.
	until func(sim *ghsim.Server) (bool, string)
	check func(t *testing.T, sim *ghsim.Server, logs string)
}

// runListenerFault runs three jobs through local mode's listener (runner
// standin) under the fault tt, and checks one runner per job, registered,
// no offer acknowledged before its job was acquired but tt.skipped, and
// tt.check.
func runListenerFault(t *testing.T, standin string, tt listenerFault) {
	t.Helper()
	sim, pemKey := testenv.GitHubApp(t, "CANARYFAULT")
	if tt.opts.Reoffer == 0 {
		tt.opts.Reoffer = time.Hour // nothing lost is recovered by an offer again
	}
	sim.SetScaleSetOptions(tt.opts)
	if tt.setup != nil {
		tt.setup(t, sim, pemKey)
	}
	l, logs, stop := startLocal(t, sim, pemKey, listenerPools, local.Config{Deployment: "lab",
		RunnerCommand: []string{standin}, RunnerEnv: []string{"SKIFF_STANDIN_DURATION=100ms"}, Limits: map[string]int{"cpu": 2},
	})
	runListenerJobs(t, sim, l, logs, 3)
	if tt.until != nil {
		waitUntil(t, "the fault's effect", func() (bool, string) { return tt.until(sim) })
	}
	sim.ClearFaults()
	all, err := l.Provider.List(context.Background(), provider.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if n := sim.Requests(ghsim.OpScaleSetJITConfig); n < len(all) {
		t.Errorf("%d JIT configurations for %d runners", n, len(all))
	}
	if len(all) != 3 {
		t.Errorf("%d runners launched for 3 jobs", len(all))
	}
	if n := sim.AckedUnacquired(); n != tt.skipped {
		t.Errorf("%d offers acknowledged before their job was acquired, want %d", n, tt.skipped)
	}
	tt.check(t, sim, logs.String())
	if err := stop(); err != nil {
		t.Errorf("Run: %v", err)
	}
}

// staleSession creates in sim the scale set name in acme's group
// skiff-cpu with a session nobody polls: what a process killed before it
// kept the session's id leaves.
func staleSession(t *testing.T, sim *ghsim.Server, pemKey, name string) {
	t.Helper()
	sim.AddRunnerGroup("acme", "skiff-cpu")
	c := scaleSetClient(t, sim, pemKey)
	g, err := c.RunnerGroupByName(t.Context(), "skiff-cpu")
	if err != nil {
		t.Fatal(err)
	}
	ss, err := c.CreateScaleSet(t.Context(), g.ID, name, cpuLabels)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateSession(t.Context(), ss.ID, "crashed"); err != nil {
		t.Fatal(err)
	}
}

// scaleSetClient is a scale-set client of acme on sim, as the App.
func scaleSetClient(t *testing.T, sim *ghsim.Server, pemKey string) *scaleset.Client {
	t.Helper()
	apps, err := github.ParseAppKeys([]int64{testenv.AppID}, pemKey)
	if err != nil {
		t.Fatal(err)
	}
	gh, err := github.NewClient(apps, github.WithBaseURL(sim.URL()))
	if err != nil {
		t.Fatal(err)
	}
	c, err := scaleset.New(scaleset.Options{APIURL: sim.URL(), WebURL: sim.URL(), Org: "acme", Registrar: gh})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestLocalListenerReassigned: a job the scale set took back before a
// runner took it (JobAssigned, then JobCompleted canceled, then a new
// JobAvailable) is acquired and queued again, and its claim launches
// nothing more: the runner launched for it takes it.
func TestLocalListenerReassigned(t *testing.T) {
	t.Parallel()
	sim, pemKey := testenv.GitHubApp(t, "CANARYREASSIGN")
	sim.SetScaleSetOptions(ghsim.ScaleSetOptions{Reoffer: time.Hour})
	// Dry-run runners never connect: the job stays assigned, not started.
	l, logs, stop := startLocal(t, sim, pemKey, listenerPools, local.Config{Provider: "dry-run"})
	run, err := sim.StartRun(ghsim.RunSpec{Repo: "acme/app", Jobs: []ghsim.JobSpec{{Labels: cpuLabels}}})
	if err != nil {
		t.Fatal(err)
	}
	settled := func(queued int) func() (bool, string) {
		return func() (bool, string) {
			depth, _ := l.Queue.Depth(context.Background())
			ss := scaleSet(t, sim)
			n := strings.Count(logs.String(), "job acquired and queued")
			return n == queued && depth == 0 && ss.Drained() && ss.Assigned == 1,
				fmt.Sprintf("queued %d times, queue depth %d, scale set %+v\n%s", n, depth, ss, logs)
		}
	}
	waitUntil(t, "the job acquired and launched", settled(1))
	if !sim.ReassignJob(run.JobIDs[0]) {
		t.Fatal("the simulator did not reassign the job")
	}
	waitUntil(t, "the job acquired and queued again", settled(2))
	if !strings.Contains(logs.String(), "job left the scale set before a runner took it") {
		t.Error("the reassignment's JobCompleted was not seen")
	}
	all, err := l.Provider.List(context.Background(), provider.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if n := sim.Requests(ghsim.OpScaleSetJITConfig); n != 1 || len(all) != 1 {
		t.Errorf("%d JIT configurations and %d runners for one job reassigned once, want 1 and 1", n, len(all))
	}
	if err := stop(); err != nil {
		t.Errorf("Run: %v", err)
	}
}

// TestLocalListenerOneSession: a second skiff on the same scale set (the
// same deployment on another machine) is refused its session and keeps
// trying; the first keeps its session and its jobs.
func TestLocalListenerOneSession(t *testing.T) {
	t.Parallel()
	sim, pemKey := testenv.GitHubApp(t, "CANARYSECOND")
	first, _, _ := startLocal(t, sim, pemKey, listenerPools, local.Config{Provider: "dry-run", Deployment: "lab"})
	var held string
	waitUntil(t, "the first session", func() (bool, string) {
		st, err := first.ListenerState()
		if err == nil && len(st) == 1 {
			held = st[0].Session
		}
		return held != "" && scaleSet(t, sim).Session == held, fmt.Sprintf("%+v %v", st, err)
	})
	second, logs2, _ := startLocal(t, sim, pemKey, listenerPools, local.Config{Provider: "dry-run", Deployment: "lab"})
	waitUntil(t, "the second refused", func() (bool, string) {
		st, err := second.ListenerState()
		return err == nil && len(st) == 1 && strings.Contains(st[0].Error, "another client holds the session"),
			fmt.Sprintf("%+v %v\n%s", st, err, logs2)
	})
	if ss := scaleSet(t, sim); ss.Session != held {
		t.Errorf("the scale set's session is %q, want the first skiff's %q", ss.Session, held)
	}
	if _, err := sim.StartRun(ghsim.RunSpec{Repo: "acme/app", Jobs: []ghsim.JobSpec{{Labels: cpuLabels}}}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the first skiff launched the job", func() (bool, string) {
		all, _ := first.Provider.List(context.Background(), provider.Filter{})
		return len(all) == 1, fmt.Sprintf("%d runners", len(all))
	})
	if all, _ := second.Provider.List(context.Background(), provider.Filter{}); len(all) != 0 {
		t.Errorf("the second skiff launched %d runners", len(all))
	}
}

// TestLocalListenerDesired: the desired count skiff status shows is the
// scale set's totalAssignedJobs, not a count of job messages: with five
// jobs assigned and messages of at most two job messages, it says five.
func TestLocalListenerDesired(t *testing.T) {
	t.Parallel()
	sim, pemKey := testenv.GitHubApp(t, "CANARYDESIRED")
	sim.SetScaleSetOptions(ghsim.ScaleSetOptions{Batch: 2, Reoffer: time.Hour})
	l, logs, _ := startLocal(t, sim, pemKey, listenerPools, local.Config{Provider: "dry-run"})
	spec := ghsim.RunSpec{Repo: "acme/app"}
	for range 5 {
		spec.Jobs = append(spec.Jobs, ghsim.JobSpec{Labels: cpuLabels})
	}
	if _, err := sim.StartRun(spec); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "every job assigned and every message handled", func() (bool, string) {
		ss := scaleSet(t, sim)
		st, _ := l.ListenerState()
		return ss.Assigned == 5 && ss.Drained() && len(st) == 1 && st[0].LastMessageID > 0 && st[0].Desired == 5,
			fmt.Sprintf("scale set %+v, state %+v\n%s", ss, st, logs)
	})
}

// TestLocalModeSlurmListener is TestLocalModeSlurm's run with both pools
// on the listener: no port, the jobs from the scale sets' long polls, each
// run once on a Slurm batch job, one metrics record per job with its
// repository and workflow.
func TestLocalModeSlurmListener(t *testing.T) {
	t.Parallel()
	pools := strings.ReplaceAll(slurmPools, "    maxRunners:", "    jobs: listener\n    maxRunners:")
	ls := startLocalSlurm(t, testenv.SlurmOptions{CPUs: 16, Accounting: true}, pools)
	sim, l, logs := ls.sim, ls.l, ls.logs
	if l.URL() != "" {
		t.Errorf("local mode with every pool on the listener listens on %s", l.URL())
	}
	var jobs []ghsim.JobSpec
	for i := range 4 {
		labels := []string{"cpu"}
		if i == 3 {
			labels = []string{"gpu"}
		}
		jobs = append(jobs, ghsim.JobSpec{Name: fmt.Sprintf("job-%d", i), Labels: labels})
	}
	run, err := sim.StartRun(ghsim.RunSpec{Repo: "acme/app", Jobs: jobs})
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "every job completed, every record written", func() (bool, string) {
		cpu, _ := l.Ledger.Live(context.Background(), "cpu")
		gpu, _ := l.Ledger.Live(context.Background(), "gpu")
		n := 0
		for r, err := range l.MetricsRecords.List(context.Background(), metrics.Filter{}) {
			if err == nil && r.Repository == "acme/app" && r.WorkflowName != "" && r.Trigger == "push" {
				n++
			}
		}
		return completedJobs(sim, run.JobIDs) == 4 && cpu+gpu == 0 && n == 4,
			fmt.Sprintf("%d completed, %d live, %d records\n%s", completedJobs(sim, run.JobIDs), cpu+gpu, n, logs)
	})
	if err := ls.stop(); err != nil {
		t.Errorf("Run: %v", err)
	}
	for _, id := range run.JobIDs {
		if j, _ := sim.Job(id); j.Conclusion != "success" {
			t.Errorf("job %d: %+v", id, j)
		}
	}
	if rest := sim.Requests(ghsim.OpGenerateOrgJITConfig); rest != 0 {
		t.Errorf("%d runners registered through the REST JIT endpoint, want 0", rest)
	}
	if n := sim.AckedUnacquired(); n != 0 {
		t.Errorf("%d offers acknowledged before their job was acquired", n)
	}
	for _, ss := range sim.ScaleSets("acme") {
		if ss.Session != "" || ss.Unacked != 0 {
			t.Errorf("scale set after exit: %+v", ss)
		}
	}
}

// TestIdleListenerLooksForNoDeliveries: a daemon whose pools all take
// their jobs from scale sets spends no GitHub call on failed webhook
// deliveries (it has none of its own); one with a webhook pool looks on
// every pass.
func TestIdleListenerLooksForNoDeliveries(t *testing.T) {
	t.Parallel()
	standin := buildStandin(t, t.TempDir())
	for _, tc := range []struct {
		pools string
		want  bool
	}{{listenerPools, false}, {testenv.CPUPools, true}} {
		sim, pemKey := testenv.GitHubApp(t, "CANARYIDLE")
		l, _, _ := startLocal(t, sim, pemKey, tc.pools, local.Config{RunnerCommand: []string{standin}})
		if _, err := l.ScaleDown.Reconcile(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := sim.Requests(ghsim.OpListHookDeliveries) > 0; got != tc.want {
			t.Errorf("webhook pools %v: looked for failed deliveries %v, want %v", tc.pools != listenerPools, got, tc.want)
		}
	}
}

// TestLocalListenerNumericJobIDs: with the workflow job's number as the
// messages' jobId (older services; github.com sends its own opaque ids,
// the simulator's default, which every other listener test runs with),
// each job is launched once and recorded under that id with its runner and
// conclusion, and the run's jobs are never read.
func TestLocalListenerNumericJobIDs(t *testing.T) {
	t.Parallel()
	standin := buildStandin(t, t.TempDir())
	sim, pemKey := testenv.GitHubApp(t, "CANARYNUMERIC")
	sim.SetScaleSetOptions(ghsim.ScaleSetOptions{Reoffer: time.Hour, NumericJobIDs: true})
	// Every poll answered late, as on a loaded machine: a job's end waits
	// for the next poll, and the test must wait for it too (it waited only
	// for the delivered messages, and read a job's record before its end).
	sim.SetFault(ghsim.OpGetMessage, ghsim.Fault{Latency: 300 * time.Millisecond})
	l, logs, stop := startLocal(t, sim, pemKey, listenerPools, local.Config{
		RunnerCommand: []string{standin}, RunnerEnv: []string{"SKIFF_STANDIN_DURATION=200ms"}, Limits: map[string]int{"cpu": 2},
	})
	const n = 4
	ids := runListenerJobs(t, sim, l, logs, n)
	checkOnce(t, sim, l)
	for _, id := range ids {
		j, _ := sim.Job(id)
		rec, err := l.Store.Job(context.Background(), id)
		if err != nil || rec.Conclusion != "success" || rec.RunnerName == "" || rec.RunnerName != j.RunnerName {
			t.Errorf("job %d's record: %+v, %v; want completed on the sim's runner %q", id, rec, err, j.RunnerName)
		}
	}
	if err := stop(); err != nil {
		t.Errorf("Run: %v", err)
	}
	if calls := sim.Requests(ghsim.OpListRunJobs); calls != 0 {
		t.Errorf("%d reads of the run's jobs, want none: the messages name the workflow jobs", calls)
	}
}
