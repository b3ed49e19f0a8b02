package github_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/github/ghsim"
)

// TestTokenMintsPerHour: 10,000 calls on one installation mint one token per
// token lifetime. A token (valid 1 h) is replaced 5 minutes before it
// expires, so over H hours at most ceil(H·60/55) mints happen: one in the
// first hour, eleven in ten hours.
func TestTokenMintsPerHour(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		span      time.Duration // simulated time the 10,000 calls are spread over
		wantMints int
	}{
		{"10k calls in 50 minutes", 50 * time.Minute, 1},
		{"10k calls in 10 hours", 10 * time.Hour, 11},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envConfig{simOpts: ghsim.Options{RateLimit: 100000}})
			ctx := ctxT(t)
			const calls = 10000
			step := tt.span / calls
			for i := range calls {
				if _, err := e.client.ListRunners(ctx, e.inst, github.OrgScope("acme"), ""); err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
				e.clock.Advance(step)
			}
			if got := e.sim.TokensMinted(e.inst); got != tt.wantMints {
				t.Fatalf("%d tokens minted, want %d", got, tt.wantMints)
			}
			if n := e.sim.Requests(ghsim.OpListOrgRunners); n != calls {
				t.Fatalf("%d API calls for %d client calls", n, calls)
			}
		})
	}
}

// TestConcurrentCallersMintOnce: a cold container hit by many goroutines at
// once mints one token, not one per goroutine.
func TestConcurrentCallersMintOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{simOpts: ghsim.Options{RateLimit: 100000}})
	e.sim.SetFault(ghsim.OpCreateInstallationToken, ghsim.Fault{Latency: 50 * time.Millisecond}) // widen the race
	ctx := ctxT(t)
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for range 100 {
		wg.Go(func() {
			for range 20 {
				if _, err := e.client.ListRunners(ctx, e.inst, github.OrgScope("acme"), ""); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := e.sim.TokensMinted(e.inst); got != 1 {
		t.Fatalf("%d tokens minted by 100 concurrent callers, want 1", got)
	}
}

// TestTokenReusedAcrossCallsAndRefreshedNearExpiry pins the margin.
func TestTokenReusedAcrossCallsAndRefreshedNearExpiry(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		after     time.Duration
		wantMints int
	}{
		{"fresh", time.Minute, 1},
		{"54 minutes", 54 * time.Minute, 1},
		{"inside the margin", 55 * time.Minute, 2},
		{"expired", 2 * time.Hour, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envConfig{})
			ctx := ctxT(t)
			if _, err := e.client.ListRunners(ctx, e.inst, github.OrgScope("acme"), ""); err != nil {
				t.Fatal(err)
			}
			e.clock.Advance(tt.after)
			if _, err := e.client.ListRunners(ctx, e.inst, github.OrgScope("acme"), ""); err != nil {
				t.Fatal(err)
			}
			if got := e.sim.TokensMinted(e.inst); got != tt.wantMints {
				t.Fatalf("%d mints, want %d", got, tt.wantMints)
			}
		})
	}
}

// BenchmarkCachedCall measures one client call with a cached token against
// the in-process simulator over loopback: the client's own overhead plus
// one local HTTP round trip.
func BenchmarkCachedCall(b *testing.B) {
	e := newEnv(b, envConfig{simOpts: ghsim.Options{RateLimit: 1 << 30}})
	run, err := e.sim.StartRun(ghsim.RunSpec{Repo: "acme/app", Jobs: []ghsim.JobSpec{{Labels: []string{"x"}}}})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.client.GetJob(ctx, e.inst, "acme", "app", run.JobIDs[0]); err != nil {
			b.Fatal(err)
		}
	}
}
