package decide_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/scaledown/decide"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func ago(d time.Duration) time.Time { return t0.Add(-d) }

func inst(id, runner string, launched time.Duration, state provider.State, tags ...string) provider.Instance {
	in := provider.Instance{ID: id, Pool: "cpu", State: state, LaunchedAt: ago(launched), Tags: map[string]string{
		names.TagManaged: names.ManagedValue, names.TagPool: "cpu", names.TagRunnerName: runner}}
	for i := 0; i+1 < len(tags); i += 2 {
		in.Tags[tags[i]] = tags[i+1]
	}
	return in
}

func rec(name, id string, st ledger.State, launched time.Duration, mod ...func(*ledger.Runner)) ledger.Runner {
	r := ledger.Runner{Name: name, Pool: "cpu", JobID: 100, RunID: 7, Attempt: 1, State: st, InstanceID: id,
		ReservedAt: ago(launched + time.Second), LaunchedAt: ago(launched)}
	for _, m := range mod {
		m(&r)
	}
	return r
}

func registered(at time.Duration) func(*ledger.Runner) {
	return func(r *ledger.Runner) { r.RegisteredAt = ago(at) }
}

func ranOwn(r *ledger.Runner) { r.BusyJob = r.JobID; r.StartedAt = ago(time.Minute) }

func stamp(d time.Duration) string { return ago(d).Format(time.RFC3339) }

// summary renders a decision compactly: "rule:runner/instance[steps]" for
// actions, "+runner>state" for advances ("+runner>launched(instance)" for
// a link), "=runner" for kept.
func summary(d decide.Decision) string {
	var out []string
	for _, a := range d.Advances {
		if a.To == ledger.StateLaunched {
			out = append(out, fmt.Sprintf("+%s>%s(%s)", a.Runner, a.To, a.Launch.InstanceID))
			continue
		}
		out = append(out, fmt.Sprintf("+%s>%s", a.Runner, a.To))
	}
	for _, a := range d.Actions {
		steps := ""
		for _, s := range []struct {
			on bool
			c  string
		}{{a.Delete, "D"}, {a.ConfirmAbsent, "C"}, {a.ConfirmUnrecorded, "U"}, {a.Terminate, "T"}, {a.Strand, "S"}, {a.End, "E"}, {a.Interrupted, "I"}} {
			if s.on {
				steps += s.c
			}
		}
		out = append(out, fmt.Sprintf("%s:%s/%s[%s]", a.Rule, a.Runner, a.InstanceID, steps))
	}
	for _, k := range d.Kept {
		out = append(out, "="+k.Runner)
	}
	return strings.Join(out, " ")
}

// r1 is the runner of the single-runner cases.
const r1 = "skiff-100-1"

// decideCase is one world of instances, GitHub runners and records (a
// listing failed when partial) under policy, and the summary of the
// decision it must get.
type decideCase struct {
	name      string
	instances []provider.Instance
	runners   []decide.GitHubRunner
	ledger    []ledger.Runner
	partial   bool // a listing failed
	policy    decide.Policy
	want      string
}

// runDecide decides each case at t0 and compares the summary; every action
// must give its reason.
func runDecide(t *testing.T, cases []decideCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			d := decide.Decide(decide.Inputs{Now: t0, Instances: c.instances, Runners: c.runners, Ledger: c.ledger,
				InstancesComplete: !c.partial, RunnersComplete: !c.partial, Policy: map[string]decide.Policy{"cpu": c.policy}})
			if got := summary(d); got != c.want {
				t.Errorf("got  %q\nwant %q", got, c.want)
			}
			for _, a := range d.Actions {
				if a.Reason == "" {
					t.Errorf("action %s has no reason", a.Rule)
				}
			}
		})
	}
}

