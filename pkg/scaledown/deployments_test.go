package scaledown_test

import (
	"context"
	"crypto/rsa"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/provider/ec2"
	"github.com/skiffci/skiff/pkg/provider/ec2/ec2fake"
	"github.com/skiffci/skiff/pkg/queue"
	"github.com/skiffci/skiff/pkg/room"
	"github.com/skiffci/skiff/pkg/scaledown"
	"github.com/skiffci/skiff/pkg/store"
)

// TestTwoDeploymentsOneAccount: two skiff deployments (two stacks, or two
// daemons) launch into one EC2 account and region and reconcile the same
// GitHub organisation. Each reconciler sees only its own deployment's
// instances: an instance of the other deployment, which has no record in
// its ledger, is not an orphan of its own; a runner registered on GitHub
// but not yet connected (offline) by the other is not a ghost of its own
// (runner names carry the deployment); and no pass of either, however
// late, ends the other's runner.
func TestTwoDeploymentsOneAccount(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newAccount(t)
	now, clock, sim, fake := w.now, w.clock, w.sim, w.fake
	deps := []*deployment{w.deploy(t, 0, "alpha"), w.deploy(t, 1, "beta")}

	for _, d := range deps {
		listed, err := d.provider.List(ctx, provider.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		if len(listed) != 1 || listed[0].ID != d.instance {
			t.Errorf("deployment %s lists %+v, want its own instance %s only", d.name, listed, d.instance)
		}
	}
	// Listed by id (the ledger's instance ids), the other's instance is
	// not one of its own either.
	byID, err := deps[0].provider.List(ctx, provider.Filter{IDs: []string{deps[0].instance, deps[1].instance}})
	if err != nil {
		t.Fatal(err)
	}
	if len(byID) != 1 || byID[0].ID != deps[0].instance {
		t.Errorf("deployment alpha lists by id %+v, want its own instance only", byID)
	}
	// Passes well past the orphan grace: each deployment's runner is still
	// booting as far as its own ledger knows, and is no orphan of the other.
	for _, after := range []time.Duration{time.Minute, 20 * time.Minute} {
		clock.Advance(now.Add(after).Sub(clock.Now()))
		for _, d := range deps {
			if _, err := d.down.Reconcile(ctx); err != nil {
				t.Fatal(err)
			}
		}
		live := map[string]bool{}
		for _, in := range fake.Live() {
			live[in.ID] = true
		}
		registered := map[string]bool{}
		for _, r := range sim.Runners() {
			registered[r.Name] = true
		}
		for _, d := range deps {
			if !live[d.instance] {
				t.Fatalf("after %s, deployment %s's instance %s was ended by the other deployment", after, d.name, d.instance)
			}
			if !registered[d.runner] {
				t.Fatalf("after %s, deployment %s's runner %s was deleted from GitHub by the other deployment", after, d.name, d.runner)
			}
		}
	}
}

// account is one AWS account and region (one EC2 fake) and one GitHub
// organisation that deployments share.
type account struct {
	now   time.Time
	clock *ghsim.Clock
	key   *rsa.PrivateKey
	sim   *ghsim.Server
	inst  int64
	pools *pool.Config
	spec  pool.Spec
	log   *slog.Logger
	fake  *ec2fake.Fake
}

func newAccount(t *testing.T) *account {
	t.Helper()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	clock := ghsim.NewClock(now)
	key := testenv.Key()
	sim := ghsim.New(ghsim.Options{Now: clock.Now})
	t.Cleanup(sim.Close)
	inst := installAcme(sim, key)
	// A boot timeout past the test's passes: each runner is booting as far
	// as its own ledger knows, so only the other deployment could end it.
	pools := parsePools(t, poolsYAML+"    bootTimeout: 1h\n")
	spec, err := pools.Resolve([]string{"self-hosted", "linux", "x64"})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	fake := ec2fake.New() // one account, one region
	fake.SetClock(clock.Now)

	return &account{now: now, clock: clock, key: key, sim: sim, inst: inst, pools: pools, spec: spec, log: log, fake: fake}
}

// deployment is one deployment of the account and the runner it launched.
type deployment struct {
	name     string
	provider *ec2.Provider
	down     *scaledown.Service
	instance string
	runner   string
}

// deploy is deployment name (the i-th): its scale-down and one runner it
// launched for a job, recorded in its own ledger and registered on
// GitHub, as scale-up does.
func (w *account) deploy(t *testing.T, i int, name string) *deployment {
	t.Helper()
	ctx := context.Background()
	gh := appClient(t, w.sim, w.key, w.clock.Now)
	prov, err := ec2.NewProvider(ec2.ProviderOptions{API: w.fake, Registrations: noRegistrations{}, Capacity: room.CapacityMemory{Store: room.NewMemory()},
		Partition: "aws", Region: "eu-west-1", Account: "123456789012", Deployment: name, Logger: w.log, Now: w.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	led := ledger.NewMemory(w.clock.Now)
	jobs := store.NewMemory()
	jobs.SetClock(w.clock.Now)
	down, err := scaledown.New(scaledown.Options{Pools: w.pools, Ledger: led, Claims: ledger.NewLaunchMemory(), Jobs: jobs,
		Provider: prov, GitHub: gh, Queue: &queue.Memory{}, Logger: w.log, Now: w.clock.Now, Deployment: name,
		Scopes: []github.Scope{github.OrgScope("acme")}})
	if err != nil {
		t.Fatal(err)
	}
	// Each deployment launches one runner for a job, recorded in its
	// own ledger, as scale-up does.
	job := int64(100 + i)
	runner := names.RunnerName(name, job, 1)
	if n, err := led.Reserve(ctx, "cpu", 10, []ledger.Runner{{Name: runner, Pool: "cpu", JobID: job, ReservedAt: w.now}}); err != nil || n != 1 {
		t.Fatalf("reserving: %d, %v", n, err)
	}
	plan, err := prov.Plan(ctx, provider.Launch{Token: name + "-launch", Spec: w.spec,
		Runners: []provider.RunnerRequest{{Name: runner, JobID: job, RunID: job, Repository: "acme/app", Owner: "acme"}}})
	if err != nil {
		t.Fatal(err)
	}
	// Registered on GitHub as scale-up does; its runner has not
	// connected yet, so GitHub lists it offline.
	jit, err := gh.GenerateJITConfig(ctx, w.inst, github.OrgScope("acme"), github.JITRequest{Name: runner, RunnerGroupID: 1,
		Labels: []string{"self-hosted", "linux", "x64"}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := prov.Launch(ctx, plan, []provider.Registration{{Mode: provider.ModeJIT, JITConfig: jit.EncodedJITConfig.Reveal(), RunnerName: runner}})
	if err != nil || len(res.Runners) != 1 || res.Runners[0].Err != nil {
		t.Fatalf("launching for %s: %+v, %v", name, res, err)
	}
	if err := led.Launched(ctx, runner, ledger.LaunchReport{InstanceID: res.Runners[0].Instance.ID, At: w.now}); err != nil {
		t.Fatal(err)
	}
	return &deployment{name: name, provider: prov, down: down, instance: res.Runners[0].Instance.ID, runner: runner}
}
