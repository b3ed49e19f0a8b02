package main

import (
	"reflect"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/pool/poolfile"
)

// labPools is the demo's default pools file.
func labPools(t *testing.T) *pool.Config {
	t.Helper()
	pools, err := poolfile.Load("../../examples/lab.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return pools
}

// TestDemoLimits: without a limit, one GPU job at a time and the pools
// file's maxRunners; with one, every pool gets that many slots.
func TestDemoLimits(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		limit      int
		want       map[string]int
		wantMaxRun map[string]int
	}{
		{"the pools file's", 0, map[string]int{"gpu": 1}, map[string]int{"standard": 8, "large": 2, "gpu": 1}},
		{"three slots a pool", 3, map[string]int{"standard": 3, "large": 3, "gpu": 3}, map[string]int{"standard": 3, "large": 3, "gpu": 3}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pools := labPools(t)
			if got := demoLimits(pools, tc.limit); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("demoLimits = %v, want %v", got, tc.want)
			}
			got := map[string]int{}
			for _, p := range pools.Pools {
				got[p.Name] = p.MaxRunners
			}
			if !reflect.DeepEqual(got, tc.wantMaxRun) {
				t.Errorf("maxRunners = %v, want %v", got, tc.wantMaxRun)
			}
		})
	}
}

// TestDemoTimeout: 5 minutes for make demo's burst, a second more for
// every further job.
func TestDemoTimeout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		jobs int
		want time.Duration
	}{
		{0, 5 * time.Minute},
		{40, 5 * time.Minute},
		{41, 5*time.Minute + time.Second},
		{1000, 21 * time.Minute},
	} {
		if got := demoTimeout(tc.jobs); got != tc.want {
			t.Errorf("demoTimeout(%d) = %s, want %s", tc.jobs, got, tc.want)
		}
	}
}

// TestDemoBurst: the burst's mix of jobs, then one no pool takes and one
// cancelled; each job a pool takes is routed to its pool.
func TestDemoBurst(t *testing.T) {
	t.Parallel()
	cases := []struct {
		n         int
		wantNames []string
		wantPools []string
		wantTaken int
	}{
		{0, []string{"", ""}, []string{"", ""}, 0},
		{4, []string{"test", "test", "test", "compile", "", ""}, []string{"standard", "standard", "standard", "standard", "", ""}, 4},
		{10, []string{"test", "test", "test", "compile", "test", "test", "test", "compile", "bundle", "train", "", ""},
			[]string{"standard", "standard", "standard", "standard", "standard", "standard", "standard", "standard", "large", "gpu", "", ""}, 10},
	}
	pools := labPools(t)
	for _, tc := range cases {
		jobs := demoBurst(tc.n)
		taken := resolveDemoPools(jobs, pools, demoOrg+"/app")
		var names, poolNames []string
		for _, j := range jobs {
			names, poolNames = append(names, j.name), append(poolNames, j.pool)
		}
		if !reflect.DeepEqual(names, tc.wantNames) || !reflect.DeepEqual(poolNames, tc.wantPools) || taken != tc.wantTaken {
			t.Errorf("demoBurst(%d): names %q pools %q, %d taken; want %q %q, %d", tc.n, names, poolNames, taken, tc.wantNames, tc.wantPools, tc.wantTaken)
		}
		last := jobs[len(jobs)-2:]
		if last[0].launch || last[0].cancel || last[1].launch || !last[1].cancel {
			t.Errorf("demoBurst(%d) ends with %+v %+v, want a job no pool takes, then a cancelled one", tc.n, *last[0], *last[1])
		}
		if got := len(launchIDs(jobs)); got != tc.wantTaken {
			t.Errorf("launchIDs: %d ids, want %d", got, tc.wantTaken)
		}
	}
}

// TestCountJobStatuses counts completed and running jobs, nothing else.
func TestCountJobStatuses(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name                       string
		statuses                   map[int64]string
		wantCompleted, wantRunning int
	}{
		{"none", nil, 0, 0},
		{"mixed", map[int64]string{1: "completed", 2: "in_progress", 3: "queued", 4: "completed", 5: ""}, 2, 1},
	}
	for _, tc := range cases {
		if c, r := countJobStatuses(tc.statuses); c != tc.wantCompleted || r != tc.wantRunning {
			t.Errorf("%s: countJobStatuses = %d, %d; want %d, %d", tc.name, c, r, tc.wantCompleted, tc.wantRunning)
		}
	}
}