// TestDecideBootAndIdle: runners that never register, and idle ones.
func TestDecideBootAndIdle(t *testing.T) {
	t.Parallel()
	runDecide(t, []decideCase{
		{name: "booting within the boot timeout: nothing",
			instances: []provider.Instance{inst("i-1", r1, 3*time.Minute, provider.Running)},
			runners:   []decide.GitHubRunner{{ID: 1, Name: r1}},
			ledger:    []ledger.Runner{rec(r1, "i-1", ledger.StateLaunched, 3*time.Minute)},
			want:      ""},
		{name: "never registered after the boot timeout: delete its JIT runner, terminate, strand check, end",
			instances: []provider.Instance{inst("i-1", r1, 11*time.Minute, provider.Running)},
			runners:   []decide.GitHubRunner{{ID: 1, Name: r1}},
			ledger:    []ledger.Runner{rec(r1, "i-1", ledger.StateLaunched, 11*time.Minute)},
			want:      "boot_timeout:skiff-100-1/i-1[DTSE]"},
		{name: "not registered exactly the boot timeout after launch: terminated at the timeout, not a pass later",
			instances: []provider.Instance{inst("i-1", r1, 10*time.Minute, provider.Running)},
			runners:   []decide.GitHubRunner{{ID: 1, Name: r1}},
			ledger:    []ledger.Runner{rec(r1, "i-1", ledger.StateLaunched, 10*time.Minute)},
			want:      "boot_timeout:skiff-100-1/i-1[DTSE]"},
		{name: "not registered a second short of the boot timeout: nothing",
			instances: []provider.Instance{inst("i-1", r1, 10*time.Minute-time.Second, provider.Running)},
			runners:   []decide.GitHubRunner{{ID: 1, Name: r1}},
			ledger:    []ledger.Runner{rec(r1, "i-1", ledger.StateLaunched, 10*time.Minute-time.Second)},
			want:      ""},
		{name: "registered on GitHub now: the ledger learns it",
			instances: []provider.Instance{inst("i-1", r1, 2*time.Minute, provider.Running)},
			runners:   []decide.GitHubRunner{{ID: 1, Name: r1, Online: true}},
			ledger:    []ledger.Runner{rec(r1, "i-1", ledger.StateLaunched, 2*time.Minute)},
			want:      "+skiff-100-1>registered"},
		{name: "idle within the idle timeout: nothing",
			instances: []provider.Instance{inst("i-1", r1, 12*time.Minute, provider.Running)},
			runners:   []decide.GitHubRunner{{ID: 1, Name: r1, Online: true}},
			ledger:    []ledger.Runner{rec(r1, "i-1", ledger.StateRegistered, 12*time.Minute, registered(9*time.Minute))},
			want:      ""},
		{name: "idle past the idle timeout: delete, terminate, strand check, end",
			instances: []provider.Instance{inst("i-1", r1, 14*time.Minute, provider.Running)},
			runners:   []decide.GitHubRunner{{ID: 1, Name: r1, Online: true}},
			ledger:    []ledger.Runner{rec(r1, "i-1", ledger.StateRegistered, 14*time.Minute, registered(11*time.Minute))},
			want:      "idle:skiff-100-1/i-1[DTSE]"},
		{name: "idle exactly the idle timeout: reaped at the timeout, not a pass later",
			instances: []provider.Instance{inst("i-1", r1, 12*time.Minute, provider.Running)},
			runners:   []decide.GitHubRunner{{ID: 1, Name: r1, Online: true}},
			ledger:    []ledger.Runner{rec(r1, "i-1", ledger.StateRegistered, 12*time.Minute, registered(10*time.Minute))},
			want:      "idle:skiff-100-1/i-1[DTSE]"},
		{name: "idle a second short of the idle timeout: nothing",
			instances: []provider.Instance{inst("i-1", r1, 12*time.Minute, provider.Running)},
			runners:   []decide.GitHubRunner{{ID: 1, Name: r1, Online: true}},
			ledger:    []ledger.Runner{rec(r1, "i-1", ledger.StateRegistered, 12*time.Minute, registered(10*time.Minute-time.Second))},
			want:      ""},
		{name: "idle timeout is the pool's",
			instances: []provider.Instance{inst("i-1", r1, 14*time.Minute, provider.Running)},
			runners:   []decide.GitHubRunner{{ID: 1, Name: r1, Online: true}},
			ledger:    []ledger.Runner{rec(r1, "i-1", ledger.StateRegistered, 14*time.Minute, registered(11*time.Minute))},
			policy:    decide.Policy{IdleTimeout: 20 * time.Minute},
			want:      ""},
	})
}

