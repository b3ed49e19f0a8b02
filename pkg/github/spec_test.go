package github_test

import (
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/github/internal/apispec"
)

// TestSimulatorAnswersMatchGitHubSpec drives every operation the client
// uses, with their success and error answers, and validates each answer the
// simulator gave against GitHub's OpenAPI description.
func TestSimulatorAnswersMatchGitHubSpec(t *testing.T) {
	t.Parallel()
	sp := apispec.GitHub(t)
	opts, got := exchanges()
	e := newEnv(t, envConfig{simOpts: opts})
	e.sim.AddOrg("other")
	e.sim.SetWebhook(e.appID, "http://127.0.0.1:1/unreachable", "s") // deliveries fail: listed as failures
	run := specCalls(t, e)
	// Fault and limit answers, as the client meets them.
	specFaultCalls(t, e, run.JobIDs[0])
	checkSpecExchanges(t, sp, got())
}

// must fails t at once on err.
func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// specCalls makes each call of the client once or more, for each answer
// (success and refusals) the spec test validates; it returns the run whose
// job the calls read.
func specCalls(t *testing.T, e *env) ghsim.RunInfo {
	t.Helper()
	ctx := ctxT(t)
	c := e.client
	org, repo := github.OrgScope("acme"), github.RepoScope("acme", "app")
	_, err := c.OrgInstallation(ctx, "acme")
	must(t, err)
	_, err = c.RepoInstallation(ctx, "acme", "app")
	must(t, err)
	_, _ = c.OrgInstallation(ctx, "other")         // 404
	_, _ = c.RepoInstallation(ctx, "acme", "none") // 404
	gid, err := c.RunnerGroupID(ctx, e.inst, "acme", "Default")
	must(t, err)
	run, err := e.sim.StartRun(ghsim.RunSpec{Repo: "acme/app", Jobs: []ghsim.JobSpec{{Labels: []string{"self-hosted", "x"}}}})
	must(t, err)
	_, err = c.GetJob(ctx, e.inst, "acme", "app", run.JobIDs[0]) // queued
	must(t, err)
	_, err = c.GetWorkflowRun(ctx, e.inst, "acme", "app", run.RunID) // queued
	must(t, err)
	jc, err := c.GenerateJITConfig(ctx, e.inst, org, github.JITRequest{Name: "a", RunnerGroupID: gid, Labels: []string{"x"}})
	must(t, err)
	_, _ = c.GenerateJITConfig(ctx, e.inst, org, github.JITRequest{Name: "a", RunnerGroupID: gid, Labels: []string{"x"}})  // 409
	_, _ = c.GenerateJITConfig(ctx, e.inst, org, github.JITRequest{Name: "b", RunnerGroupID: 77, Labels: []string{"x"}})   // 404
	_, err = c.GenerateJITConfig(ctx, e.inst, repo, github.JITRequest{Name: "a", RunnerGroupID: 1, Labels: []string{"y"}}) // repo
	must(t, err)
	_, err = e.sim.ConnectRunner(jc.EncodedJITConfig.Reveal())
	must(t, err)
	_, err = c.GetJob(ctx, e.inst, "acme", "app", run.JobIDs[0]) // in progress
	must(t, err)
	_, err = c.GetRunner(ctx, e.inst, org, jc.Runner.ID) // busy
	must(t, err)
	_ = c.DeleteRunner(ctx, e.inst, org, jc.Runner.ID) // 422 busy
	_, err = c.ListRunners(ctx, e.inst, org, "")
	must(t, err)
	_, err = c.ListRunners(ctx, e.inst, repo, "")
	must(t, err)
	repoRunners, err := c.ListRunners(ctx, e.inst, repo, "a")
	must(t, err)
	_, err = c.GetRunner(ctx, e.inst, repo, repoRunners[0].ID) // never connected: version null
	must(t, err)
	must(t, c.DeleteRunner(ctx, e.inst, repo, repoRunners[0].ID)) // 204
	_, _ = c.GetRunner(ctx, e.inst, repo, repoRunners[0].ID)      // 404
	_, err = c.RegistrationToken(ctx, e.inst, org)
	must(t, err)
	_, err = c.RegistrationToken(ctx, e.inst, repo)
	must(t, err)
	e.clock.Advance(2 * time.Minute)
	_, err = c.GetJob(ctx, e.inst, "acme", "app", run.JobIDs[0]) // completed
	must(t, err)
	_, err = c.GetWorkflowRun(ctx, e.inst, "acme", "app", run.RunID) // completed
	must(t, err)
	_, _ = c.GetWorkflowRun(ctx, e.inst, "acme", "app", 1) // 404
	must(t, e.sim.SetPermission("acme/app", "alice", "maintain"))
	_, err = c.GetPermissionLevel(ctx, e.inst, "acme", "app", "alice")
	must(t, err)
	_, err = c.GetPermissionLevel(ctx, e.inst, "acme", "app", "mallory") // 404: not a collaborator
	must(t, err)
	ds, err := c.ListHookDeliveries(ctx, 0, github.DeliveryQuery{Status: "failure"})
	must(t, err)
	if len(ds) == 0 {
		t.Fatal("no failed deliveries listed")
	}
	_, err = c.ListHookDeliveries(ctx, 0, github.DeliveryQuery{})
	must(t, err)
	must(t, c.RedeliverHookDelivery(ctx, 0, ds[0].ID))
	e.sim.SetRunnerReleases([]ghsim.RunnerRelease{{Version: "2.334.0", Published: t0.AddDate(0, 0, -3),
		SHA256: map[string]string{"linux-x64": strings.Repeat("a", 64), "linux-arm64": strings.Repeat("b", 64)}}})
	_, err = c.RunnerReleases(ctx, e.inst)
	must(t, err)

	return run
}

