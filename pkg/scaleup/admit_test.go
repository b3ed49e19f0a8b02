package scaleup_test

import (
	"context"
	"testing"
	"time"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/pool/poolfile"
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
		run        *store.RunRecord // recorded before; nil: unknown, GitHub is asked
		want       want
	}{
		{"a push in a private repository", nil, "private", &store.RunRecord{Event: "push"}, want{launched: 1}},
		{"a pull request from a fork is refused", nil, "private",
			&store.RunRecord{Event: "pull_request", FromFork: true, HeadRepository: "mallory/app"}, want{skipped: "fork_pull_request"}},
		{"a pull request from a branch runs", nil, "private", &store.RunRecord{Event: "pull_request"}, want{launched: 1}},
		{"a public repository is refused", nil, "public", &store.RunRecord{Event: "push"}, want{skipped: "public_repository"}},
		{"an unknown visibility counts as public", nil, "secret", &store.RunRecord{Event: "push"}, want{skipped: "public_repository"}},
		{"a pool that admits forks and public repositories", []string{"oss"}, "public",
			&store.RunRecord{Event: "pull_request", FromFork: true}, want{launched: 1}},
		{"a message from before the visibility was sent", nil, "", &store.RunRecord{Event: "push"}, want{launched: 1}},
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

// forksYAML adds a pool that admits pull requests from forks of authors
// with write access only.
const forksYAML = poolsYAML + `
  - name: forks
    labels: [forks]
    forkPullRequests: collaborators
    instanceTypes: [c7i.large]
    subnets: [subnet-0aaaaaaaa]
`

// newForksEnv is an env whose pools include "forks" (collaborators only).
func newForksEnv(t *testing.T) *env {
	t.Helper()
	pools, err := poolfile.Parse([]byte(forksYAML), "pools.yaml")
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(o *scaleup.Options) { o.Pools = pools })
	testenv.KeptGroups(t, e.sim, pools, "acme")
	e.unknownRuns = true
	return e
}

// TestForkCollaborators: under forkPullRequests: collaborators, a run from
// a fork is admitted when its actor has write, maintain or admin on the
// repository (one GitHub call), and refused for read, triage or no access
// (GitHub's 404 for a first-time contributor). The actor comes from the
// webhook's workflow_run record, or from GitHub's run when it has none.
func TestForkCollaborators(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		role       string // the actor's role on acme/app; "" none
		fork       bool
		recorded   bool // the workflow_run record exists (else GitHub is asked)
		wantLaunch bool
		wantCalls  int // permission lookups
	}{
		{"a collaborator with write", "write", true, true, true, 1},
		{"a maintainer", "maintain", true, true, true, 1},
		{"an admin", "admin", true, true, true, 1},
		{"a reader is refused", "read", true, true, false, 1},
		{"a triager is refused", "triage", true, true, false, 1},
		{"a first-time contributor is refused", "", true, true, false, 1},
		{"a branch pull request needs no lookup", "", false, true, true, 0},
		{"a collaborator, the run learnt from GitHub", "write", true, false, true, 1},
		{"a first-time contributor, the run learnt from GitHub", "", true, false, false, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newForksEnv(t)
			if tc.role != "" {
				if err := e.sim.SetPermission("acme/app", "alice", tc.role); err != nil {
					t.Fatal(err)
				}
			}
			spec := ghsim.RunSpec{Repo: "acme/app", Event: "pull_request", Actor: "alice",
				Jobs: []ghsim.JobSpec{{Labels: []string{"forks"}}}}
			if tc.fork {
				spec.HeadRepo = "alice/app"
			}
			run, err := e.sim.StartRun(spec)
			if err != nil {
				t.Fatal(err)
			}
			if tc.recorded {
				r := store.RunRecord{ID: run.RunID, Attempt: 1, Event: "pull_request", Repository: "acme/app",
					FromFork: tc.fork, Actor: "alice", UpdatedAt: start, ExpiresAt: start.Add(time.Hour)}
				if tc.fork {
					r.HeadRepository = "alice/app"
				}
				if err := e.jobs.RecordRun(context.Background(), r); err != nil {
					t.Fatal(err)
				}
			}
			j := job(run.JobIDs[0], "forks")
			j.RunID, j.Visibility = run.RunID, "private"
			r := e.handle(context.Background(), e.svc, message(j, 1))
			launched := len(e.ec2.Live()) == 1
			if len(r.BatchItemFailures) != 0 || launched != tc.wantLaunch {
				t.Errorf("failures %+v, launched %v; want none and launched %v\n%s", r.BatchItemFailures, launched, tc.wantLaunch, e.logs.String())
			}
			if !tc.wantLaunch && e.counter.Get(scaleup.MetricSkipped, "fork_pull_request") != 1 {
				t.Errorf("fork_pull_request not counted: %v", e.counter.Snapshot())
			}
			if got := e.sim.Requests(ghsim.OpGetPermissionLevel); got != tc.wantCalls {
				t.Errorf("%d permission lookups, want %d", got, tc.wantCalls)
			}
			if wantRun := map[bool]int{true: 0, false: 1}[tc.recorded]; e.sim.Requests(ghsim.OpGetWorkflowRun) != wantRun {
				t.Errorf("%d run lookups, want %d", e.sim.Requests(ghsim.OpGetWorkflowRun), wantRun)
			}
		})
	}
}