// TestDecideBusy: busy runners (by GitHub, the ledger or the hooks' tags),
// completed jobs and the lifetime cap.
func TestDecideBusy(t *testing.T) {
	t.Parallel()
	runDecide(t, []decideCase{
		{name: "GitHub says busy: kept, and the ledger learns the job started",
			instances: []provider.Instance{inst("i-1", r1, 30*time.Minute, provider.Running)},
			runners:   []decide.GitHubRunner{{ID: 1, Name: r1, Online: true, Busy: true}},
			ledger:    []ledger.Runner{rec(r1, "i-1", ledger.StateRegistered, 30*time.Minute, registered(28*time.Minute))},
			want:      "+skiff-100-1>job_started =skiff-100-1"},
		{name: "busy flag lags (reads false) but the ledger saw the job start: kept",
			instances: []provider.Instance{inst("i-1", r1, 30*time.Minute, provider.Running)},
			runners:   []decide.GitHubRunner{{ID: 1, Name: r1, Online: true}},
			ledger:    []ledger.Runner{rec(r1, "i-1", ledger.StateJobStarted, 30*time.Minute, registered(28*time.Minute), ranOwn)},
			want:      "=skiff-100-1"},
		{name: "busy flag lags, webhook lost, the hook's tag says started: kept",
			instances: []provider.Instance{inst("i-1", r1, 30*time.Minute, provider.Running, names.TagJobStarted, stamp(10*time.Second))},
			runners:   []decide.GitHubRunner{{ID: 1, Name: r1, Online: true}},
			ledger:    []ledger.Runner{rec(r1, "i-1", ledger.StateRegistered, 30*time.Minute, registered(28*time.Minute))},
			want:      "+skiff-100-1>job_started =skiff-100-1"},
		{name: "busy by the ledger even past the idle timeout and with the runner missing from GitHub",
			instances: []provider.Instance{inst("i-1", r1, 30*time.Minute, provider.Running)},
			ledger:    []ledger.Runner{rec(r1, "i-1", ledger.StateJobStarted, 30*time.Minute, registered(28*time.Minute), ranOwn)},
			want:      "=skiff-100-1"},
		{name: "job completed (hook tag, past the grace): terminate, end; no strand check (it ran its own job)",
			instances: []provider.Instance{inst("i-1", r1, 30*time.Minute, provider.Running,
				names.TagJobStarted, stamp(10*time.Minute), names.TagJobCompleted, stamp(40*time.Second))},
			ledger: []ledger.Runner{rec(r1, "i-1", ledger.StateJobStarted, 30*time.Minute, registered(28*time.Minute), ranOwn)},
			want:   "+skiff-100-1>job_completed job_completed:skiff-100-1/i-1[TE]"},
		{name: "job completed by the hook only 10 s ago: within the grace, nothing yet",
			instances: []provider.Instance{inst("i-1", r1, 30*time.Minute, provider.Running,
				names.TagJobStarted, stamp(10*time.Minute), names.TagJobCompleted, stamp(10*time.Second))},
			ledger: []ledger.Runner{rec(r1, "i-1", ledger.StateJobStarted, 30*time.Minute, registered(28*time.Minute), ranOwn)},
			want:   "+skiff-100-1>job_completed"},
		{name: "job completed (webhook) 10 s ago: within the grace, the runner is still exiting on its own",
			instances: []provider.Instance{inst("i-1", r1, 30*time.Minute, provider.Running)},
			runners:   []decide.GitHubRunner{{ID: 1, Name: r1, Online: true}},
			ledger: []ledger.Runner{rec(r1, "i-1", ledger.StateJobCompleted, 30*time.Minute, registered(28*time.Minute), ranOwn,
				func(r *ledger.Runner) { r.CompletedAt = ago(10 * time.Second) })},
			want: ""},
		{name: "job completed (webhook) 40 s ago, past the grace: terminate, end",
			instances: []provider.Instance{inst("i-1", r1, 30*time.Minute, provider.Running)},
			runners:   []decide.GitHubRunner{{ID: 1, Name: r1, Online: true}},
			ledger: []ledger.Runner{rec(r1, "i-1", ledger.StateJobCompleted, 30*time.Minute, registered(28*time.Minute), ranOwn,
				func(r *ledger.Runner) { r.CompletedAt = ago(40 * time.Second) })},
			want: "job_completed:skiff-100-1/i-1[TE]"},
		{name: "job completed (webhook) but GitHub still says busy: kept",
			instances: []provider.Instance{inst("i-1", r1, 30*time.Minute, provider.Running)},
			runners:   []decide.GitHubRunner{{ID: 1, Name: r1, Online: true, Busy: true}},
			ledger: []ledger.Runner{rec(r1, "i-1", ledger.StateJobCompleted, 30*time.Minute, registered(28*time.Minute), ranOwn,
				func(r *ledger.Runner) { r.CompletedAt = ago(20 * time.Second) })},
			want: "=skiff-100-1"},
		{name: "over the maximum lifetime: terminated from outside even while busy",
			instances: []provider.Instance{inst("i-1", r1, 6*time.Hour+6*time.Minute, provider.Running)},
			runners:   []decide.GitHubRunner{{ID: 1, Name: r1, Online: true, Busy: true}},
			ledger:    []ledger.Runner{rec(r1, "i-1", ledger.StateJobStarted, 6*time.Hour+6*time.Minute, ranOwn)},
			want:      "max_lifetime:skiff-100-1/i-1[TE]"},
		{name: "within the lifetime slack: the instance's own watchdog goes first",
			instances: []provider.Instance{inst("i-1", r1, 6*time.Hour+time.Minute, provider.Running)},
			runners:   []decide.GitHubRunner{{ID: 1, Name: r1, Online: true, Busy: true}},
			ledger:    []ledger.Runner{rec(r1, "i-1", ledger.StateJobStarted, 6*time.Hour+time.Minute, ranOwn)},
			want:      "=skiff-100-1"},
	})
}