// specFaultCalls reads job through a 502, secondary limits (403 and 429),
// a revoked token and the primary limit.
func specFaultCalls(t *testing.T, e *env, job int64) {
	t.Helper()
	ctx := ctxT(t)
	c := e.client
	e.sim.SetFault(ghsim.OpGetJob, ghsim.Fault{FailNext: 1}) // 502, then served
	_, err := c.GetJob(ctx, e.inst, "acme", "app", job)
	must(t, err)
	e.sim.SetFault(ghsim.OpGetJob, ghsim.Fault{LimitUntil: e.clock.Now().Add(time.Second), RetryAfter: time.Second}) // secondary 403
	_, err = c.GetJob(ctx, e.inst, "acme", "app", job)
	must(t, err)
	e.sim.SetFault(ghsim.OpGetJob, ghsim.Fault{LimitUntil: e.clock.Now().Add(time.Second), LimitStatus: 429}) // secondary 429
	_, err = c.GetJob(ctx, e.inst, "acme", "app", job)
	must(t, err)
	e.sim.ClearFaults()
	e.sim.RevokeTokens(e.inst) // 401, then a new token
	_, err = c.GetJob(ctx, e.inst, "acme", "app", job)
	must(t, err)
	e.sim.SetRateLimit(e.inst, 5000, 0) // primary 403
	_, _ = c.GetJob(ctx, e.inst, "acme", "app", job)

}

