package github_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/runnerversion"
)

// The client reads the releases' versions, dates and checksums in one call
// against an installation's budget; with no installation given it acts as
// a known one, and before any is known it says so.
func TestRunnerReleases(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	ctx := ctxT(t)
	e.sim.SetRunnerReleases([]ghsim.RunnerRelease{
		{Version: "2.334.0", Published: t0.AddDate(0, 0, -3), SHA256: map[string]string{"linux-x64": strings.Repeat("a", 64)}},
		{Version: "2.333.0", Published: t0.AddDate(0, 0, -40), SHA256: map[string]string{"linux-x64": strings.Repeat("b", 64)}},
		{Version: "nightly", Published: t0.AddDate(0, 0, -1)},
	})
	if _, err := e.client.RunnerReleases(ctx, 0); !errors.Is(err, github.ErrNotInstalled) {
		t.Fatalf("no installation known: %v", err)
	}
	rs, err := e.client.RunnerReleases(ctx, e.inst)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 || rs[0].Version != (runnerversion.Version{Major: 2, Minor: 334}) || !rs[0].PublishedAt.Equal(t0.AddDate(0, 0, -3)) ||
		rs[0].SHA256["linux-x64"] != strings.Repeat("a", 64) || rs[1].SHA256["linux-x64"] != strings.Repeat("b", 64) {
		t.Fatalf("releases %+v", rs)
	}
	if _, err := e.client.RunnerReleases(ctx, 0); err != nil {
		t.Fatalf("acting as the known installation: %v", err)
	}
	if n := e.sim.Requests(ghsim.OpListReleases); n != 2 {
		t.Errorf("%d release calls, want 2", n)
	}
}

// Nothing in the client assumes an installation token's length or prefix:
// with 600-character credentials of another format, a job is read, a JIT
// configuration and a registration token are created, and the runner
// registration they make passes the boot script's contract.
func TestLongCredentials(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{simOpts: ghsim.Options{CredentialLength: 600}})
	ctx := ctxT(t)
	gid, err := e.client.RunnerGroupID(ctx, e.inst, "acme", "Default")
	if err != nil {
		t.Fatal(err)
	}
	jc, err := e.client.GenerateJITConfig(ctx, e.inst, github.OrgScope("acme"), github.JITRequest{Name: "long", RunnerGroupID: gid, Labels: []string{"x"}})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := e.client.RegistrationToken(ctx, e.inst, github.OrgScope("acme"))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(tok.Token.Reveal()); n < 600 {
		t.Fatalf("registration token of %d characters: the simulator did not lengthen it", n)
	}
	long := false
	for _, s := range e.sim.Secrets() {
		long = long || strings.HasPrefix(s, "v2.") && len(s) >= 603
	}
	if !long {
		t.Fatal("no long installation token was issued")
	}
	for _, r := range []provider.Registration{
		{Mode: provider.ModeJIT, JITConfig: jc.EncodedJITConfig.Reveal(), RunnerName: "long"},
		{Mode: provider.ModeToken, Token: tok.Token.Reveal(), URL: "https://github.com/acme", RunnerName: "long", Labels: []string{"x"}},
	} {
		if err := r.Validate(); err != nil {
			t.Errorf("a long credential breaks the registration contract: %v", err)
		}
	}
}