// TestForkPermissionCacheAndFailure: a fork author's permission is asked
// once per (repository, user) for permissionTTL, then again; a lookup that
// fails retries the job, never launching it blind.
func TestForkPermissionCacheAndFailure(t *testing.T) {
	t.Parallel()
	e := newForksEnv(t)
	if err := e.sim.SetPermission("acme/app", "alice", "write"); err != nil {
		t.Fatal(err)
	}
	record := func(runID int64) {
		t.Helper()
		if err := e.jobs.RecordRun(context.Background(), store.RunRecord{ID: runID, Attempt: 1, Event: "pull_request",
			Repository: "acme/app", FromFork: true, HeadRepository: "alice/app", Actor: "alice",
			UpdatedAt: start, ExpiresAt: start.Add(48 * time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	submit := func(jobID, runID int64) response {
		t.Helper()
		j := job(jobID, "forks")
		j.RunID, j.Visibility = runID, "private"
		return e.handle(context.Background(), e.svc, message(j, 1))
	}
	calls := func() int { return e.sim.Requests(ghsim.OpGetPermissionLevel) }

	// A failing lookup: retried, not launched, no JIT configuration.
	e.sim.SetFault(ghsim.OpGetPermissionLevel, ghsim.Fault{ErrorRate: 1, ErrorStatus: 500})
	record(900)
	if r := submit(9001, 900); len(r.BatchItemFailures) != 1 || len(e.ec2.Live()) != 0 {
		t.Fatalf("failing lookup: %+v, %d live; want a retry and no launch", r, len(e.ec2.Live()))
	}
	if e.sim.Requests(ghsim.OpGenerateOrgJITConfig) != 0 {
		t.Error("a job whose author's permission is unknown got a JIT configuration")
	}
	if e.counter.Get(scaleup.MetricSkipped, "fork_pull_request") != 0 {
		t.Error("a failed lookup counted as a refusal")
	}
	e.sim.ClearFaults()

	// Served now; the next jobs of the same author reuse the answer.
	before := calls()
	for i, run := range []int64{900, 901, 902} {
		record(run)
		if r := submit(9002+int64(i), run); len(r.BatchItemFailures) != 0 {
			t.Fatalf("job of run %d: %+v\n%s", run, r, e.logs.String())
		}
	}
	if got := calls() - before; got != 1 || len(e.ec2.Live()) != 3 {
		t.Errorf("%d lookups for three runs of one author, %d launched; want 1 and 3", got, len(e.ec2.Live()))
	}
	// Write access removed: the cached answer holds until it expires.
	if err := e.sim.SetPermission("acme/app", "alice", ""); err != nil {
		t.Fatal(err)
	}
	e.clock.advance(11 * time.Minute)
	record(903)
	if r := submit(9010, 903); len(r.BatchItemFailures) != 0 || len(e.ec2.Live()) != 3 {
		t.Errorf("after expiry: %+v, %d live; want the job refused", r, len(e.ec2.Live()))
	}
	if got := calls() - before; got != 2 {
		t.Errorf("%d lookups after the answer expired, want 2", got)
	}
	if e.counter.Get(scaleup.MetricSkipped, "fork_pull_request") != 1 {
		t.Errorf("refusal not counted: %v", e.counter.Snapshot())
	}
}

// deletedHead answers every run lookup as GitHub does once the run's head
// repository is gone (a fork deleted before its run's workflow_run event
// was recorded): head_repository null, which the client reads as "".
type deletedHead struct{ *github.Client }

func (d deletedHead) GetWorkflowRun(ctx context.Context, installation int64, owner, repo string, id int64) (*github.WorkflowRun, error) {
	r, err := d.Client.GetWorkflowRun(ctx, installation, owner, repo, id)
	if r != nil {
		r.HeadRepository.FullName = ""
	}
	return r, err
}

// TestTriggerUnknownHeadIsAFork: a run GitHub reports without a head
// repository is a fork's, as the webhook reads it: refused by a pool that
// refuses forks, and refused by a collaborators pool unless its actor has
// write access. Scale-up fails closed on the fallback path too.
func TestTriggerUnknownHeadIsAFork(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		labels []string
		actor  string
	}{
		{"pool refusing forks", []string{"self-hosted", "linux", "x64"}, ""},
		{"collaborators pool, actor without access", []string{"forks"}, "mallory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pools, err := poolfile.Parse([]byte(forksYAML), "pools.yaml")
			if err != nil {
				t.Fatal(err)
			}
			e := newEnv(t, func(o *scaleup.Options) {
				o.Pools = pools
				o.GitHub = deletedHead{o.GitHub.(*github.Client)}
			})
			e.unknownRuns = true
			spec := ghsim.RunSpec{Repo: "acme/app", Event: "pull_request", Jobs: []ghsim.JobSpec{{Labels: tc.labels}}}
			if tc.actor != "" {
				spec.HeadRepo, spec.Actor = tc.actor+"/app", tc.actor
			}
			run, err := e.sim.StartRun(spec)
			if err != nil {
				t.Fatal(err)
			}
			j := job(run.JobIDs[0], tc.labels...)
			j.RunID, j.Visibility = run.RunID, "private"
			if r := e.handle(context.Background(), e.svc, message(j, 1)); len(r.BatchItemFailures) != 0 {
				t.Fatalf("%+v", r)
			}
			if got := e.counter.Get(scaleup.MetricSkipped, "fork_pull_request"); got != 1 || len(e.ec2.Live()) != 0 {
				t.Errorf("refused %d, launched %d; want the job refused as a fork's", got, len(e.ec2.Live()))
			}
		})
	}
}