// checkSpecExchanges fails t unless every exchange's request and answer
// match GitHub's description, the answers cover each operation and status
// the client meets, request bodies and rate-limit headers among them.
func checkSpecExchanges(t *testing.T, sp *apispec.Spec, xs []ghsim.Exchange) {
	t.Helper()
	covered := map[string]bool{}
	bodies, rateHeaders, retryAfter := map[string]bool{}, 0, 0
	for _, x := range xs {
		key := fmt.Sprintf("%s %d", x.Op, x.Status)
		covered[key] = true
		// What go-github sent: the documented request body, or none.
		if err := sp.ValidateRequest(x.Op, x.Request); err != nil {
			t.Errorf("%s: request body does not match GitHub's description: %v\n%.300s", key, err, x.Request)
		} else if len(x.Request) > 0 {
			bodies[x.Op] = true
		}
		if x.Header.Get("X-RateLimit-Limit") != "" {
			rateHeaders++
			if err := checkRateLimitHeaders(sp, x.Header); err != nil {
				t.Errorf("%s: %v", key, err)
			}
		}
		if ra := x.Header.Get("Retry-After"); ra != "" {
			retryAfter++
			if n, err := strconv.Atoi(ra); err != nil || n < 0 {
				t.Errorf("%s: Retry-After %q is not a number of seconds", key, ra)
			}
		}
		if err := validateAnswer(sp, x); err != nil {
			t.Errorf("%s: answer does not match GitHub's description: %v\n%.600s", key, err, x.Body)
		}
	}
	want := []string{
		ghsim.OpCreateInstallationToken + " 201",
		ghsim.OpGetOrgInstallation + " 200", ghsim.OpGetOrgInstallation + " 404",
		ghsim.OpGetRepoInstallation + " 200", ghsim.OpGetRepoInstallation + " 404",
		ghsim.OpListRunnerGroups + " 200",
		ghsim.OpGenerateOrgJITConfig + " 201", ghsim.OpGenerateOrgJITConfig + " 409", ghsim.OpGenerateOrgJITConfig + " 404",
		ghsim.OpGenerateRepoJITConfig + " 201",
		ghsim.OpGetJob + " 200", ghsim.OpGetWorkflowRun + " 200", ghsim.OpGetWorkflowRun + " 404",
		ghsim.OpGetPermissionLevel + " 200", ghsim.OpGetPermissionLevel + " 404",
		ghsim.OpGetJob + " 502", ghsim.OpGetJob + " 403", ghsim.OpGetJob + " 429", ghsim.OpGetJob + " 401",
		ghsim.OpGetOrgRunner + " 200", ghsim.OpGetRepoRunner + " 200", ghsim.OpGetRepoRunner + " 404",
		ghsim.OpDeleteOrgRunner + " 422", ghsim.OpDeleteRepoRunner + " 204",
		ghsim.OpListOrgRunners + " 200", ghsim.OpListRepoRunners + " 200",
		ghsim.OpCreateOrgRegToken + " 201", ghsim.OpCreateRepoRegToken + " 201",
		ghsim.OpListHookDeliveries + " 200", ghsim.OpRedeliverHookDelivery + " 202",
		ghsim.OpListReleases + " 200",
	}
	var missing []string
	for _, w := range want {
		if !covered[w] {
			missing = append(missing, w)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("answers never validated:\n%s", strings.Join(missing, "\n"))
	}
	for _, op := range []string{ghsim.OpGenerateOrgJITConfig, ghsim.OpGenerateRepoJITConfig, ghsim.OpCreateInstallationToken} {
		if !bodies[op] {
			t.Errorf("no request body of %s validated", op)
		}
	}
	if rateHeaders == 0 || retryAfter == 0 {
		t.Errorf("%d answers with rate-limit headers and %d with Retry-After validated, want some of each", rateHeaders, retryAfter)
	}
}

// checkRateLimitHeaders checks x-ratelimit-limit, -remaining and -reset
// against the description's header components, and -used and -resource
// (documented in GitHub's REST guide, not in the description) for
// consistency.
func checkRateLimitHeaders(sp *apispec.Spec, h http.Header) error {
	for _, c := range []struct{ header, component string }{
		{"X-RateLimit-Limit", "x-rate-limit-limit"},
		{"X-RateLimit-Remaining", "x-rate-limit-remaining"},
		{"X-RateLimit-Reset", "x-rate-limit-reset"},
	} {
		if err := sp.ValidateHeader(c.component, h.Get(c.header)); err != nil {
			return fmt.Errorf("%s: %w", c.header, err)
		}
	}
	limit, _ := strconv.Atoi(h.Get("X-RateLimit-Limit"))
	remaining, _ := strconv.Atoi(h.Get("X-RateLimit-Remaining"))
	used, err := strconv.Atoi(h.Get("X-RateLimit-Used"))
	if err != nil || used != limit-remaining || remaining < 0 || remaining > limit {
		return fmt.Errorf("x-ratelimit-used %q with limit %d and remaining %d", h.Get("X-RateLimit-Used"), limit, remaining)
	}
	if r := h.Get("X-RateLimit-Resource"); r != "core" {
		return fmt.Errorf("x-ratelimit-resource %q, want core for these endpoints", r)
	}
	return nil
}

// TestSimulatorWebhooksMatchGitHubSpec validates every webhook the simulator
// sends against the description's x-webhooks payload schemas.
func TestSimulatorWebhooksMatchGitHubSpec(t *testing.T) {
	t.Parallel()
	sp := apispec.GitHub(t)
	e := newEnv(t, envConfig{})
	e.sim.SetWebhook(e.appID, "http://127.0.0.1:1/unreachable", "s")
	run, err := e.sim.StartRun(ghsim.RunSpec{Repo: "acme/app", Jobs: []ghsim.JobSpec{
		{Name: "a", Labels: []string{"self-hosted"}}, {Name: "b", Labels: []string{"self-hosted"}, Conclusion: "failure"}}})
	if err != nil {
		t.Fatal(err)
	}
	e.connectOrgRunner(ctxT(t), t, "r", "self-hosted")
	if err := e.sim.CancelJob(run.JobIDs[1]); err != nil {
		t.Fatal(err)
	}
	// A public repository's run from a fork: private false, the head
	// repository a fork owned by a user.
	if err := e.sim.SetVisibility("acme/site", ghsim.VisibilityPublic); err != nil {
		t.Fatal(err)
	}
	if _, err := e.sim.StartRun(ghsim.RunSpec{Repo: "acme/site", Event: "pull_request", HeadRepo: "mallory/site",
		Jobs: []ghsim.JobSpec{{Labels: []string{"self-hosted"}}}}); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Hour)
	e.sim.Step()
	seen := map[string]bool{}
	for _, d := range e.sim.Deliveries() {
		name := strings.ReplaceAll(d.Event+"-"+d.Action, "_", "-")
		seen[name] = true
		if err := sp.ValidateWebhook(name, d.Payload); err != nil {
			t.Errorf("%s payload does not match GitHub's description: %v", name, err)
		}
	}
	for _, w := range []string{"workflow-run-requested", "workflow-run-in-progress", "workflow-run-completed",
		"workflow-job-queued", "workflow-job-in-progress", "workflow-job-completed"} {
		if !seen[w] {
			t.Errorf("no %s delivery validated", w)
		}
	}
}
