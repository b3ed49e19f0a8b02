package groups_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"slices"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/allow"
	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/groups"
	"github.com/skiffci/skiff/pkg/telemetry"
)

const keeperPools = `
version: 1
pools:
  - name: cpu
    labels: [cpu]
    process: {}
  - name: oss
    labels: [oss]
    process: {}
    visibility: [public]
  - name: web
    labels: [web]
    process: {}
    scope: {repositories: [acme/site]}
  - name: gpu
    labels: [gpu]
    process: {}
    runnerGroup: gpu
`

// groupOps are the simulator's operations a keeper pass may call.
var groupOps = []string{ghsim.OpListRunnerGroups, ghsim.OpCreateRunnerGroup, ghsim.OpUpdateRunnerGroup,
	ghsim.OpListGroupRepos, ghsim.OpSetGroupRepos, ghsim.OpListInstallationRepos}

func groupRequests(s *ghsim.Server) int {
	n := 0
	for _, op := range groupOps {
		n += s.Requests(op)
	}
	return n
}

type keeperEnv struct {
	sim       *ghsim.Server
	clock     *ghsim.Clock
	keeper    *groups.Keeper
	app, site int64
	operators ghsim.GroupAccess
	counter   *telemetry.Memory
}

func newKeeperEnv(t *testing.T, entries []string) *keeperEnv {
	t.Helper()
	clock := ghsim.NewClock(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC))
	sim := ghsim.New(ghsim.Options{Now: clock.Now, BasePath: "/api/v3"}) // GHES's base path
	t.Cleanup(sim.Close)
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	sim.AddApp(ghsim.AppConfig{ID: 7, PublicKey: &k.PublicKey})
	e := &keeperEnv{sim: sim, clock: clock, counter: &telemetry.Memory{}}
	e.app = sim.AddRepo("acme", "app")
	if err := sim.SetVisibility("acme/site", ghsim.VisibilityPublic); err != nil {
		t.Fatal(err)
	}
	e.site = sim.AddRepo("acme", "site")
	sim.AddRunnerGroup("acme", "gpu")
	e.operators = ghsim.GroupAccess{Visibility: ghsim.GroupSelected, Repositories: []int64{e.app}, AllowsPublic: true}
	if err := sim.SetRunnerGroupAccess("acme", "gpu", e.operators); err != nil {
		t.Fatal(err)
	}
	sim.AddRunnerGroup("acme", "skiffish") // a group of the operator's that is not skiff-NAME
	sim.Install(7, "acme")
	gh, err := github.NewClient([]github.App{{ID: 7, Key: k}}, github.WithBaseURL(sim.URL()), github.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	a, err := allow.Parse(entries)
	if err != nil {
		t.Fatal(err)
	}
	e.keeper, err = groups.New(groups.Options{Pools: parsePools(t, keeperPools), Allow: a, GitHub: gh, Now: clock.Now, Counter: e.counter})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// pass runs a keeper pass and checks that the calls it reports are the
// requests the simulator served.
func (e *keeperEnv) pass(t *testing.T) groups.Report {
	t.Helper()
	before := groupRequests(e.sim)
	rep := e.keeper.Keep(context.Background())
	if served := groupRequests(e.sim) - before; served != rep.Calls {
		t.Fatalf("pass reported %d calls, the simulator served %d", rep.Calls, served)
	}
	if rep.Errors > 0 {
		t.Fatalf("pass had %d errors", rep.Errors)
	}
	return rep
}

func (e *keeperEnv) access(t *testing.T, group string) ghsim.GroupAccess {
	t.Helper()
	a, ok := e.sim.RunnerGroupAccess("acme", group)
	if !ok {
		t.Fatalf("no runner group %s", group)
	}
	return a
}

// TestKeeperCreatesThenCallsNothingUntilSomethingChanges: the first pass
// creates the pools' groups as they should admit; a pass where nothing
// changed makes no call; a hand edit is put right at the next check; the
// operator's groups are never touched.
func TestKeeperCreatesThenCallsNothingUntilSomethingChanges(t *testing.T) {
	t.Parallel()
	e := newKeeperEnv(t, []string{"acme"})

	rep := e.pass(t)
	// One listing of the groups, one of the installation's repositories
	// (web selects acme/site), three creations.
	if rep.Created != 3 || rep.Calls != 5 {
		t.Errorf("first pass = %+v, want 3 groups created in 5 calls", rep)
	}
	if a := e.access(t, "skiff-cpu"); a.Visibility != ghsim.GroupAll || a.AllowsPublic || a.RestrictedToWorkflows {
		t.Errorf("skiff-cpu = %+v, want every repository, no public one", a)
	}
	if a := e.access(t, "skiff-oss"); a.Visibility != ghsim.GroupAll || !a.AllowsPublic {
		t.Errorf("skiff-oss = %+v, want every repository, public ones allowed", a)
	}
	if a := e.access(t, "skiff-web"); a.Visibility != ghsim.GroupSelected || !slices.Equal(a.Repositories, []int64{e.site}) || a.AllowsPublic {
		t.Errorf("skiff-web = %+v, want acme/site (%d) only, no public repository", a, e.site)
	}

	for i := range 3 {
		e.clock.Advance(time.Minute)
		if rep := e.pass(t); rep.Calls != 0 || rep.Checked != 0 {
			t.Errorf("unchanged pass %d = %+v, want no call", i, rep)
		}
	}

	// A hand edit: the next check (an hour after the last) puts it right.
	if err := e.sim.SetRunnerGroupAccess("acme", "skiff-cpu", ghsim.GroupAccess{Visibility: ghsim.GroupAll, AllowsPublic: true}); err != nil {
		t.Fatal(err)
	}
	if err := e.sim.SetRunnerGroupAccess("acme", "skiff-web", ghsim.GroupAccess{Visibility: ghsim.GroupSelected, Repositories: []int64{e.app, e.site}}); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(groups.DefaultRecheckEvery)
	rep = e.pass(t)
	// List groups, list repositories, update skiff-cpu, read and set skiff-web's repositories.
	if rep.Checked != 1 || rep.Updated != 1 || rep.Repositories != 1 || rep.Calls != 5 {
		t.Errorf("recheck pass = %+v, want 1 update and 1 repository set in 5 calls", rep)
	}
	if a := e.access(t, "skiff-cpu"); a.AllowsPublic {
		t.Errorf("skiff-cpu = %+v after the recheck, want no public repository", a)
	}
	if a := e.access(t, "skiff-web"); !slices.Equal(a.Repositories, []int64{e.site}) {
		t.Errorf("skiff-web = %+v after the recheck, want acme/site only", a)
	}
	if rep := e.pass(t); rep.Calls != 0 {
		t.Errorf("pass after the recheck = %+v, want no call", rep)
	}
	// An hourly check that finds everything right: the listing, the
	// installation's repositories and skiff-web's repositories; no change.
	e.clock.Advance(groups.DefaultRecheckEvery)
	if rep := e.pass(t); rep.Calls != 3 || rep.Created+rep.Updated+rep.Repositories != 0 {
		t.Errorf("hourly check of right groups = %+v, want 3 calls and no change", rep)
	}
	if a := e.access(t, "gpu"); a.Visibility != e.operators.Visibility || !a.AllowsPublic || !slices.Equal(a.Repositories, e.operators.Repositories) {
		t.Errorf("the operator's group gpu = %+v, want untouched %+v", a, e.operators)
	}
	if a := e.access(t, "skiffish"); a.Visibility != ghsim.GroupAll || a.AllowsPublic {
		t.Errorf("the operator's group skiffish = %+v, want untouched", a)
	}
	if n := e.sim.Requests(ghsim.OpUpdateRunnerGroup); n != 1 {
		t.Errorf("%d group updates in all, want 1 (skiff-cpu's)", n)
	}
}

// TestKeeperEnsureChecksNow: Ensure (scale-up, on a missing group) reads
// GitHub whatever the last check, and creates a group deleted meanwhile.
func TestKeeperEnsureChecksNow(t *testing.T) {
	t.Parallel()
	e := newKeeperEnv(t, []string{"acme/app"})
	if err := e.keeper.Ensure(context.Background(), "ACME"); err != nil {
		t.Fatal(err)
	}
	// acme/app is the one allow-listed repository: cpu and oss select it,
	// web's scope (acme/site) meets nothing, so it needs no group.
	for _, g := range []string{"skiff-cpu", "skiff-oss"} {
		if a := e.access(t, g); a.Visibility != ghsim.GroupSelected || !slices.Equal(a.Repositories, []int64{e.app}) {
			t.Errorf("%s = %+v, want acme/app only", g, a)
		}
	}
	if _, ok := e.sim.RunnerGroupAccess("acme", "skiff-web"); ok {
		t.Error("skiff-web created for a pool that serves no allow-listed repository")
	}
	before := groupRequests(e.sim)
	if err := e.keeper.Ensure(context.Background(), "acme"); err != nil {
		t.Fatal(err)
	}
	if groupRequests(e.sim) == before {
		t.Error("Ensure made no call")
	}
	if rep := e.pass(t); rep.Calls != 0 {
		t.Errorf("pass after Ensure = %+v, want no call", rep)
	}
}

// TestKeeperConcurrentEnsures: a burst of scale-up workers that all find
// the group missing create each group once, without an error.
func TestKeeperConcurrentEnsures(t *testing.T) {
	t.Parallel()
	e := newKeeperEnv(t, []string{"acme"})
	errs := make(chan error, 8)
	for range 8 {
		go func() { errs <- e.keeper.Ensure(context.Background(), "acme") }()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if n := e.sim.Requests(ghsim.OpCreateRunnerGroup); n != 3 {
		t.Errorf("%d group creations for 3 groups", n)
	}
	if n := e.sim.Requests(ghsim.OpListRunnerGroups); n > 8 {
		t.Errorf("%d group listings for 8 Ensure calls", n)
	}
}

// TestKeeperAnyOwnerKeepsTheScopesOrganizations: with the allow-list "*",
// a pass keeps the organizations the pools' scopes name.
func TestKeeperAnyOwnerKeepsTheScopesOrganizations(t *testing.T) {
	t.Parallel()
	e := newKeeperEnv(t, []string{"*"})
	if rep := e.pass(t); rep.Orgs != 1 || rep.Created != 3 {
		t.Errorf("pass = %+v, want acme (named by web's scope) with 3 groups created", rep)
	}
}
