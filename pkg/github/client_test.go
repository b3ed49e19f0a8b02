package github_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/github/ghsim"
)

func TestParsePrivateKey(t *testing.T) {
	t.Parallel()
	k := testKey(t, 0)
	pkcs8, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ecDER, _ := x509.MarshalPKCS8PrivateKey(ec)
	corrupt := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)[:300]})
	tests := []struct {
		name    string
		pem     []byte
		wantErr string
	}{
		{"pkcs1", pemOf(k), ""},
		{"pkcs8", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}), ""},
		{"not pem", []byte("hello"), "no PEM block"},
		{"ec key", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: ecDER}), "not an RSA key"},
		{"certificate block", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{1}}), "unexpected PEM block"},
		{"corrupt", corrupt, "malformed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := github.ParsePrivateKey(tt.pem)
			if tt.wantErr == "" {
				if err != nil || !got.Equal(k) {
					t.Fatalf("ParsePrivateKey = %v, want the key", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error = %v, want %q", err, tt.wantErr)
			}
			body := strings.Split(string(pemOf(k)), "\n")[1]
			if strings.Contains(err.Error(), body[:20]) {
				t.Fatalf("error leaks key material: %v", err)
			}
		})
	}
}

func TestNewClientRefusesBadConfig(t *testing.T) {
	t.Parallel()
	k := testKey(t, 0)
	tests := []struct {
		name string
		apps []github.App
		opts []github.Option
	}{
		{"no apps", nil, nil},
		{"no key", []github.App{{ID: 1}}, nil},
		{"no id", []github.App{{Key: k}}, nil},
		{"duplicate", []github.App{{ID: 1, Key: k}, {ID: 1, Key: k}}, nil},
		{"relative base", []github.App{{ID: 1, Key: k}}, []github.Option{github.WithBaseURL("api/v3")}},
		{"ftp base", []github.App{{ID: 1, Key: k}}, []github.Option{github.WithBaseURL("ftp://x/api/v3")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, err := github.NewClient(tt.apps, tt.opts...); err == nil {
				t.Fatal("NewClient accepted a bad configuration")
			}
		})
	}
}

// TestAppJWT checks the claims GitHub requires: RS256, iss = App id,
// iat 60 s in the past, exp at most 10 minutes ahead.
func TestAppJWT(t *testing.T) {
	t.Parallel()
	k := testKey(t, 0)
	var got []string
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
		mu.Unlock()
		if r.Header.Get("X-GitHub-Api-Version") == "" || r.Header.Get("User-Agent") == "" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.Write([]byte(`{"id":7,"app_id":42,"target_type":"Organization","account":{"login":"acme"}}`))
	}))
	t.Cleanup(srv.Close)
	clock := ghsim.NewClock(t0)
	c, err := github.NewClient([]github.App{{ID: 42, Key: k}}, github.WithBaseURL(srv.URL), github.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		inst, err := c.OrgInstallation(ctxT(t), "acme")
		if err != nil || inst.ID != 7 || inst.AppID != 42 || inst.Account != "acme" {
			t.Fatalf("OrgInstallation = %+v, %v", inst, err)
		}
	}
	clock.Advance(8 * time.Minute) // past the reuse window: a new JWT
	if _, err := c.OrgInstallation(ctxT(t), "acme"); err != nil {
		t.Fatal(err)
	}
	if got[0] != got[2] || got[2] == got[3] {
		t.Fatalf("JWT reuse: want the first three equal and the fourth new")
	}
	for i, tok := range []string{got[0], got[3]} {
		now := t0
		if i == 1 {
			now = t0.Add(8 * time.Minute)
		}
		claims := &jwt.RegisteredClaims{}
		_, err := jwt.ParseWithClaims(tok, claims, func(*jwt.Token) (any, error) { return &k.PublicKey, nil },
			jwt.WithValidMethods([]string{"RS256"}), jwt.WithTimeFunc(func() time.Time { return now }))
		if err != nil {
			t.Fatalf("JWT %d does not verify: %v", i, err)
		}
		if claims.Issuer != "42" || !claims.IssuedAt.Equal(now.Add(-60*time.Second)) ||
			claims.ExpiresAt.Sub(now) > 10*time.Minute || claims.ExpiresAt.Sub(now) < 5*time.Minute {
			t.Fatalf("JWT %d claims = iss %s iat %v exp %v (now %v)", i, claims.Issuer, claims.IssuedAt, claims.ExpiresAt, now)
		}
	}
}

