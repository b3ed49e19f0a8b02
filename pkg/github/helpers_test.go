package github_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/github/internal/apispec"
)

var t0 = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

// Keys are costly to generate; tests share a few.
var (
	keyOnce sync.Once
	keys    [3]*rsa.PrivateKey
)

func testKey(t testing.TB, i int) *rsa.PrivateKey {
	t.Helper()
	keyOnce.Do(func() {
		for n := range keys {
			k, err := rsa.GenerateKey(rand.Reader, 2048)
			if err != nil {
				panic(err)
			}
			keys[n] = k
		}
	})
	return keys[i]
}

func pemOf(k *rsa.PrivateKey) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)})
}

// env is a simulator with one org ("acme", repo "acme/app") and one App
// installed on it, and a client wired to it on a shared simulated clock.
type env struct {
	sim    *ghsim.Server
	clock  *ghsim.Clock
	client *github.Client
	appID  int64
	inst   int64
	logs   *testenv.SyncBuffer

	mu     sync.Mutex
	sleeps []time.Duration
}

type envConfig struct {
	simOpts    ghsim.Options
	clientOpts []github.Option
	basePath   string    // client base path, when different from the simulator's
	start      time.Time // the simulated clock's start (default t0)
}

func newEnv(t testing.TB, cfg envConfig) *env {
	t.Helper()
	start := t0
	if !cfg.start.IsZero() {
		start = cfg.start
	}
	e := &env{clock: ghsim.NewClock(start), appID: 101, logs: &testenv.SyncBuffer{}}
	cfg.simOpts.Now = e.clock.Now
	e.sim = ghsim.New(cfg.simOpts)
	t.Cleanup(e.sim.Close)
	key := testKey(t, 0)
	e.sim.AddApp(ghsim.AppConfig{ID: e.appID, PublicKey: &key.PublicKey})
	e.sim.AddRepo("acme", "app")
	e.inst = e.sim.Install(e.appID, "acme")
	base := e.sim.URL()
	if cfg.basePath != "" {
		base = e.sim.URL() + cfg.basePath
	}
	opts := append([]github.Option{
		github.WithBaseURL(base),
		github.WithClock(e.clock.Now),
		github.WithSleep(e.sleep),
		github.WithRand(func() float64 { return 0.5 }),
		github.WithLogger(slog.New(slog.NewJSONHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))),
	}, cfg.clientOpts...)
	c, err := github.NewClient([]github.App{{ID: e.appID, Key: key}}, opts...)
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	e.client = c
	return e
}

// sleep advances simulated time instead of waiting.
func (e *env) sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	e.mu.Lock()
	e.sleeps = append(e.sleeps, d)
	e.mu.Unlock()
	e.clock.Advance(d)
	return nil
}

func (e *env) slept() []time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]time.Duration(nil), e.sleeps...)
}

// connectOrgRunner has the client generate a JIT config for a runner of
// acme's Default group and connects that runner to the simulator.
func (e *env) connectOrgRunner(ctx context.Context, t *testing.T, name string, labels ...string) *github.JITConfig {
	t.Helper()
	jc, err := e.client.GenerateJITConfig(ctx, e.inst, github.OrgScope("acme"),
		github.JITRequest{Name: name, RunnerGroupID: 1, Labels: labels})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.sim.ConnectRunner(jc.EncodedJITConfig.Reveal()); err != nil {
		t.Fatal(err)
	}
	return jc
}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	// Long: waits are simulated, but canWait compares them with this real deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// exchanges records every exchange a simulator answers: opts is the
// simulator's options with the recorder, got the exchanges so far.
func exchanges() (opts ghsim.Options, got func() []ghsim.Exchange) {
	var mu sync.Mutex
	var all []ghsim.Exchange
	opts.OnExchange = func(x ghsim.Exchange) {
		mu.Lock()
		all = append(all, x)
		mu.Unlock()
	}
	return opts, func() []ghsim.Exchange {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(all)
	}
}

// validateAnswer checks an answer of the simulator against GitHub's
// description: a documented status's schema, GitHub's generic error body
// for an undocumented error; an undocumented success is an error.
func validateAnswer(sp *apispec.Spec, x ghsim.Exchange) error {
	switch {
	case sp.Documents(x.Op, x.Status):
		return sp.ValidateResponse(x.Op, x.Status, x.Body)
	case x.Status >= 400:
		return sp.ValidateSchema("basic-error", x.Body) // GitHub's generic error body
	default:
		return fmt.Errorf("undocumented success status")
	}
}

func fmtAll(v any) string {
	return fmt.Sprintf("%v %+v %#v %s %q %x", v, v, v, v, v, v)
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func newDebugLogger(w *testenv.SyncBuffer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