// TestDecideGone: instances and runners that went away, stale reservations
// and interrupted spot runners.
func TestDecideGone(t *testing.T) {
	t.Parallel()
	runDecide(t, []decideCase{
		{name: "instance terminated: end the record; its own job never ran, so strand check",
			instances: []provider.Instance{inst("i-1", r1, 5*time.Minute, provider.Terminated)},
			ledger:    []ledger.Runner{rec(r1, "i-1", ledger.StateLaunched, 5*time.Minute)},
			want:      "instance_gone:skiff-100-1/i-1[SE]"},
		{name: "instance missing from a complete listing: end",
			ledger: []ledger.Runner{rec(r1, "i-1", ledger.StateJobCompleted, 5*time.Minute, ranOwn)},
			want:   "instance_gone:skiff-100-1/i-1[E]"},
		{name: "instance missing but launched a moment ago: not yet listed, nothing",
			ledger: []ledger.Runner{rec(r1, "i-1", ledger.StateLaunched, 30*time.Second)},
			want:   ""},
		{name: "instance missing from a failed listing: nothing",
			ledger:  []ledger.Runner{rec(r1, "i-1", ledger.StateLaunched, 5*time.Minute)},
			partial: true,
			want:    ""},
		{name: "instance gone, its offline runner still listed: delete it too",
			ledger:  []ledger.Runner{rec(r1, "i-1", ledger.StateRegistered, 5*time.Minute)},
			runners: []decide.GitHubRunner{{ID: 1, Name: r1}},
			want:    "instance_gone:skiff-100-1/i-1[DSE]"},
		{name: "instance gone, its runner still online: end; GitHub lists it online a while, the ghost rule deletes it once offline",
			ledger:  []ledger.Runner{rec(r1, "i-1", ledger.StateRegistered, 5*time.Minute)},
			runners: []decide.GitHubRunner{{ID: 1, Name: r1, Online: true}},
			want:    "instance_gone:skiff-100-1/i-1[SE]"},
		{name: "runner taken by another job: kept (busy) and its own job checked",
			instances: []provider.Instance{inst("i-1", r1, 5*time.Minute, provider.Running)},
			runners:   []decide.GitHubRunner{{ID: 1, Name: r1, Online: true, Busy: true}},
			ledger: []ledger.Runner{rec(r1, "i-1", ledger.StateJobStarted, 5*time.Minute,
				func(r *ledger.Runner) { r.BusyJob = 999 })},
			want: "taken:skiff-100-1/i-1[S] =skiff-100-1"},
		{name: "registered runner gone from GitHub: confirm, terminate, strand check, end",
			instances: []provider.Instance{inst("i-1", r1, 5*time.Minute, provider.Running)},
			ledger:    []ledger.Runner{rec(r1, "i-1", ledger.StateRegistered, 5*time.Minute, registered(4*time.Minute))},
			want:      "runner_gone:skiff-100-1/i-1[CTSE]"},
		{name: "registered runner missing from an incomplete GitHub listing: nothing",
			instances: []provider.Instance{inst("i-1", r1, 5*time.Minute, provider.Running)},
			ledger:    []ledger.Runner{rec(r1, "i-1", ledger.StateRegistered, 5*time.Minute, registered(4*time.Minute))},
			partial:   true,
			want:      ""},
		{name: "stale reservation: end and strand check",
			ledger: []ledger.Runner{rec(r1, "", ledger.StateReserved, 31*time.Minute)},
			want:   "stale_reservation:skiff-100-1/[SE]"},
		{name: "interrupted spot runner with rerun on: marked for the re-run",
			instances: []provider.Instance{inst("i-1", r1, 20*time.Minute, provider.Terminated)},
			ledger: []ledger.Runner{rec(r1, "i-1", ledger.StateJobStarted, 20*time.Minute, ranOwn,
				func(r *ledger.Runner) { r.InterruptedAt = ago(3 * time.Minute) })},
			policy: decide.Policy{RerunInterrupted: true},
			want:   "instance_gone:skiff-100-1/i-1[EI]"},
		{name: "interrupted spot runner with rerun off: just ended",
			instances: []provider.Instance{inst("i-1", r1, 20*time.Minute, provider.Terminated)},
			ledger: []ledger.Runner{rec(r1, "i-1", ledger.StateJobStarted, 20*time.Minute, ranOwn,
				func(r *ledger.Runner) { r.InterruptedAt = ago(3 * time.Minute) })},
			want: "instance_gone:skiff-100-1/i-1[E]"},
	})
}

