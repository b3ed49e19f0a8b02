package github_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/github/ghsim"
)

// faultCase is one fault the simulator injects, and what the client must
// make of it.
type faultCase struct {
	name  string
	cfg   envConfig // the env's configuration (default: none)
	setup func(e *env)
	ctx   func(t *testing.T) context.Context
	// check gets the error of one GetJob call on a known job.
	check func(t *testing.T, e *env, err error)
}

// runFaults runs each case on a fresh env: one GetJob call on a known job,
// the installation's token warmed so that the faults hit the call itself.
func runFaults(t *testing.T, cases []faultCase) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, tt.cfg)
			run, err := e.sim.StartRun(ghsim.RunSpec{Repo: "acme/app", Jobs: []ghsim.JobSpec{{Labels: []string{"x"}}}})
			if err != nil {
				t.Fatal(err)
			}
			// Warm the token so faults hit the call itself.
			if _, err := e.client.ListRunners(ctxT(t), e.inst, github.OrgScope("acme"), ""); err != nil {
				t.Fatal(err)
			}
			tt.setup(e)
			ctx := ctxT(t)
			if tt.ctx != nil {
				ctx = tt.ctx(t)
			}
			_, err = e.client.GetJob(ctx, e.inst, "acme", "app", run.JobIDs[0])
			tt.check(t, e, err)
		})
	}
}

// TestFaultsServerErrors: 5xx answers, a 404 and a slow answer.
func TestFaultsServerErrors(t *testing.T) {
	t.Parallel()
	runFaults(t, []faultCase{
		{
			name:  "transient 502 is retried with exponential backoff",
			setup: func(e *env) { e.sim.SetFault(ghsim.OpGetJob, ghsim.Fault{FailNext: 3}) },
			check: func(t *testing.T, e *env, err error) {
				if err != nil {
					t.Fatalf("err = %v, want success after retries", err)
				}
				// rand is fixed at 0.5: half of 500ms, 1s, 2s.
				want := []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second}
				if got := e.slept(); !equalDurations(got, want) {
					t.Fatalf("backoffs = %v, want %v", got, want)
				}
			},
		},
		{
			name:  "persistent 503 gives up after bounded retries",
			setup: func(e *env) { e.sim.SetFault(ghsim.OpGetJob, ghsim.Fault{ErrorRate: 1, ErrorStatus: 503}) },
			check: func(t *testing.T, e *env, err error) {
				var apiErr *github.APIError
				if !errors.Is(err, github.ErrServer) || !errors.As(err, &apiErr) || apiErr.Status != 503 {
					t.Fatalf("err = %v, want ErrServer 503", err)
				}
				if n := e.sim.Requests(ghsim.OpGetJob); n != 4 {
					t.Fatalf("%d attempts, want 4", n)
				}
			},
		},
		{
			name: "5xx backoff that does not fit the deadline returns the server error",
			setup: func(e *env) {
				e.sim.SetFault(ghsim.OpGetJob, ghsim.Fault{FailNext: 1, ErrorStatus: 503})
			},
			// A backoff of a minute (half of BaseDelay) against a deadline of
			// 30 s: the request itself has all the time it needs.
			cfg: envConfig{clientOpts: []github.Option{github.WithRetryPolicy(github.RetryPolicy{BaseDelay: 2 * time.Minute, MaxDelay: 2 * time.Minute})}},
			ctx: func(t *testing.T) context.Context {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // < the minute's backoff
				t.Cleanup(cancel)
				return ctx
			},
			check: func(t *testing.T, e *env, err error) {
				if !errors.Is(err, github.ErrServer) || e.sim.Requests(ghsim.OpGetJob) != 1 || len(e.slept()) != 0 {
					t.Fatalf("err = %v after %d requests and waits %v; want the 503 at once", err, e.sim.Requests(ghsim.OpGetJob), e.slept())
				}
			},
		},
		{
			name:  "404 is not retried",
			setup: func(e *env) {},
			check: func(t *testing.T, e *env, err error) {
				if err != nil {
					t.Fatal(err)
				}
				_, err = e.client.GetJob(ctxT(t), e.inst, "acme", "app", 1)
				if !errors.Is(err, github.ErrNotFound) || e.sim.Requests(ghsim.OpGetJob) != 2 {
					t.Fatalf("err = %v after %d requests, want one ErrNotFound", err, e.sim.Requests(ghsim.OpGetJob))
				}
			},
		},
		{
			name:  "latency beyond the context deadline",
			setup: func(e *env) { e.sim.SetFault(ghsim.OpGetJob, ghsim.Fault{Latency: 5 * time.Second}) },
			ctx: func(t *testing.T) context.Context {
				ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				t.Cleanup(cancel)
				return ctx
			},
			check: func(t *testing.T, e *env, err error) {
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("err = %v, want context.DeadlineExceeded", err)
				}
			},
		},
	})
}

