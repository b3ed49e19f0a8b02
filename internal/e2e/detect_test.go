package e2e_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/userdata"
	"github.com/skiffci/skiff/pkg/webhook"
)

// ossPoolsYAML: one pool for public and private repositories that refuses
// pull requests from forks — the case no runner group can express: a
// fork's pull request of an admitted public repository shares the
// repository's group.
const ossPoolsYAML = ec2Defaults + `pools:
  - name: oss
    labels: [self-hosted, linux, x64]
    visibility: [public, private]
    instanceTypes: [c7i.large]
`

// keptRegs is the runners' registration table that keeps each
// registration, so that the test can boot the runner: connect it to the
// simulator with its JIT configuration.
type keptRegs struct {
	mu   sync.Mutex
	regs []userdata.Registration
}

func (k *keptRegs) Put(ctx context.Context, reg userdata.Registration) error {
	if err := reg.Validate(); err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.regs = append(k.regs, reg)
	return ctx.Err()
}

func (k *keptRegs) all() []userdata.Registration {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]userdata.Registration(nil), k.regs...)
}

// TestRefusedJobOnSkiffRunner: a job skiff refuses stays queued on GitHub,
// and GitHub gives the oldest queued job to an idle runner whose labels
// cover it and whose runner group admits its repository. With no runner
// group enforcement — today's simulator dispatches by labels and owner
// only, exactly GitHub with group enforcement planted out — the runner
// skiff launches for an admitted job takes the refused job queued before
// it. The webhook learns it from the job's in_progress event (the runner's
// name, the ledger's record of its pool) and raises a security event:
// logged, counted, recorded for skiff status. An admitted job on its own
// runner raises nothing.
func TestRefusedJobOnSkiffRunner(t *testing.T) {
	t.Parallel()
	labels := []string{"self-hosted", "linux", "x64"}
	cases := []struct {
		name string
		// refused starts first: a run whose job skiff refuses (zero: none).
		refused    ghsim.RunSpec
		hookStatus int // the webhook's answer to the refused job's queued event
		reason     string
	}{
		{name: "a fork's pull request of an admitted public repository",
			refused: ghsim.RunSpec{Repo: "acme/site", Event: "pull_request", HeadRepo: "mallory/site", Actor: "mallory",
				Jobs: []ghsim.JobSpec{{Labels: labels}}},
			hookStatus: 200, reason: "fork_pull_request"},
		{name: "a repository outside the allow-list",
			refused:    ghsim.RunSpec{Repo: "acme/secret", Event: "push", Jobs: []ghsim.JobSpec{{Labels: labels}}},
			hookStatus: 403, reason: "forbidden"},
		{name: "an admitted job alone"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			regs := &keptRegs{}
			s := newStackWith(t, stackOptions{pools: ossPoolsYAML, regs: regs, allow: []string{"acme/app", "acme/site"}})
			// The simulator enforces runner groups by default; this test
			// plants the enforcement out, so that the refused job reaches
			// the runner and the detection path is what stands between it
			// and an unnoticed run.
			s.sim.SetIgnoreRunnerGroups(true)
			s.sim.AddRepo("acme", "secret")

			var refusedJob int64
			if len(tc.refused.Jobs) > 0 {
				run, err := s.sim.StartRun(tc.refused)
				if err != nil {
					t.Fatal(err)
				}
				refusedJob = run.JobIDs[0]
				for _, d := range s.sim.Deliveries() {
					if d.Event == "workflow_job" && d.StatusCode != tc.hookStatus {
						t.Errorf("the refused job's queued event answered %d, want %d", d.StatusCode, tc.hookStatus)
					}
				}
			}
			admitted, err := s.sim.StartRun(ghsim.RunSpec{Repo: "acme/app", Event: "push", Jobs: []ghsim.JobSpec{{Labels: labels}}})
			if err != nil {
				t.Fatal(err)
			}
			if n := s.drain(t); n != 0 {
				t.Fatalf("%d jobs retried or dead-lettered\n%s", n, s.logs.String())
			}
			rs := regs.all()
			if len(rs) != 1 {
				t.Fatalf("%d runners launched, want 1 (for the admitted job only)\n%s", len(rs), s.logs.String())
			}
			// The runner boots and connects: GitHub gives it the oldest
			// queued job its labels cover.
			if _, err := s.sim.ConnectRunner(rs[0].JITConfig); err != nil {
				t.Fatal(err)
			}
			took := admitted.JobIDs[0]
			if refusedJob != 0 {
				took = refusedJob
			}
			if j, _ := s.sim.Job(took); j.RunnerName != rs[0].RunnerName {
				t.Fatalf("job %d ran on %q, want the skiff runner %s (the simulator dispatches by labels and owner)",
					took, j.RunnerName, rs[0].RunnerName)
			}

			checkSecurityEvent(t, s, refusedJob, tc.refused.Repo, rs[0].RunnerName, tc.reason)
		})
	}
}

// checkSecurityEvent fails t unless the stack s recorded, counted and
// logged one security event for the refused job of repo on runner with
// reason ("" for none and no refused job), once even when its in_progress
// delivery is replayed.
func checkSecurityEvent(t *testing.T, s *stack, refusedJob int64, repo, runner, reason string) {
	t.Helper()
	events, err := s.security.SecurityEvents(context.Background(), start.Add(-1))
	if err != nil {
		t.Fatal(err)
	}
	counted := s.hooks.Get(webhook.MetricSecurityEvent, "")
	logged := strings.Count(s.logs.String(), "SECURITY EVENT")
	if reason == "" {
		if len(events) != 0 || counted != 0 || logged != 0 {
			t.Fatalf("an admitted job raised %d events, counted %d, logged %d: %+v", len(events), counted, logged, events)
		}
		return
	}
	want := store.SecurityEvent{JobID: refusedJob, Repository: repo, Runner: runner, Pool: "oss", Reason: reason}
	if len(events) != 1 || events[0].JobID != want.JobID || events[0].Repository != want.Repository ||
		events[0].Runner != want.Runner || events[0].Pool != want.Pool || events[0].Reason != want.Reason {
		t.Fatalf("security events %+v, want one like %+v\n%s", events, want, s.logs.String())
	}
	if counted != 1 || logged != 1 {
		t.Errorf("counted %d, logged %d; want 1 each", counted, logged)
	}
	// A replay of the in_progress delivery (GitHub redelivers) is
	// the same event: recorded, counted and logged once.
	s.replayJobEvents(t, refusedJob)
	if again := s.hooks.Get(webhook.MetricSecurityEvent, ""); again != 1 {
		t.Errorf("counted %d after a replay, want 1", again)
	}
}
