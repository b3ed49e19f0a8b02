package github_test

import (
	"errors"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/github/ghsim"
)

// multiEnv has two Apps, both installed on "acme", and only the second on "solo".
type multiEnv struct {
	*env
	appB, instB, soloInst int64
	client2               *github.Client
}

func newMultiEnv(t *testing.T) *multiEnv {
	t.Helper()
	e := newEnv(t, envConfig{})
	m := &multiEnv{env: e, appB: 202}
	kb := testKey(t, 1)
	e.sim.AddApp(ghsim.AppConfig{ID: m.appB, PublicKey: &kb.PublicKey})
	m.instB = e.sim.Install(m.appB, "acme")
	e.sim.AddRepo("solo", "tool")
	m.soloInst = e.sim.Install(m.appB, "solo")
	c, err := github.NewClient([]github.App{{ID: e.appID, Key: testKey(t, 0)}, {ID: m.appB, Key: kb, Name: "b"}},
		github.WithBaseURL(e.sim.URL()), github.WithClock(e.clock.Now), github.WithSleep(e.sleep))
	if err != nil {
		t.Fatal(err)
	}
	m.client2 = c
	return m
}

func TestSeveralAppsShareTheLoad(t *testing.T) {
	t.Parallel()
	m := newMultiEnv(t)
	ctx := ctxT(t)
	for range 100 {
		if _, err := m.client2.ListRunners(ctx, m.inst, github.OrgScope("acme"), ""); err != nil {
			t.Fatal(err)
		}
	}
	usedA := 5000 - m.sim.RateLimitRemaining(m.inst)
	usedB := 5000 - m.sim.RateLimitRemaining(m.instB)
	if usedA < 40 || usedB < 40 || usedA+usedB != 100 {
		t.Fatalf("App A made %d calls, App B %d; want the 100 shared", usedA, usedB)
	}
	if m.sim.TokensMinted(m.inst) != 1 || m.sim.TokensMinted(m.instB) != 1 {
		t.Fatal("want one token per installation")
	}
	if got := m.client2.Apps(); len(got) != 2 || got[0] != m.appID || got[1] != m.appB {
		t.Fatalf("Apps() = %v", got)
	}
}

func TestSeveralAppsPreferTheLargestBudget(t *testing.T) {
	t.Parallel()
	m := newMultiEnv(t)
	ctx := ctxT(t)
	m.sim.SetRateLimit(m.inst, 5000, 300)
	for range 4 { // learn both budgets
		if _, err := m.client2.ListRunners(ctx, m.inst, github.OrgScope("acme"), ""); err != nil {
			t.Fatal(err)
		}
	}
	beforeA := m.sim.RateLimitRemaining(m.inst)
	for range 50 {
		if _, err := m.client2.ListRunners(ctx, m.inst, github.OrgScope("acme"), ""); err != nil {
			t.Fatal(err)
		}
	}
	if got := m.sim.RateLimitRemaining(m.inst); got != beforeA {
		t.Fatalf("the nearly exhausted App made %d calls, want 0", beforeA-got)
	}
	if len(m.slept()) != 0 {
		t.Fatalf("paced %v although another App had budget", m.slept())
	}
}

func TestSeveralAppsFindTheInstalledOne(t *testing.T) {
	t.Parallel()
	m := newMultiEnv(t)
	ctx := ctxT(t)
	tests := []struct {
		name string
		hint int64
	}{
		{"hinted", m.soloInst},
		{"looked up", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := m.client2.ListRunners(ctx, tt.hint, github.RepoScope("solo", "tool"), ""); err != nil {
				t.Fatal(err)
			}
		})
	}
	inst, err := m.client2.OrgInstallation(ctx, "solo")
	if err != nil || inst.ID != m.soloInst || inst.AppID != m.appB {
		t.Fatalf("OrgInstallation(solo) = %+v, %v", inst, err)
	}
	if _, err := m.client2.ListHookDeliveries(ctx, 0, github.DeliveryQuery{}); err == nil {
		t.Fatal("ListHookDeliveries with App 0 and two Apps: want an error naming the ambiguity")
	}
	if _, err := m.client2.ListHookDeliveries(ctx, 999, github.DeliveryQuery{}); err == nil {
		t.Fatal("unknown App accepted")
	}
	m.sim.AddOrg("nobody")
	if _, err := m.client2.ListRunners(ctx, 0, github.OrgScope("nobody"), ""); !errors.Is(err, github.ErrNotInstalled) {
		t.Fatalf("no App on the org: %v, want ErrNotInstalled", err)
	}
}

// TestHintForAnotherApp: with several Apps, an installation id from a
// webhook is minted with whichever App owns it.
func TestHintForAnotherApp(t *testing.T) {
	t.Parallel()
	m := newMultiEnv(t)
	m.sim.SetFault(ghsim.OpGetOrgInstallation, ghsim.Fault{ErrorRate: 1, ErrorStatus: 500}) // no discovery
	m.sim.SetFault(ghsim.OpGetRepoInstallation, ghsim.Fault{ErrorRate: 1, ErrorStatus: 500})
	if _, err := m.client2.ListRunners(ctxT(t), m.soloInst, github.OrgScope("solo"), ""); err != nil {
		t.Fatal(err)
	}
	if m.sim.TokensMinted(m.soloInst) != 1 {
		t.Fatal("the hinted installation was not used")
	}
}

// TestDiscoveryFailureIsNotRepeatedEveryCall: with several Apps, a webhook's installation
// id is used while discovering the others fails; the failed discovery is retried after a
// minute, not on every call (each costs up to 4 requests and seconds of backoff).
func TestDiscoveryFailureIsNotRepeatedEveryCall(t *testing.T) {
	t.Parallel()
	m := newMultiEnv(t)
	m.sim.SetFault(ghsim.OpGetOrgInstallation, ghsim.Fault{ErrorRate: 1, ErrorStatus: 500})
	ctx := ctxT(t)
	for range 10 {
		if _, err := m.client2.ListRunners(ctx, m.soloInst, github.OrgScope("solo"), ""); err != nil {
			t.Fatal(err)
		}
	}
	if n := m.sim.Requests(ghsim.OpGetOrgInstallation); n != 4 {
		t.Fatalf("%d discovery requests for 10 calls, want one discovery (4 attempts)", n)
	}
	m.sim.ClearFaults()
	m.clock.Advance(2 * time.Minute)
	if _, err := m.client2.ListRunners(ctx, m.soloInst, github.OrgScope("solo"), ""); err != nil {
		t.Fatal(err)
	}
	if n := m.sim.Requests(ghsim.OpGetOrgInstallation); n <= 4 {
		t.Fatal("discovery was not tried again after its back-off")
	}
}