// TestFaultsSecondaryLimits: GitHub's secondary rate limits, waited for or
// returned.
func TestFaultsSecondaryLimits(t *testing.T) {
	t.Parallel()
	runFaults(t, []faultCase{
		{
			name: "secondary limit with Retry-After waits and succeeds",
			setup: func(e *env) {
				e.sim.SetFault(ghsim.OpGetJob, ghsim.Fault{LimitUntil: t0.Add(30 * time.Second), RetryAfter: 30 * time.Second})
			},
			check: func(t *testing.T, e *env, err error) {
				if err != nil {
					t.Fatalf("err = %v, want success after the wait", err)
				}
				if got := e.slept(); !equalDurations(got, []time.Duration{30 * time.Second}) {
					t.Fatalf("waits = %v, want [30s]", got)
				}
			},
		},
		{
			name: "secondary 429 without headers waits a minute",
			setup: func(e *env) {
				e.sim.SetFault(ghsim.OpGetJob, ghsim.Fault{LimitUntil: t0.Add(time.Minute), LimitStatus: http.StatusTooManyRequests})
			},
			check: func(t *testing.T, e *env, err error) {
				if err != nil || !equalDurations(e.slept(), []time.Duration{time.Minute}) {
					t.Fatalf("err = %v, waits = %v; want success after one minute", err, e.slept())
				}
			},
		},
		{
			name: "secondary limit longer than the longest wait is returned",
			setup: func(e *env) {
				e.sim.SetFault(ghsim.OpGetJob, ghsim.Fault{LimitUntil: t0.Add(time.Hour), RetryAfter: 10 * time.Minute})
			},
			check: func(t *testing.T, e *env, err error) {
				var rle *github.RateLimitError
				if !errors.Is(err, github.ErrRateLimited) || !errors.As(err, &rle) || !rle.Secondary ||
					!rle.Reset.Equal(t0.Add(10*time.Minute)) || rle.InstallationID != e.inst || rle.AppID != e.appID {
					t.Fatalf("err = %#v, want a secondary RateLimitError resetting in 10m", err)
				}
				if len(e.slept()) != 0 {
					t.Fatalf("waited %v", e.slept())
				}
			},
		},
		{
			name: "secondary limit that does not fit the deadline is returned",
			setup: func(e *env) {
				e.sim.SetFault(ghsim.OpGetJob, ghsim.Fault{LimitUntil: t0.Add(time.Hour), RetryAfter: 20 * time.Second})
			},
			ctx: func(t *testing.T) context.Context {
				ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second) // < the 20 s wait, with room for the request itself
				t.Cleanup(cancel)
				return ctx
			},
			check: func(t *testing.T, e *env, err error) {
				if !errors.Is(err, github.ErrRateLimited) || len(e.slept()) != 0 {
					t.Fatalf("err = %v, waits %v; want RateLimitError without waiting", err, e.slept())
				}
			},
		},
		{
			name: "limit that persists after the allowed waits is returned",
			setup: func(e *env) {
				e.sim.SetFault(ghsim.OpGetJob, ghsim.Fault{LimitUntil: t0.Add(time.Hour), RetryAfter: 5 * time.Second})
			},
			check: func(t *testing.T, e *env, err error) {
				if !errors.Is(err, github.ErrRateLimited) || len(e.slept()) != 2 {
					t.Fatalf("err = %v, waits %v; want RateLimitError after 2 waits", err, e.slept())
				}
			},
		},
	})
}

