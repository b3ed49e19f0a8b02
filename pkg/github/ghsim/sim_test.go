package ghsim_test

import (
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/skiffci/skiff/pkg/github/ghsim"
)

var t0 = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

var (
	keyOnce sync.Once
	key     *rsa.PrivateKey
	other   *rsa.PrivateKey
)

func keys(t *testing.T) (*rsa.PrivateKey, *rsa.PrivateKey) {
	t.Helper()
	keyOnce.Do(func() {
		key, _ = rsa.GenerateKey(rand.Reader, 2048)
		other, _ = rsa.GenerateKey(rand.Reader, 2048)
	})
	return key, other
}

func newSim(t *testing.T) (*ghsim.Server, *ghsim.Clock, int64) {
	t.Helper()
	clock := ghsim.NewClock(t0)
	s := ghsim.New(ghsim.Options{Now: clock.Now, BasePath: "/api/v3"})
	t.Cleanup(s.Close)
	k, _ := keys(t)
	s.AddApp(ghsim.AppConfig{ID: 1, PublicKey: &k.PublicKey})
	s.AddRepo("acme", "app")
	s.AddRepo("acme", "other")
	return s, clock, s.Install(1, "acme")
}

// newSimToken is newSim with an installation token of its App, for tests
// that need no more than the simulator and its API.
func newSimToken(t *testing.T) (*ghsim.Server, string) {
	t.Helper()
	s, clock, inst := newSim(t)
	k, _ := keys(t)
	return s, mint(t, s, clock, inst, k)
}

func regToken(t *testing.T, s *ghsim.Server, clock *ghsim.Clock, inst int64, path string) string {
	t.Helper()
	k, _ := keys(t)
	tok := mint(t, s, clock, inst, k)
	req, _ := http.NewRequest("POST", s.URL()+path+"/actions/runners/registration-token", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	var out struct{ Token string }
	do(t, req, http.StatusCreated, &out)
	return out.Token
}

func TestAssignmentRules(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		scope     string // where the runner is registered
		runner    []string
		jobRepo   string
		jobLabels []string
		assigned  bool
	}{
		{"superset, case-insensitive", "/orgs/acme", []string{"GPU", "big"}, "acme/app", []string{"self-hosted", "linux", "gpu"}, true},
		{"read-only labels match", "/orgs/acme", nil, "acme/app", []string{"Self-Hosted", "X64"}, true},
		{"missing label", "/orgs/acme", []string{"gpu"}, "acme/app", []string{"self-hosted", "gpu", "a100"}, false},
		{"repo runner, its repo", "/repos/acme/app", []string{"x"}, "acme/app", []string{"x"}, true},
		{"repo runner, another repo", "/repos/acme/app", []string{"x"}, "acme/other", []string{"x"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, clock, inst := newSim(t)
			tok := regToken(t, s, clock, inst, tt.scope)
			checkAssignment(t, s, tok, ghsim.RunnerSpec{Name: "r", Labels: tt.runner},
				ghsim.RunSpec{Repo: tt.jobRepo, Jobs: []ghsim.JobSpec{{Labels: tt.jobLabels}}}, tt.assigned)
		})
	}
}

