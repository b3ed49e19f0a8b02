package github_test

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/github/ghsim"
)

// TestCanariesNeverLogged runs every client call, including failing and
// retried ones, with a canary private key and canary-prefixed tokens, and
// checks that no credential reaches the debug log or an error string.
func TestCanariesNeverLogged(t *testing.T) {
	t.Parallel()
	const canary = "CANARY-5e1f-"
	e := newEnv(t, envConfig{simOpts: ghsim.Options{SecretPrefix: canary}})
	key := testKey(t, 2) // the canary key: parsed from PEM like production
	keyPEM := pemOf(key)
	parsed, err := github.ParsePrivateKey(keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	e.sim.AddApp(ghsim.AppConfig{ID: 303, PublicKey: &parsed.PublicKey, WebhookURL: "http://127.0.0.1:1/x", WebhookSecret: canary + "hook"})
	e.sim.AddRepo("canary", "repo")
	inst := e.sim.Install(303, "canary")
	c, err := github.NewClient([]github.App{{ID: 303, Key: parsed}}, github.WithBaseURL(e.sim.URL()),
		github.WithClock(e.clock.Now), github.WithSleep(e.sleep),
		github.WithLogger(newDebugLogger(e.logs)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	var errs []string
	note := func(err error) {
		if err != nil {
			errs = append(errs, err.Error(), fmt.Sprintf("%+v %#v", err, err))
		}
	}
	org := github.OrgScope("canary")
	e.sim.SetFault(ghsim.OpCreateInstallationToken, ghsim.Fault{FailNext: 1})
	e.sim.SetFault(ghsim.OpGenerateOrgJITConfig, ghsim.Fault{FailNext: 1, ErrorStatus: 500})
	e.sim.SetFault(ghsim.OpListOrgRunners, ghsim.Fault{LimitUntil: t0.Add(time.Second), RetryAfter: time.Second})
	run, err := e.sim.StartRun(ghsim.RunSpec{Repo: "canary/repo", Jobs: []ghsim.JobSpec{{Labels: []string{"x"}}}})
	note(err)
	jc, err := c.GenerateJITConfig(ctx, inst, org, github.JITRequest{Name: "r", RunnerGroupID: 1, Labels: []string{"x"}})
	note(err)
	if jc == nil {
		t.Fatal("no JIT config")
	}
	_, err = c.GenerateJITConfig(ctx, inst, org, github.JITRequest{Name: "r", RunnerGroupID: 1, Labels: []string{"x"}})
	note(err) // conflict
	_, err = e.sim.ConnectRunner(jc.EncodedJITConfig.Reveal())
	note(err)
	note(c.DeleteRunner(ctx, inst, org, jc.Runner.ID)) // busy
	tok, err := c.RegistrationToken(ctx, inst, org)
	note(err)
	_, err = c.ListRunners(ctx, inst, org, "")
	note(err)
	_, err = c.GetJob(ctx, inst, "canary", "repo", run.JobIDs[0])
	note(err)
	_, err = c.GetWorkflowRun(ctx, inst, "canary", "repo", run.RunID)
	note(err)
	e.sim.RevokeTokens(inst)
	_, err = c.GetRunner(ctx, inst, org, jc.Runner.ID)
	note(err)
	e.sim.SetRateLimit(inst, 5000, 0)
	_, err = c.GetJob(ctx, inst, "canary", "repo", run.JobIDs[0])
	note(err) // rate limited
	_, err = c.ListHookDeliveries(ctx, 303, github.DeliveryQuery{Status: "failure"})
	note(err)
	note(c.RedeliverHookDelivery(ctx, 303, 1))
	_, err = c.OrgInstallation(ctx, "canary")
	note(err)
	_, err = github.ParsePrivateKey(keyPEM[:len(keyPEM)/2])
	note(err)

	haystack := e.logs.String() + "\n" + strings.Join(errs, "\n") + "\n" +
		fmtAll(jc) + fmtAll(tok) + mustJSON(t, jc) + mustJSON(t, tok)
	if !strings.Contains(haystack, "generate_jit_config") || !strings.Contains(haystack, "rate limit") {
		t.Fatalf("the log did not capture the calls:\n%s", haystack)
	}
	checkNoCredential(t, haystack, keyPEM, append(e.sim.Secrets(), canary, jc.EncodedJITConfig.Reveal(), tok.Token.Reveal(),
		base64.StdEncoding.EncodeToString(key.D.Bytes())[:24]))
}

// checkNoCredential fails t if haystack holds any of needles or a line of
// the key keyPEM.
func checkNoCredential(t *testing.T, haystack string, keyPEM []byte, needles []string) {
	t.Helper()
	for _, line := range strings.Split(string(keyPEM), "\n") {
		if len(line) > 20 && !strings.HasPrefix(line, "-----") {
			needles = append(needles, line)
		}
	}
	if len(needles) < 10 {
		t.Fatalf("only %d canaries to look for", len(needles))
	}
	for _, n := range needles {
		if strings.Contains(haystack, n) {
			t.Fatalf("a credential leaked into logs or errors: %.12s…", n)
		}
	}
}
