package github_test

import (
	"errors"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/github/internal/apispec"
)

// TestRerunFailedJobs re-runs a run's failed job in the simulator, checks
// the new attempt, and validates every answer (201, 403 for a run still in
// progress, 404) against GitHub's OpenAPI description.
func TestRerunFailedJobs(t *testing.T) {
	t.Parallel()
	sp := apispec.GitHub(t)
	opts, got := exchanges()
	e := newEnv(t, envConfig{simOpts: opts})
	ctx := ctxT(t)
	run, err := e.sim.StartRun(ghsim.RunSpec{Repo: "acme/app", Jobs: []ghsim.JobSpec{
		{Name: "unit", Labels: []string{"x"}, Conclusion: "failure"}, {Name: "lint", Labels: []string{"x"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.client.RerunFailedJobs(ctx, e.inst, "acme", "app", run.RunID); !errors.Is(err, github.ErrForbidden) {
		t.Errorf("re-run of a queued run: %v, want ErrForbidden", err)
	}
	for _, id := range run.JobIDs {
		if err := e.sim.CancelJob(id); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.client.RerunFailedJobs(ctx, e.inst, "acme", "app", run.RunID); err != nil {
		t.Fatalf("re-run: %v", err)
	}
	rs, _ := e.sim.Run(run.RunID)
	if rs.Attempt != 2 || rs.Status != "queued" || len(rs.JobIDs) != 4 {
		t.Errorf("after the re-run: %+v, want attempt 2, queued, both cancelled jobs again", rs)
	}
	j, err := e.client.GetJob(ctx, e.inst, "acme", "app", rs.JobIDs[2])
	if err != nil || j.RunAttempt != 2 || j.Status != "queued" {
		t.Errorf("new job: %+v, %v", j, err)
	}
	if old, err := e.client.GetJob(ctx, e.inst, "acme", "app", run.JobIDs[0]); err != nil || old.RunAttempt != 1 {
		t.Errorf("old job keeps its attempt: %+v, %v", old, err)
	}
	if err := e.client.RerunFailedJobs(ctx, e.inst, "acme", "app", 1); !errors.Is(err, github.ErrNotFound) {
		t.Errorf("unknown run: %v, want ErrNotFound", err)
	}
	e.clock.Advance(time.Minute)

	covered := map[int]bool{}
	for _, x := range got() {
		if x.Op != ghsim.OpRerunFailedJobs {
			continue
		}
		covered[x.Status] = true
		err := validateAnswer(sp, x)
		if err == nil {
			err = sp.ValidateRequest(x.Op, x.Request)
		}
		if err != nil {
			t.Errorf("%s %d: %v\n%.300s", x.Op, x.Status, err, x.Body)
		}
	}
	for _, s := range []int{201, 403, 404} {
		if !covered[s] {
			t.Errorf("no %d answer of %s validated", s, ghsim.OpRerunFailedJobs)
		}
	}
}
