package testenv

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/pool"
)

// AppID is the GitHub App of GitHubApp.
const AppID = 77

// Key is an RSA key for a test's GitHub App, made once per test binary: a
// 2048-bit key takes tens of milliseconds, the tests need not each pay it.
var Key = sync.OnceValue(func() *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return k
})

// KeyPEM is Key in PEM, as an App's private key file holds it.
func KeyPEM() string {
	return string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(Key())}))
}

// GitHubApp starts the GitHub simulator for t, closed when t ends, with
// App AppID ("skiff") installed on the organisation acme, which has the
// repository acme/app; the secrets it hands out start with prefix. It
// returns the simulator and the App's private key in PEM.
func GitHubApp(t testing.TB, prefix string) (*ghsim.Server, string) {
	t.Helper()
	sim, key, _ := gitHubApp(t, prefix)
	return sim, string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))
}

// gitHubApp is GitHubApp with the App's key and its installation's id.
func gitHubApp(t testing.TB, prefix string) (*ghsim.Server, *rsa.PrivateKey, int64) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	sim := ghsim.New(ghsim.Options{SecretPrefix: prefix})
	t.Cleanup(sim.Close)
	sim.AddApp(ghsim.AppConfig{ID: AppID, Slug: "skiff", PublicKey: &key.PublicKey})
	sim.AddOrg("acme")
	sim.AddRepo("acme", "app")
	return sim, key, sim.Install(AppID, "acme")
}

// GitHubJIT is GitHubApp with a function that registers a just-in-time
// runner named name with labels in acme's default runner group, through
// the simulator's REST API as the App's installation, and returns its
// encoded JIT configuration: what a runner (or the stand-in) starts with.
func GitHubJIT(t testing.TB, prefix string) (*ghsim.Server, func(t testing.TB, name string, labels ...string) string) {
	t.Helper()
	sim, key, inst := gitHubApp(t, prefix)
	now := time.Now()
	appJWT, err := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.RegisteredClaims{Issuer: strconv.Itoa(AppID),
		IssuedAt: jwt.NewNumericDate(now.Add(-time.Minute)), ExpiresAt: jwt.NewNumericDate(now.Add(5 * time.Minute))}).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	var tok struct{ Token string }
	postJSON(t, sim.URL()+"/app/installations/"+strconv.FormatInt(inst, 10)+"/access_tokens", appJWT, nil, &tok)
	return sim, func(t testing.TB, name string, labels ...string) string {
		t.Helper()
		var out struct {
			EncodedJITConfig string `json:"encoded_jit_config"`
		}
		postJSON(t, sim.URL()+"/orgs/acme/actions/runners/generate-jitconfig", tok.Token,
			map[string]any{"name": name, "runner_group_id": 1, "labels": labels}, &out)
		return out.EncodedJITConfig
	}
}

// postJSON POSTs body as JSON with a bearer token, wants 201 Created and
// decodes the answer into out.
func postJSON(t testing.TB, url, bearer string, body, out any) {
	t.Helper()
	var b []byte
	if body != nil {
		b, _ = json.Marshal(body)
	}
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+bearer)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST %s: %d, want %d", url, resp.StatusCode, http.StatusCreated)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatal(err)
	}
}

// KeptGroups creates in sim, in organization org, the runner group skiff
// keeps for each pool that names none (skiff-NAME), admitting every
// repository and public ones where the pool does: what the reconciler's
// group keeper would have set, for tests of other things that register
// runners in them.
func KeptGroups(t testing.TB, sim *ghsim.Server, pools *pool.Config, org string) {
	t.Helper()
	for _, p := range pools.Pools {
		if !p.KeptGroup {
			continue
		}
		if _, ok := sim.RunnerGroupAccess(org, p.RunnerGroup); !ok {
			sim.AddRunnerGroup(org, p.RunnerGroup)
		}
		if err := sim.SetRunnerGroupAccess(org, p.RunnerGroup,
			ghsim.GroupAccess{Visibility: ghsim.GroupAll, AllowsPublic: p.Policy.AllowsPublic()}); err != nil {
			t.Fatal(err)
		}
	}
}