func TestPersistentRunnerTakesJobsInOrder(t *testing.T) {
	t.Parallel()
	s, clock, inst := newSim(t)
	var ids []int64
	for range 3 {
		run, _ := s.StartRun(ghsim.RunSpec{Repo: "acme/app", Jobs: []ghsim.JobSpec{{Labels: []string{"x"}, Duration: time.Minute}}})
		ids = append(ids, run.JobIDs[0])
	}
	tok := regToken(t, s, clock, inst, "/orgs/acme")
	rid, err := s.RegisterRunner(tok, ghsim.RunnerSpec{Name: "p", Labels: []string{"x"}})
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		j, _ := s.Job(id)
		if j.Status != "in_progress" || j.RunnerID != rid {
			t.Fatalf("job %d = %+v, want running on the persistent runner", i, j)
		}
		st := s.JobStatuses(append([]int64{-1}, ids...))
		for k, other := range ids {
			want := map[bool]string{true: "completed", false: "queued"}[k < i]
			if k == i {
				want = "in_progress"
			}
			if st[other] != want {
				t.Errorf("at job %d, JobStatuses says job %d is %q, want %q", i, k, st[other], want)
			}
		}
		if _, ok := st[-1]; ok {
			t.Errorf("JobStatuses has a status for an unknown job: %v", st)
		}
		clock.Advance(time.Minute)
	}
	if rs := s.Runners(); len(rs) != 1 || rs[0].Busy {
		t.Fatalf("runners = %+v, want one idle persistent runner", rs)
	}
	clock.Advance(time.Hour)
	if _, err := s.RegisterRunner(tok, ghsim.RunnerSpec{Name: "late"}); !errors.Is(err, ghsim.ErrExpired) {
		t.Fatalf("expired token: %v", err)
	}
	if _, err := s.RegisterRunner("nope", ghsim.RunnerSpec{Name: "x"}); !errors.Is(err, ghsim.ErrUnknown) {
		t.Fatalf("unknown token: %v", err)
	}
}

func TestDisconnectFailsTheRunningJob(t *testing.T) {
	t.Parallel()
	s, clock, inst := newSim(t)
	tok := regToken(t, s, clock, inst, "/orgs/acme")
	rid, _ := s.RegisterRunner(tok, ghsim.RunnerSpec{Name: "r", Labels: []string{"x"}})
	run, _ := s.StartRun(ghsim.RunSpec{Repo: "acme/app", Jobs: []ghsim.JobSpec{{Labels: []string{"x"}}}})
	if err := s.DisconnectRunner(rid); err != nil {
		t.Fatal(err)
	}
	if j, _ := s.Job(run.JobIDs[0]); j.Status != "completed" || j.Conclusion != "failure" {
		t.Fatalf("job = %+v", j)
	}
	if _, err := s.ConnectRunner("bm90IGEgY29uZmln"); !errors.Is(err, ghsim.ErrUnknown) {
		t.Fatalf("garbage JIT config: %v", err)
	}
	if err := s.CancelJob(run.JobIDs[0]); !errors.Is(err, ghsim.ErrUnknown) {
		t.Fatalf("cancelling a completed job: %v", err)
	}
}

// TestJWTVerification: the simulator refuses App JWTs GitHub would refuse.
func TestJWTVerification(t *testing.T) {
	t.Parallel()
	k, wrong := keys(t)
	tests := []struct {
		name   string
		key    *rsa.PrivateKey
		iss    string
		iat    time.Duration
		exp    time.Duration
		status int
	}{
		{"valid", k, "1", -time.Minute, 9 * time.Minute, http.StatusCreated},
		{"expired", k, "1", -20 * time.Minute, -time.Minute, http.StatusUnauthorized},
		{"exp beyond 10 minutes", k, "1", 0, 11 * time.Minute, http.StatusUnauthorized},
		{"issued in the future", k, "1", time.Minute, 9 * time.Minute, http.StatusUnauthorized},
		{"wrong key", wrong, "1", -time.Minute, 9 * time.Minute, http.StatusUnauthorized},
		{"unknown app", k, "2", -time.Minute, 9 * time.Minute, http.StatusUnauthorized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, _, inst := newSim(t)
			j := signJWT(t, tt.key, tt.iss, t0.Add(tt.iat), t0.Add(tt.exp))
			req, _ := http.NewRequest("POST", s.URL()+"/app/installations/"+strconv.FormatInt(inst, 10)+"/access_tokens", nil)
			req.Header.Set("Authorization", "Bearer "+j)
			do(t, req, tt.status, nil)
		})
	}
}

func TestUnknownPathsAreCounted(t *testing.T) {
	t.Parallel()
	s, _, _ := newSim(t)
	resp, err := http.Get(s.URL() + "/../orgs/acme/installation") // outside the base path once cleaned
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	resp, err = http.Get(s.URL()[:len(s.URL())-len("/api/v3")] + "/orgs/acme/installation")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || s.Unmatched() < 1 {
		t.Fatalf("status %d, unmatched %d", resp.StatusCode, s.Unmatched())
	}
}