// TestBaseURLJoin checks that paths join the base URL's path, with or
// without a trailing slash, as on GHES (https://HOST/api/v3).
func TestBaseURLJoin(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		simBase    string
		clientBase string // appended to the simulator's root URL
	}{
		{"ghes", "/api/v3", "/api/v3"},
		{"ghes trailing slash", "/api/v3", "/api/v3/"},
		{"deep prefix", "/proxy/github/api/v3", "/proxy/github/api/v3/"},
		{"root", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envConfig{simOpts: ghsim.Options{BasePath: tt.simBase}})
			root := strings.TrimSuffix(e.sim.URL(), tt.simBase)
			c, err := github.NewClient([]github.App{{ID: e.appID, Key: testKey(t, 0)}},
				github.WithBaseURL(root+tt.clientBase), github.WithClock(e.clock.Now))
			if err != nil {
				t.Fatal(err)
			}
			ctx := ctxT(t)
			if _, err := c.ListRunners(ctx, e.inst, github.OrgScope("acme"), ""); err != nil {
				t.Fatalf("ListRunners: %v", err)
			}
			if _, err := c.RunnerGroupID(ctx, e.inst, "acme", "default"); err != nil {
				t.Fatalf("RunnerGroupID: %v", err)
			}
			if _, err := c.RepoInstallation(ctx, "acme", "app"); err != nil {
				t.Fatalf("RepoInstallation: %v", err)
			}
			if n := e.sim.Unmatched(); n != 0 {
				t.Fatalf("%d requests missed the API paths", n)
			}
		})
	}
}

func TestPathsAreEscaped(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	_, err := e.client.GetJob(ctxT(t), e.inst, "acme", "app/../../orgs", 1)
	if err == nil {
		t.Fatal("GetJob with a slash in the repo name succeeded")
	}
	var apiErr *github.APIError
	if !errors.As(err, &apiErr) || !strings.Contains(apiErr.Path, "%2F") {
		t.Fatalf("error = %v, want the escaped path", err)
	}
}

func TestInstallationLookup(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	e.sim.AddOrg("elsewhere")
	ctx := ctxT(t)
	tests := []struct {
		name        string
		lookup      func() (github.Installation, error)
		wantErr     error
		wantAccount string
	}{
		{"org", func() (github.Installation, error) { return e.client.OrgInstallation(ctx, "acme") }, nil, "acme"},
		{"org case-insensitive", func() (github.Installation, error) { return e.client.OrgInstallation(ctx, "ACME") }, nil, "acme"},
		{"repo", func() (github.Installation, error) { return e.client.RepoInstallation(ctx, "acme", "app") }, nil, "acme"},
		{"org not installed", func() (github.Installation, error) { return e.client.OrgInstallation(ctx, "elsewhere") }, github.ErrNotInstalled, ""},
		{"unknown repo", func() (github.Installation, error) { return e.client.RepoInstallation(ctx, "acme", "nope") }, github.ErrNotInstalled, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.lookup()
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil || got.ID != e.inst || got.AppID != e.appID || got.Account != tt.wantAccount || got.TargetType != "Organization" {
				t.Fatalf("got %+v, %v", got, err)
			}
		})
	}
	// Calls without an installation id look it up.
	if _, err := e.client.ListRunners(ctx, 0, github.RepoScope("acme", "app"), ""); err != nil {
		t.Fatalf("ListRunners without installation id: %v", err)
	}
	if _, err := e.client.ListRunners(ctx, 0, github.OrgScope("elsewhere"), ""); !errors.Is(err, github.ErrNotInstalled) {
		t.Fatalf("ListRunners on an org without the App: %v, want ErrNotInstalled", err)
	}
}

func TestSecretRedaction(t *testing.T) {
	t.Parallel()
	s := github.Secret("hunter2-canary")
	jc := github.JITConfig{EncodedJITConfig: s}
	for _, out := range []string{
		s.String(), s.GoString(), s.LogValue().String(),
		fmtAll(s), fmtAll(jc), fmtAll(&jc), mustJSON(t, jc),
	} {
		if strings.Contains(out, "hunter2") {
			t.Fatalf("secret leaked: %s", out)
		}
	}
	if s.Reveal() != "hunter2-canary" {
		t.Fatal("Reveal lost the value")
	}
}

func TestRateLimitErrorIs(t *testing.T) {
	t.Parallel()
	e := &github.RateLimitError{Reset: t0.Add(time.Minute), Secondary: true}
	if !errors.Is(e, github.ErrRateLimited) || errors.Is(e, github.ErrServer) {
		t.Fatal("RateLimitError does not match ErrRateLimited only")
	}
	if e.RetryAfter(t0) != time.Minute || e.RetryAfter(t0.Add(time.Hour)) != 0 {
		t.Fatal("RetryAfter is wrong")
	}
	for status, want := range map[int]error{404: github.ErrNotFound, 401: github.ErrUnauthorized, 403: github.ErrForbidden,
		409: github.ErrConflict, 422: github.ErrValidation, 503: github.ErrServer} {
		err := error(&github.APIError{Status: status})
		if !errors.Is(err, want) {
			t.Errorf("status %d does not match %v", status, want)
		}
		if status != 404 && errors.Is(err, github.ErrNotFound) {
			t.Errorf("status %d matches ErrNotFound", status)
		}
	}
	if !strings.Contains((&github.APIError{Op: "get_job", Method: "GET", Path: "/x", Status: 404}).Error(), strconv.Itoa(404)) {
		t.Error("APIError text lacks the status")
	}
}