// TestDecideGhostsAndOrphans: runners without an instance or record,
// instances without a record, and records that learn their instance.
func TestDecideGhostsAndOrphans(t *testing.T) {
	t.Parallel()
	runDecide(t, []decideCase{
		{name: "ghost: offline skiff runner, no instance, no record: delete",
			runners: []decide.GitHubRunner{{ID: 9, Name: "skiff-555-1", Scope: "acme"}},
			want:    "ghost:skiff-555-1/[DU]"},
		{name: "not ghosts: online, busy, someone else's, or with a live record",
			runners: []decide.GitHubRunner{{ID: 9, Name: "skiff-555-1", Online: true}, {ID: 10, Name: "skiff-556-1", Busy: true},
				{ID: 11, Name: "build-box"}, {ID: 1, Name: r1}},
			ledger: []ledger.Runner{rec(r1, "", ledger.StateReserved, time.Minute)},
			want:   ""},
		{name: "orphan: skiff instance without a record, past the grace: terminate",
			instances: []provider.Instance{inst("i-9", "skiff-777-1", 16*time.Minute, provider.Running)},
			want:      "orphan:skiff-777-1/i-9[T]"},
		{name: "orphan within the grace: nothing (scale-up may still record it)",
			instances: []provider.Instance{inst("i-9", "skiff-777-1", 5*time.Minute, provider.Running)},
			want:      ""},
		{name: "orphan running a job (tag): kept",
			instances: []provider.Instance{inst("i-9", "skiff-777-1", 20*time.Minute, provider.Running, names.TagJobStarted, stamp(time.Minute))},
			want:      "=skiff-777-1"},
		{name: "not an orphan: the record knows it by runner name before the instance id, and records it",
			instances: []provider.Instance{inst("i-9", r1, 20*time.Minute, provider.Running)},
			runners:   []decide.GitHubRunner{{ID: 1, Name: r1, Online: true}},
			ledger:    []ledger.Runner{rec(r1, "", ledger.StateReserved, 20*time.Minute)},
			want:      "+skiff-100-1>launched(i-9) +skiff-100-1>registered"},
		{name: "a busy runner whose record never got its instance: the instance recorded, for the EC2 events",
			instances: []provider.Instance{inst("i-9", r1, 20*time.Minute, provider.Running, names.TagJobStarted, stamp(time.Minute))},
			runners:   []decide.GitHubRunner{{ID: 1, Name: r1, Online: true, Busy: true}},
			ledger:    []ledger.Runner{rec(r1, "", ledger.StateJobStarted, 20*time.Minute, ranOwn)},
			want:      "+skiff-100-1>launched(i-9) =skiff-100-1"},
		{name: "a record that has its instance: no link",
			instances: []provider.Instance{inst("i-1", r1, 20*time.Minute, provider.Running, names.TagJobStarted, stamp(time.Minute))},
			runners:   []decide.GitHubRunner{{ID: 1, Name: r1, Online: true, Busy: true}},
			ledger:    []ledger.Runner{rec(r1, "i-1", ledger.StateJobStarted, 20*time.Minute, ranOwn)},
			want:      "=skiff-100-1"},
	})
}

