package scaleup_test

import (
	"context"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/scaleup"
	"github.com/skiffci/skiff/pkg/store"
)

// TestWhoMayRun: a pool's policy on public repositories and pull requests
// from forks is applied before anything is paid for — from the job's
// visibility and the run's trigger (the webhook's workflow_run record, or
// one GitHub call when it has not arrived, cached per run).
func TestWhoMayRun(t *testing.T) {
	t.Parallel()
	type want struct {
		launched int
		skipped  string // the reason counted, "" for none
	}
	cases := []struct {
		name       string
		labels     []string
		visibility string
		run        *store.Run // recorded before; nil: unknown, GitHub is asked
		want       want
	}{
		{"a push in a private repository", nil, "private", &store.Run{Event: "push"}, want{launched: 1}},
		{"a pull request from a fork is refused", nil, "private",
			&store.Run{Event: "pull_request", FromFork: true, HeadRepository: "mallory/app"}, want{skipped: "fork_pull_request"}},
		{"a pull request from a branch runs", nil, "private", &store.Run{Event: "pull_request"}, want{launched: 1}},
		{"a public repository is refused", nil, "public", &store.Run{Event: "push"}, want{skipped: "public_repository"}},
		{"an unknown visibility counts as public", nil, "secret", &store.Run{Event: "push"}, want{skipped: "public_repository"}},
		{"a pool that admits forks and public repositories", []string{"oss"}, "public",
			&store.Run{Event: "pull_request", FromFork: true}, want{launched: 1}},
		{"a message from before the visibility was sent", nil, "", &store.Run{Event: "push"}, want{launched: 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, nil)
			e.unknownRuns = true
			j := job(501, tc.labels...)
			j.Visibility = tc.visibility
			if tc.run != nil {
				r := *tc.run
				r.ID, r.Attempt, r.Repository, r.UpdatedAt, r.ExpiresAt = j.RunID, 1, j.Repository, start, start.Add(time.Hour)
				if err := e.jobs.RecordRun(context.Background(), r); err != nil {
					t.Fatal(err)
				}
			}
			r := e.handle(context.Background(), e.svc, message(j, 1))
			if len(r.BatchItemFailures) != 0 || len(e.ec2.Live()) != tc.want.launched {
				t.Errorf("failures %+v, %d launched; want none and %d\n%s", r.BatchItemFailures, len(e.ec2.Live()), tc.want.launched, e.logs.String())
			}
			if tc.want.skipped != "" && e.counter.Get(scaleup.MetricSkipped, tc.want.skipped) != 1 {
				t.Errorf("skip reason %s not counted: %v", tc.want.skipped, e.counter.Snapshot())
			}
			if tc.want.skipped != "" && e.sim.Requests(ghsim.OpGenerateOrgJITConfig) != 0 {
				t.Error("a refused job got a JIT configuration")
			}
		})
	}
}

// TestTriggerFromGitHub: when the run's workflow_run event has not arrived,
// scale-up asks GitHub once per run (cached) and refuses a fork's pull
// request; a failing lookup retries the job rather than launching blind.
func TestTriggerFromGitHub(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.unknownRuns = true
	labels := []string{"self-hosted", "linux", "x64"}
	run, err := e.sim.StartRun(ghsim.RunSpec{Repo: "acme/app", Event: "pull_request", HeadRepo: "mallory/app",
		Jobs: []ghsim.JobSpec{{Labels: labels}, {Labels: labels}}})
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range run.JobIDs {
		j := job(id)
		j.RunID, j.Visibility = run.RunID, "private"
		if r := e.handle(context.Background(), e.svc, message(j, 1)); len(r.BatchItemFailures) != 0 {
			t.Fatalf("job %d: %+v", i, r)
		}
	}
	if got := e.counter.Get(scaleup.MetricSkipped, "fork_pull_request"); got != 2 || len(e.ec2.Live()) != 0 {
		t.Errorf("refused %d, launched %d; want 2 refused", got, len(e.ec2.Live()))
	}
	if got := e.sim.Requests(ghsim.OpGetWorkflowRun); got != 1 {
		t.Errorf("%d run lookups for two jobs of one run, want 1 (cached)", got)
	}
	// A run GitHub does not answer for: retried, not launched.
	e.sim.SetFault(ghsim.OpGetWorkflowRun, ghsim.Fault{ErrorRate: 1, ErrorStatus: 500})
	j := job(9999)
	j.RunID, j.Visibility = 424242, "private"
	if r := e.handle(context.Background(), e.svc, message(j, 1)); len(r.BatchItemFailures) != 1 || len(e.ec2.Live()) != 0 {
		t.Errorf("unknown trigger: %+v, %d live; want a retry and no launch", r, len(e.ec2.Live()))
	}
}