// TestFaultsPrimaryLimitAndTokens: the hour's budget, and the installation
// token revoked, unminted or failing to mint.
func TestFaultsPrimaryLimitAndTokens(t *testing.T) {
	t.Parallel()
	runFaults(t, []faultCase{
		{
			name:  "primary budget exhausted for the hour is returned",
			setup: func(e *env) { e.sim.SetRateLimit(e.inst, 5000, 0) },
			check: func(t *testing.T, e *env, err error) {
				var rle *github.RateLimitError
				if !errors.As(err, &rle) || rle.Secondary || rle.Status != 403 || !rle.Reset.Equal(t0.Add(time.Hour)) {
					t.Fatalf("err = %#v, want a primary RateLimitError resetting at the window's end", err)
				}
				// The client remembers: the next call is refused without a request.
				n := e.sim.Requests(ghsim.OpGetJob)
				_, err = e.client.GetJob(ctxT(t), e.inst, "acme", "app", 1)
				if !errors.Is(err, github.ErrRateLimited) || e.sim.Requests(ghsim.OpGetJob) != n {
					t.Fatalf("second call: %v, %d requests; want refused locally", err, e.sim.Requests(ghsim.OpGetJob)-n)
				}
			},
		},
		{
			name: "primary budget resetting soon is waited for",
			setup: func(e *env) {
				e.sim.SetRateLimit(e.inst, 5000, 0)
				e.clock.Advance(59*time.Minute + 30*time.Second)
			},
			check: func(t *testing.T, e *env, err error) {
				if err != nil || !equalDurations(e.slept(), []time.Duration{30 * time.Second}) {
					t.Fatalf("err = %v, waits = %v; want success after 30s", err, e.slept())
				}
			},
		},
		{
			name:  "revoked token is replaced once",
			setup: func(e *env) { e.sim.RevokeTokens(e.inst) },
			check: func(t *testing.T, e *env, err error) {
				if err != nil || e.sim.TokensMinted(e.inst) != 2 {
					t.Fatalf("err = %v, minted %d; want success with a second token", err, e.sim.TokensMinted(e.inst))
				}
			},
		},
		{
			name:  "uninstalled App",
			setup: func(e *env) { e.sim.Uninstall(e.inst) },
			check: func(t *testing.T, e *env, err error) {
				if !errors.Is(err, github.ErrNotInstalled) {
					t.Fatalf("err = %v, want ErrNotInstalled", err)
				}
			},
		},
		{
			name: "token mint failing transiently",
			setup: func(e *env) {
				e.sim.RevokeTokens(e.inst) // the call needs a new token
				e.sim.SetFault(ghsim.OpCreateInstallationToken, ghsim.Fault{FailNext: 2, ErrorStatus: 500})
			},
			check: func(t *testing.T, e *env, err error) {
				if err != nil || e.sim.Requests(ghsim.OpCreateInstallationToken) != 4 {
					t.Fatalf("err = %v after %d mint requests; want success on the 2nd mint's 3rd try",
						err, e.sim.Requests(ghsim.OpCreateInstallationToken))
				}
			},
		},
	})
}

// TestErrorRateFault checks that a seeded error rate is absorbed by retries.
func TestErrorRateFault(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{simOpts: ghsim.Options{Seed: 7}})
	e.sim.SetFault(ghsim.OpListOrgRunners, ghsim.Fault{ErrorRate: 0.2})
	ok := 0
	for range 200 {
		_, err := e.client.ListRunners(ctxT(t), e.inst, github.OrgScope("acme"), "")
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, github.ErrServer):
			t.Fatalf("unexpected error: %v", err)
		}
	}
	retries := e.sim.Requests(ghsim.OpListOrgRunners) - 200
	if ok < 198 || retries < 20 {
		t.Fatalf("%d/200 succeeded with %d retries; want ≥198 and some retries", ok, retries)
	}
}