// TestNeverTerminatesBusy checks the promise over every combination of the
// three busy signals and the states around them: a runner any signal calls
// busy is never terminated nor deleted, short of the lifetime cap.
func TestNeverTerminatesBusy(t *testing.T) {
	t.Parallel()
	for _, ghBusy := range []bool{false, true} {
		for _, st := range []ledger.State{ledger.StateLaunched, ledger.StateRegistered, ledger.StateJobStarted, ledger.StateJobCompleted} {
			for _, tag := range []string{"", "started", "started+completed"} {
				for _, listed := range []bool{false, true} {
					busy := ghBusy || st == ledger.StateJobStarted && tag != "started+completed" || tag == "started"
					if !busy {
						continue
					}
					var tags []string
					if tag != "" {
						tags = append(tags, names.TagJobStarted, stamp(50*time.Minute))
					}
					if tag == "started+completed" {
						tags = append(tags, names.TagJobCompleted, stamp(10*time.Minute))
					}
					var runners []decide.GitHubRunner
					if listed || ghBusy {
						runners = []decide.GitHubRunner{{ID: 1, Name: r1, Online: true, Busy: ghBusy}}
					}
					d := decide.Decide(decide.Inputs{Now: t0, RunnersComplete: true, InstancesComplete: true,
						Instances: []provider.Instance{inst("i-1", r1, 2*time.Hour, provider.Running, tags...)},
						Runners:   runners,
						Ledger:    []ledger.Runner{rec(r1, "i-1", st, 2*time.Hour, registered(110*time.Minute))}})
					for _, a := range d.Actions {
						if a.Terminate || a.Delete {
							t.Errorf("github busy %v, ledger %s, tags %q, listed %v: %s", ghBusy, st, tag, listed, summary(d))
						}
					}
				}
			}
		}
	}
}

func TestGen(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]int{"skiff-100-1": 1, "skiff-100-12": 12, "skiff-100-x": 0, "nodash": 0} {
		if got := decide.Gen(name); got != want {
			t.Errorf("Gen(%q) = %d, want %d", name, got, want)
		}
	}
}
