package loadtest

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/metrics"
)

// TestSpreadSample: a spread's draws have its median and 95th percentile.
func TestSpreadSample(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		s    Spread
	}{
		{"cold pending", Spread{P50: 10 * time.Second, P95: 17 * time.Second}},
		{"narrow", Spread{P50: 600 * time.Millisecond, P95: 700 * time.Millisecond}},
		{"fixed", Spread{P50: 2 * time.Second, P95: 2 * time.Second}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(1, 2))
			var ds []float64
			for range 20000 {
				ds = append(ds, tc.s.sample(rng).Seconds())
			}
			slices.Sort(ds)
			p50, p95 := ds[len(ds)/2], ds[len(ds)*95/100]
			if math.Abs(p50/tc.s.P50.Seconds()-1) > 0.03 || math.Abs(p95/tc.s.P95.Seconds()-1) > 0.03 {
				t.Fatalf("p50 %.3f s, p95 %.3f s; want %s and %s within 3%%", p50, p95, tc.s.P50, tc.s.P95)
			}
		})
	}
	if d := (Spread{}).sample(rand.New(rand.NewPCG(1, 2))); d != 0 {
		t.Errorf("a zero spread drew %s, want 0", d)
	}
}

// TestModelStarts: the model-only table has one row per start kind, each
// phase from the kind's own figures, and the published targets hold: hot
// p50 ≤ 6 s, stopped p50 ≤ 15 s, cold p50 ≤ 25 s (RunsOn's figures, which
// the model's phases add up to).
func TestModelStarts(t *testing.T) {
	t.Parallel()
	rows, err := ModelStarts(EC2Latency, StartKinds, 2000, 42)
	if err != nil {
		t.Fatal(err)
	}
	byKind := map[string]metrics.StartRow{}
	for _, r := range rows {
		if r.Pool != ModelPool || r.Jobs != 2000 {
			t.Errorf("row %+v, want %d jobs of pool %q", r, 2000, ModelPool)
		}
		byKind[r.Kind] = r
	}
	cases := []struct {
		kind     StartKind
		totalP50 float64 // at most, seconds
		launch   bool    // an EC2 call
	}{
		{Cold, 25, true},
		{Stopped, 15, true},
		{Hot, 6, false},
	}
	for _, tc := range cases {
		r, ok := byKind[string(tc.kind)]
		if !ok {
			t.Fatalf("no %s row in %+v", tc.kind, rows)
		}
		if r.Total.P50 > tc.totalP50 || r.Total.P50 < tc.totalP50/3 {
			t.Errorf("%s: queued → assigned p50 %.1f s, want at most %.0f s and not below a third of it", tc.kind, r.Total.P50, tc.totalP50)
		}
		if (r.Launch.P50 > 0) != tc.launch {
			t.Errorf("%s: requested → launched p50 %.2f s, want an EC2 call %v", tc.kind, r.Launch.P50, tc.launch)
		}
		k := EC2Latency.Kinds[tc.kind]
		if want := (k.PendingToRunning.P50 + k.BootToOnline.P50).Seconds(); math.Abs(r.Boot.P50-want) > want*0.15 {
			t.Errorf("%s: launched → online p50 %.2f s, want about %.2f s (pending + boot)", tc.kind, r.Boot.P50, want)
		}
		if math.Abs(r.Skiff.P95-EC2Latency.Skiff.P95.Seconds()) > 0.1 {
			t.Errorf("%s: skiff's share p95 %.2f s, want the model's %s", tc.kind, r.Skiff.P95, EC2Latency.Skiff.P95)
		}
	}
	if byKind["cold"].Total.P50 <= byKind["stopped"].Total.P50 || byKind["stopped"].Total.P50 <= byKind["hot"].Total.P50 {
		t.Errorf("want cold slower than stopped slower than hot: %+v", rows)
	}
	if _, err := ModelStarts(EC2Latency, []StartKind{"lukewarm"}, 1, 1); err == nil || !strings.Contains(err.Error(), "lukewarm") {
		t.Errorf("an unknown kind: err %v", err)
	}
	for _, seed := range []uint64{42, 43, 44} {
		rows, err := ModelStarts(EC2Latency, StartKinds, 2000, seed)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		if err := metrics.WriteStartTable(&b, rows); err != nil {
			t.Fatal(err)
		}
		t.Logf("model-only start time, 2000 starts per kind, seed %d:\n%s", seed, b.String())
	}
}