// TestPacingSpreadsTheLastBudget checks that below the reserve the client
// spaces calls evenly until the reset instead of spending them at once.
func TestPacingSpreadsTheLastBudget(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	e.sim.SetRateLimit(e.inst, 5000, 100) // 2% left, under the 5% reserve
	ctx := ctxT(t)
	for range 50 {
		if _, err := e.client.ListRunners(ctx, e.inst, github.OrgScope("acme"), ""); err != nil {
			t.Fatal(err)
		}
	}
	waits := e.slept()
	if len(waits) < 45 {
		t.Fatalf("%d waits for 50 calls near exhaustion, want nearly every call paced", len(waits))
	}
	for _, w := range waits {
		// About an hour over ~100 remaining calls: tens of seconds each.
		if w < 20*time.Second || w > 2*time.Minute {
			t.Fatalf("wait %v outside the spread interval", w)
		}
	}
	if left := e.sim.RateLimitRemaining(e.inst); left < 40 {
		t.Fatalf("%d left after pacing, want the budget not burnt", left)
	}
	st, ok := e.client.RateLimit(e.inst)
	if !ok || st.Limit != 5000 {
		t.Fatalf("RateLimit = %+v, %v", st, ok)
	}
}

// TestPacingRefusesWhenTheSpreadDoesNotFit: a Lambda with little time left
// gets a RateLimitError instead of a sleep it cannot finish.
func TestPacingRefusesWhenTheSpreadDoesNotFit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{clientOpts: []github.Option{github.WithRetryPolicy(github.RetryPolicy{MaxRateLimitWait: time.Second})}})
	e.sim.SetRateLimit(e.inst, 5000, 10)
	ctx := ctxT(t)
	var err error
	for range 3 {
		if _, err = e.client.ListRunners(ctx, e.inst, github.OrgScope("acme"), ""); err != nil {
			break
		}
	}
	if !errors.Is(err, github.ErrRateLimited) {
		t.Fatalf("err = %v, want ErrRateLimited from pacing", err)
	}
}

func equalDurations(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestGoGitHubLimiterStaysIdle: go-github keeps one rate-limit memory per
// go-github client, on the wall clock, and refuses calls by itself while it
// believes the budget is spent. skiff's transport owns rate limits (per
// installation, on the client's clock) and hides the headers from go-github,
// so a window that ended on the client's clock is used again at once, and an
// exhausted installation does not block another one.
func TestGoGitHubLimiterStaysIdle(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		run  func(t *testing.T, e *env, other int64)
	}{
		{"a new window on the client's clock", func(t *testing.T, e *env, _ int64) {
			e.sim.SetRateLimit(e.inst, 5000, 1)
			if _, err := e.client.ListRunners(ctxT(t), e.inst, github.OrgScope("acme"), ""); err != nil {
				t.Fatal(err) // the last call of the window: remaining 0
			}
			e.clock.Advance(time.Hour + time.Second)
			if _, err := e.client.ListRunners(ctxT(t), e.inst, github.OrgScope("acme"), ""); err != nil {
				t.Fatalf("first call of the next window: %v", err)
			}
		}},
		{"another installation", func(t *testing.T, e *env, other int64) {
			e.sim.SetRateLimit(e.inst, 5000, 1)
			if _, err := e.client.ListRunners(ctxT(t), e.inst, github.OrgScope("acme"), ""); err != nil {
				t.Fatal(err)
			}
			if _, err := e.client.ListRunners(ctxT(t), other, github.OrgScope("beta"), ""); err != nil {
				t.Fatalf("a call on an installation with budget: %v", err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// Far ahead of the wall clock, so that a reset time go-github kept
			// would still lie in the future for it.
			e := newEnv(t, envConfig{start: time.Now().Add(24 * time.Hour).Truncate(time.Second)})
			e.sim.AddOrg("beta")
			other := e.sim.Install(e.appID, "beta")
			before := e.sim.Requests(ghsim.OpListOrgRunners)
			tt.run(t, e, other)
			if n := e.sim.Requests(ghsim.OpListOrgRunners) - before; n != 2 {
				t.Fatalf("%d requests reached GitHub, want 2", n)
			}
		})
	}
}
