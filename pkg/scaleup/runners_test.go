package scaleup_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/freshness"
	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/runnerversion"
	"github.com/skiffci/skiff/pkg/scaleup"
	"github.com/skiffci/skiff/pkg/store"
)

// runnersEnv is a scale-up whose freshness check reads the simulator's
// runner releases through the GitHub client.
func runnersEnv(t *testing.T) (*env, *store.RunnerMemory) {
	t.Helper()
	state := store.NewRunnerMemory()
	var e *env
	e = newEnv(t, func(o *scaleup.Options) {
		src := runnerversion.SourceFunc(func(ctx context.Context) ([]runnerversion.Release, error) {
			return e.gh.RunnerReleases(ctx, freshness.Installation(ctx))
		})
		f, err := freshness.New(freshness.Options{Pools: o.Pools, State: state, Source: src, Now: o.Now})
		if err != nil {
			t.Fatal(err)
		}
		o.Runners = f
	})
	e.sim.SetRunnerReleases([]ghsim.RunnerRelease{
		{Version: "2.334.0", Published: start.AddDate(0, 0, -2), SHA256: map[string]string{"linux-x64": strings.Repeat("4", 64)}},
		{Version: "2.333.0", Published: start.AddDate(0, 0, -40), SHA256: map[string]string{"linux-x64": strings.Repeat("3", 64)}},
	})
	return e, state
}

// A pool that follows the releases hands its runners the newest release and
// its checksum; the next day's check follows a new release.
func TestRegistrationNamesTheLatestRunner(t *testing.T) {
	t.Parallel()
	e, _ := runnersEnv(t)
	ctx := context.Background()
	j := job(100)
	j.InstallationID = e.inst
	if r := e.handle(ctx, e.svc, message(j, 1)); len(r.BatchItemFailures) != 0 {
		t.Fatalf("failures %v\n%s", r, e.logs)
	}
	check := func(version, sum string) {
		t.Helper()
		found := false
		for _, r := range e.regs.all() {
			if r.RunnerVersion == version && r.RunnerSHA256 == sum {
				found = true
			}
		}
		if !found {
			t.Errorf("no registration names runner %s with its checksum: %+v", version, e.regs.all())
		}
	}
	check("2.334.0", strings.Repeat("4", 64))
	e.sim.SetRunnerReleases([]ghsim.RunnerRelease{
		{Version: "2.335.0", Published: start.Add(time.Hour), SHA256: map[string]string{"linux-x64": strings.Repeat("5", 64)}},
		{Version: "2.334.0", Published: start.AddDate(0, 0, -2), SHA256: map[string]string{"linux-x64": strings.Repeat("4", 64)}},
	})
	e.clock.advance(25 * time.Hour)
	j = job(200)
	j.InstallationID = e.inst
	if r := e.handle(ctx, e.svc, message(j, 1)); len(r.BatchItemFailures) != 0 {
		t.Fatalf("failures %v", r)
	}
	check("2.335.0", strings.Repeat("5", 64))
	if n := e.sim.Requests(ghsim.OpListReleases); n != 2 {
		t.Errorf("%d release calls over two days, want 2", n)
	}
}

// A held pool launches nothing and dead-letters its jobs with the fix,
// without spending a JIT configuration; another pool launches.
func TestHeldPoolDeadLettersWithTheFix(t *testing.T) {
	t.Parallel()
	e, state := runnersEnv(t)
	ctx := context.Background()
	if _, err := state.HoldPool(ctx, store.RunnerHold{Pool: "cpu", Version: "2.334.0", Reason: freshness.ReasonOutdated,
		Detail: "GitHub refuses runner 2.334.0 (deprecated: exit code 7). Fix: rebuild the image", At: start,
		Until: start.Add(freshness.DefaultHoldFor)}); err != nil {
		t.Fatal(err)
	}
	held, other := job(300), job(301, "oss")
	held.InstallationID, other.InstallationID = e.inst, e.inst
	e.handle(ctx, e.svc, message(held, 1), message(other, 1))
	dead := e.dlq.DeadLetters()
	if len(dead) != 1 || dead[0].JobID != 300 || dead[0].Reason != freshness.ReasonOutdated || !strings.Contains(dead[0].Detail, "Fix: rebuild the image") {
		t.Fatalf("dead letters %+v", dead)
	}
	if got := e.counter.Get(scaleup.MetricSkipped, freshness.ReasonOutdated); got != 1 {
		t.Errorf("skipped runner_outdated = %d", got)
	}
	if n := e.sim.Requests(ghsim.OpGenerateOrgJITConfig); n != 1 {
		t.Errorf("%d JIT configurations generated, want 1 (the other pool's)", n)
	}
	if live := e.ec2.Live(); len(live) != 1 {
		t.Errorf("%d instances, want 1", len(live))
	}
}