func signJWT(t *testing.T, k *rsa.PrivateKey, iss string, iat, exp time.Time) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.RegisteredClaims{Issuer: iss,
		IssuedAt: jwt.NewNumericDate(iat), ExpiresAt: jwt.NewNumericDate(exp)}).SignedString(k)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mint(t *testing.T, s *ghsim.Server, clock *ghsim.Clock, inst int64, k *rsa.PrivateKey) string {
	t.Helper()
	now := clock.Now()
	req, _ := http.NewRequest("POST", s.URL()+"/app/installations/"+strconv.FormatInt(inst, 10)+"/access_tokens", nil)
	req.Header.Set("Authorization", "Bearer "+signJWT(t, k, "1", now.Add(-time.Minute), now.Add(9*time.Minute)))
	var out struct{ Token string }
	do(t, req, http.StatusCreated, &out)
	return out.Token
}

// TestDeliveryGUIDsPerApp: each App's hook gets its own delivery GUID for an event, as
// GitHub gives each hook its own deliveries (a receiver dedupes on X-GitHub-Delivery).
func TestDeliveryGUIDsPerApp(t *testing.T) {
	t.Parallel()
	s, _, _ := newSim(t)
	k, _ := keys(t)
	s.SetWebhook(1, "http://127.0.0.1:1/a", "s")
	s.AddApp(ghsim.AppConfig{ID: 2, PublicKey: &k.PublicKey, WebhookURL: "http://127.0.0.1:1/b", WebhookSecret: "s"})
	s.Install(2, "acme")
	if _, err := s.StartRun(ghsim.RunSpec{Repo: "acme/app", Jobs: []ghsim.JobSpec{{Labels: []string{"x"}}}}); err != nil {
		t.Fatal(err)
	}
	ds := s.Deliveries()
	seen := map[string]int64{}
	for _, d := range ds {
		if app, dup := seen[d.GUID]; dup {
			t.Fatalf("GUID %s delivered to App %d and App %d", d.GUID, app, d.AppID)
		}
		seen[d.GUID] = d.AppID
	}
	if len(ds) != 4 {
		t.Fatalf("%d deliveries, want 2 events × 2 Apps", len(ds))
	}
}

// TestBusyHidden: the REST API shows a busy runner as idle while
// Options.BusyHidden says so (GitHub's lagging busy flag); Runners() tells
// the truth all along.
func TestBusyHidden(t *testing.T) {
	t.Parallel()
	clock := ghsim.NewClock(t0)
	s := ghsim.New(ghsim.Options{Now: clock.Now, BusyHidden: func(_ int64, since time.Duration) bool { return since < 30*time.Second }})
	t.Cleanup(s.Close)
	k, _ := keys(t)
	s.AddApp(ghsim.AppConfig{ID: 1, PublicKey: &k.PublicKey})
	s.AddRepo("acme", "app")
	inst := s.Install(1, "acme")
	if _, err := s.RegisterRunner(regToken(t, s, clock, inst, "/orgs/acme"), ghsim.RunnerSpec{Name: "r", Labels: []string{"x"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.StartRun(ghsim.RunSpec{Repo: "acme/app", Jobs: []ghsim.JobSpec{{Labels: []string{"x"}, Duration: time.Hour}}}); err != nil {
		t.Fatal(err)
	}
	busy := func() bool {
		t.Helper()
		req, _ := http.NewRequest("GET", s.URL()+"/orgs/acme/actions/runners", nil)
		req.Header.Set("Authorization", "Bearer "+mint(t, s, clock, inst, k))
		var out struct{ Runners []struct{ Busy bool } }
		do(t, req, http.StatusOK, &out)
		if len(out.Runners) != 1 {
			t.Fatalf("runners %+v, want 1", out.Runners)
		}
		return out.Runners[0].Busy
	}
	if busy() || !s.Runners()[0].Busy {
		t.Error("as the job starts: want the API to say idle, Runners() busy")
	}
	clock.Advance(time.Minute)
	if !busy() {
		t.Error("a minute into the job: want the API to say busy")
	}
}
