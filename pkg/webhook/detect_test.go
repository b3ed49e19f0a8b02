package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/pool/poolfile"
	"github.com/skiffci/skiff/pkg/store"
)

// detectPools: pool "private" (the default policy), "oss" (public and
// private, forks refused), "forks" (forks allowed), "scoped" (acme only),
// "trusted" (forks of collaborators).
func detectPools(t *testing.T) *pool.Config {
	t.Helper()
	c, err := poolfile.Parse([]byte(`
version: 1
defaults:
  image:
    ssm: /aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64
  subnets: [subnet-0aaaaaaaa]
pools:
  - name: private
    labels: [private]
    instanceTypes: [c7i.large]
  - name: oss
    labels: [oss]
    instanceTypes: [c7i.large]
    visibility: [public, private]
  - name: forks
    labels: [forks]
    instanceTypes: [c7i.large]
    visibility: [public, private]
    forkPullRequests: allow
  - name: scoped
    labels: [scoped]
    instanceTypes: [c7i.large]
    scope: {owners: [acme]}
  - name: trusted
    labels: [trusted]
    instanceTypes: [c7i.large]
    forkPullRequests: collaborators
`), "pools.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestDetect: the in_progress (or completed) event of a job that ran on a
// skiff runner launched for another job runs admission again against the
// runner's pool; a refusal is one security event per job attempt, and
// nothing else of the delivery's answer changes.
func TestDetect(t *testing.T) {
	t.Parallel()
	cases := []detectCase{
		{name: "a fork's job on an oss runner", repo: "acme/site", visibility: "public", runner: "skiff-ci-90-1", runnerPool: "oss",
			run: detectRun{fork: true}, want: "fork_pull_request"},
		{name: "a push of a public repository on an oss runner", repo: "acme/site", visibility: "public", runner: "skiff-ci-90-1",
			runnerPool: "oss"},
		{name: "a public repository's job on a private pool's runner", repo: "acme/site", visibility: "public",
			runner: "skiff-ci-90-1", runnerPool: "private", want: "public_repository"},
		{name: "a fork's job on a runner of a pool allowing forks", repo: "acme/site", visibility: "public", runner: "skiff-ci-90-1",
			runnerPool: "forks", run: detectRun{fork: true}},
		{name: "a repository outside the pool's scope", repo: "other/app", visibility: "private", runner: "skiff-ci-90-1",
			runnerPool: "scoped", want: "out_of_scope"},
		{name: "a repository outside the allow-list", repo: "other/app", visibility: "private", runner: "skiff-ci-90-1",
			runnerPool: "private", allow: []string{"acme"}, want: "forbidden"},
		{name: "no run record under a pool refusing forks fails closed", repo: "acme/app", visibility: "private",
			runner: "skiff-ci-90-1", runnerPool: "private", run: detectRun{none: true}, want: "fork_pull_request"},
		{name: "a fork's job on a collaborators pool's runner fails closed", repo: "acme/app", visibility: "private",
			runner: "skiff-ci-90-1", runnerPool: "trusted", run: detectRun{fork: true}, want: "fork_pull_request"},
		{name: "the runner launched for this job is not checked", repo: "acme/site", visibility: "public",
			runner: "skiff-ci-11-2", runnerPool: "private"},
		{name: "a runner not in the ledger", repo: "acme/site", visibility: "public", runner: "skiff-ci-90-1"},
		// Another deployment's runner names carry its id: not this one's to
		// check, even were a record of that name in this ledger.
		{name: "another deployment's runner", repo: "acme/site", visibility: "public", runner: "skiff-ci-2-90-1",
			runnerPool: "private"},
		{name: "a runner named as a deployment-less part's", repo: "acme/site", visibility: "public", runner: "skiff-90-1",
			runnerPool: "private"},
		{name: "a runner not named as skiff's", repo: "acme/site", visibility: "public", runner: "GitHub Actions 2",
			runnerPool: "private"},
		{name: "the ledger cannot answer", repo: "acme/site", visibility: "public", runner: "skiff-ci-90-1", runnerPool: "private",
			ledgerErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			hs, events := deliverJobOnRunner(t, tc)
			ctx := context.Background()
			if tc.ledgerErr && !strings.Contains(hs.logs.String(), "reading the ledger record of the job's runner failed") {
				t.Errorf("the ledger's failure is not logged:\n%s", hs.logs.String())
			}
			got, err := events.SecurityEvents(ctx, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			counted := hs.counter.Get(MetricSecurityEvent, "")
			if tc.want == "" {
				if len(got) != 0 || counted != 0 {
					t.Fatalf("events %+v, counted %d; want none", got, counted)
				}
				return
			}
			if len(got) != 1 || got[0].Reason != tc.want || got[0].JobID != 11 || got[0].Runner != tc.runner ||
				got[0].Pool != tc.runnerPool || got[0].Repository != tc.repo {
				t.Fatalf("events %+v, want one %s on %s\n%s", got, tc.want, tc.runner, hs.logs.String())
			}
			if counted != 1 {
				t.Errorf("counted %d for the in_progress and completed events, want 1", counted)
			}
			checkSecurityLogLine(t, hs.logs.String(), tc)
		})
	}
}

// detectCase is a job of repo, on runner, delivered in_progress then
// completed.
type detectCase struct {
	name       string
	repo       string
	visibility string
	runner     string // the job's runner; its ledger record is of runnerPool
	runnerPool string // "" no ledger record: another deployment's or not skiff's
	run        detectRun
	allow      []string
	ledgerErr  bool
	want       string // the reason of the security event; "" none
}

// detectRun is the job's run record.
type detectRun struct {
	fork bool
	none bool // no run record
}

// deliverJobOnRunner builds the webhook of deployment ci with tc's ledger
// and run records, and delivers the job's in_progress and completed events,
// each answered below 500. It returns the harness and the security events
// recorded.
func deliverJobOnRunner(t *testing.T, tc detectCase) (*harness, *store.SecurityMemory) {
	t.Helper()
	pools := detectPools(t)
	events := store.NewSecurityMemory(func() time.Time { return fixedNow })
	led := ledger.NewMemory(func() time.Time { return fixedNow })
	hs := newHarness(t, func(o *Options) {
		o.Router = RouterFunc(func([]string, string) (string, error) { return "private", nil })
		o.Policies, o.Scopes, o.SecurityEvents = pools, pools, events
		o.Deployment = "ci"
		if tc.allow != nil {
			o.Allow = mustAllow(t, tc.allow...)
		}
		o.Runners = led
		if tc.ledgerErr {
			o.Runners = failingReads{led}
		}
	})
	ctx := context.Background()
	if tc.runnerPool != "" {
		if _, err := led.Reserve(ctx, tc.runnerPool, 10, []ledger.Runner{{Name: tc.runner, Pool: tc.runnerPool,
			JobID: 90, ReservedAt: fixedNow}}); err != nil {
			t.Fatal(err)
		}
	}
	if !tc.run.none {
		head := tc.repo
		if tc.run.fork {
			head = "mallory/app"
		}
		if err := hs.store.RecordRun(ctx, store.RunRecord{ID: 22, Attempt: 1, Event: "pull_request", Repository: tc.repo,
			HeadRepository: head, FromFork: tc.run.fork, Actor: "mallory"}); err != nil {
			t.Fatal(err)
		}
	}
	for _, action := range []string{"in_progress", "completed"} {
		b, _ := json.Marshal(map[string]any{"action": action,
			"workflow_job": map[string]any{"id": 11, "run_id": 22, "run_attempt": 1, "labels": []string{"self-hosted"},
				"runner_name": tc.runner, "runner_id": 5, "conclusion": "success"},
			"repository": map[string]any{"full_name": tc.repo, "visibility": tc.visibility}})
		if resp := hs.deliver("workflow_job", "d-"+action, b); resp.Status >= 500 {
			t.Fatalf("%s answered %d", action, resp.Status)
		}
	}
	return hs, events
}

// checkSecurityLogLine checks that the last SECURITY EVENT line of logs
// names the job, its repository, its runner, the runner's pool and tc's
// reason.
func checkSecurityLogLine(t *testing.T, logs string, tc detectCase) {
	t.Helper()
	line := ""
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, "SECURITY EVENT") {
			line = l
		}
	}
	for _, key := range []string{`"job_id":11`, `"repository":"` + tc.repo + `"`, `"runner":"` + tc.runner + `"`,
		`"runner_pool":"` + tc.runnerPool + `"`, `"reason":"` + tc.want + `"`} {
		if !strings.Contains(line, key) {
			t.Errorf("the event's log line lacks %s: %s", key, line)
		}
	}
}

// failingReads is a ledger whose reads fail.
type failingReads struct{ *ledger.Memory }

func (failingReads) Runner(context.Context, string) (ledger.Runner, error) {
	return ledger.Runner{}, errors.New("throttled")
}
