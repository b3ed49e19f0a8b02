package local_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/skiffci/skiff/internal/local"
	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/github/ghsim"
)

// TestRefusedJobsNeverReachARunner: a fork's pull request on a public
// repository and a job of a repository outside the allow-list, queued
// before an admitted job with the same labels, are refused by skiff and
// stay queued on GitHub; the runner launched for the admitted job is in
// the runner group skiff keeps for the pool, which admits neither, so
// GitHub (the simulator, over HTTP, with stand-in runners) gives it the
// admitted job. Without the group (the simulator ignoring groups, or the
// pool registering in the Default group) the runner takes a refused job.
func TestRefusedJobsNeverReachARunner(t *testing.T) {
	t.Parallel()
	standin := buildStandin(t, t.TempDir())
	tests := []struct {
		name         string
		runnerGroup  string // the pool's runnerGroup: line, if any
		ignoreGroups bool
		wantRefused  bool // a refused job starts on the skiff runner
	}{
		{"the group skiff keeps", "", false, false},
		{"the simulator ignores groups", "", true, true},
		{"the pool registers in the Default group", "    runnerGroup: Default\n", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sim, pemKey := testenv.GitHubApp(t, "CANARYGROUPS")
			sim.SetIgnoreRunnerGroups(tt.ignoreGroups)
			if err := sim.SetVisibility("acme/site", ghsim.VisibilityPublic); err != nil {
				t.Fatal(err)
			}
			sim.AddRepo("acme", "secret") // private, not on the allow-list
			l, logs, stop := startLocal(t, sim, pemKey, testenv.CPUPools+tt.runnerGroup, local.Config{
				RunnerCommand: []string{standin}, RunnerEnv: []string{"SKIFF_STANDIN_DURATION=100ms"}, Limits: map[string]int{"cpu": 2},
				Allow: []string{"acme/app", "acme/site"}, ReconcileEvery: time.Hour,
			})
			labels := []string{"self-hosted", "linux", "x64"}
			start := func(spec ghsim.RunSpec) int64 {
				t.Helper()
				spec.Jobs = []ghsim.JobSpec{{Labels: labels}}
				run, err := sim.StartRun(spec)
				if err != nil {
					t.Fatal(err)
				}
				return run.JobIDs[0]
			}
			fork := start(ghsim.RunSpec{Repo: "acme/site", Event: "pull_request", HeadRepo: "mallory/site"})
			outside := start(ghsim.RunSpec{Repo: "acme/secret"})
			admitted := start(ghsim.RunSpec{Repo: "acme/app"})
			refused := map[int64]string{fork: "the fork's pull request", outside: "the job outside the allow-list"}

			// Until the admitted job completes or a refused one leaves the
			// queue.
			testenv.Await(t, "the admitted job to complete, or a refused one to leave the queue", 20*time.Millisecond, func() bool {
				if j, _ := sim.Job(admitted); j.Status == "completed" {
					return true
				}
				for id := range refused {
					if j, _ := sim.Job(id); j.Status != "queued" {
						return true
					}
				}
				return false
			}, nil)
			var ran []string
			for id, what := range refused {
				if j, _ := sim.Job(id); j.Status != "queued" || j.RunnerID != 0 {
					ran = append(ran, fmt.Sprintf("%s ran on %s (%s)", what, j.RunnerName, j.Status))
				}
			}
			if got := len(ran) > 0; got != tt.wantRefused {
				t.Errorf("refused jobs that ran: %s; want some: %v\n%s", strings.Join(ran, "; "), tt.wantRefused, logs.String())
			}
			if !tt.wantRefused {
				checkAdmittedInKeptGroup(t, sim, l, admitted)
			}
			if err := stop(); err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
}

// checkAdmittedInKeptGroup fails t unless the admitted job ran, alone, on a
// skiff runner of the group skiff keeps for the pool (acme/app and
// acme/site, no public repository), and the reconciler's pass keeps that
// group without a call.
func checkAdmittedInKeptGroup(t *testing.T, sim *ghsim.Server, l *local.Local, admitted int64) {
	t.Helper()
	if j, _ := sim.Job(admitted); j.Conclusion != "success" || !strings.HasPrefix(j.RunnerName, "skiff-") {
		t.Errorf("admitted job = %+v, want it run by a skiff runner", j)
	}
	if n := sim.Requests(ghsim.OpGenerateOrgJITConfig); n != 1 {
		t.Errorf("%d runners registered, want 1 (the admitted job's)", n)
	}
	if access, ok := sim.RunnerGroupAccess("acme", "skiff-cpu"); !ok || access.Visibility != ghsim.GroupSelected ||
		access.AllowsPublic || len(access.Repositories) != 2 {
		t.Errorf("skiff-cpu = %+v, %v; want acme/app and acme/site, no public repository", access, ok)
	}
	// The reconciler's pass keeps the group scale-up created:
	// nothing changed since, so it makes no call.
	rep, err := l.ScaleDown.Reconcile(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Groups.Orgs != 1 || rep.Groups.Calls != 0 || rep.Groups.Errors != 0 {
		t.Errorf("the reconciler's groups = %+v, want acme kept with no call", rep.Groups)
	}
}
