package scaleup_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/freshness"
	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/runnerversion"
	"github.com/skiffci/skiff/pkg/store"
)

// TestReleaseCallsPerDay counts the GitHub calls the release check costs a
// deployment, on the simulator with an injected clock, over a week: the
// reconciler's pass every minute, a job every 3 minutes in scale-up, a new
// scale-up Lambda container every 2 hours and two alive at once, one state
// table; on day 3 GitHub fails the release list for 2 hours across the
// moment the list turns a day old. The figures are in docs/performance.md.
func TestReleaseCallsPerDay(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.sim.SetRunnerReleases([]ghsim.RunnerRelease{
		{Version: "2.334.0", Published: start.AddDate(0, 0, -2), SHA256: map[string]string{"linux-x64": strings.Repeat("4", 64)}},
	})
	state := store.NewRunnerMemory()
	src := runnerversion.SourceFunc(func(ctx context.Context) ([]runnerversion.Release, error) {
		return e.gh.RunnerReleases(ctx, freshness.Installation(ctx))
	})
	service := func() *freshness.Service {
		f, err := freshness.New(freshness.Options{Pools: e.opts.Pools, State: state, Source: src, Now: e.clock.now})
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	follows := pool.Shared{Pool: "cpu", RunnerVersion: runnerversion.Latest, Architecture: "x64"}
	ctx := freshness.WithInstallation(context.Background(), e.inst)
	reconciler := service()
	containers := []*freshness.Service{service(), service()}
	const outageDay, outageFrom, outageFor = 3, 24*60 - 30, 120 // minutes: from 30 minutes before the list's day ends
	var perDay []int
	for day := range 7 {
		before := e.sim.Requests(ghsim.OpListReleases)
		for minute := range 24 * 60 {
			if day == outageDay && minute == outageFrom {
				e.sim.SetFault(ghsim.OpListReleases, ghsim.Fault{ErrorRate: 1})
			}
			if day == outageDay && minute == outageFrom+outageFor || day == outageDay+1 && minute == outageFrom+outageFor-24*60 {
				e.sim.ClearFaults()
			}
			reconciler.Observe(ctx, nil)
			if minute%120 == 0 { // the older container is retired, a cold one starts
				containers = []*freshness.Service{containers[1], service()}
			}
			if minute%3 == 0 {
				if d, err := containers[minute/3%2].Download(ctx, follows); err != nil || d.Version != "2.334.0" {
					t.Fatalf("day %d minute %d: download %+v %v", day, minute, d, err)
				}
			}
			e.clock.advance(time.Minute)
		}
		perDay = append(perDay, e.sim.Requests(ghsim.OpListReleases)-before)
	}
	t.Logf("release calls per day: %v (outage of %d minutes on day %d)", perDay, outageFor, outageDay)
	for day, n := range perDay {
		if day == 0 || day == outageDay || day == outageDay+1 {
			continue // the first list; the outage's days
		}
		if n != 1 {
			t.Errorf("day %d: %d release calls, want 1 (one a day for the deployment)", day, n)
		}
	}
	// While GitHub fails, each process tries once per RetryAfter (10
	// minutes), each try the client's 4 requests (3 retries of a 5xx): the
	// reconciler and the two scale-up containers alive then.
	outage := perDay[outageDay] + perDay[outageDay+1]
	if most := 2 + 3*4*(outageFor/10+1); outage < 3 || outage > most {
		t.Errorf("%d release calls over the outage's days, want 3..%d (a try per 10 minutes per process while GitHub fails)", outage, most)
	}
}
