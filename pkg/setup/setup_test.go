package setup_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/secret"
	"github.com/skiffci/skiff/pkg/secret/smsecret"
	"github.com/skiffci/skiff/pkg/setup"
	"github.com/skiffci/skiff/pkg/setup/smstore"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// canary is the setup secret: no log line may carry it.
const canary = "canary-setup-secret-7c1e04d9b2aa"

// placeholder is what the stack's generated secrets hold before setup.
const placeholder = "Zq8xV2kP0aLr4nT7wB1yC6dE9fG3hJ5m"

type world struct {
	clock  *ghsim.Clock
	sim    *ghsim.Server
	store  setup.Store
	page   *httptest.Server
	logs   *testenv.SyncBuffer
	hooked chan string // X-GitHub-Event of every webhook the App sent
	url    string      // the setup page's URL
}

// newWorld serves the setup page (prefix /setup) for store, against a
// simulated GitHub whose pages confirm themselves, as the operator's clicks.
func newWorld(t *testing.T, store func(t *testing.T) setup.Store) *world {
	t.Helper()
	w := &world{logs: &testenv.SyncBuffer{}, hooked: make(chan string, 32), clock: ghsim.NewClock(time.Now())}
	w.sim = ghsim.New(ghsim.Options{ConfirmApps: true, BrowserUser: "mona", Now: w.clock.Now})
	t.Cleanup(w.sim.Close)
	w.sim.AddOrg("acme")
	w.sim.AddRepo("acme", "app")
	hook := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		w.hooked <- r.Header.Get("X-GitHub-Event")
	}))
	t.Cleanup(hook.Close)
	w.store = store(t)
	mux := http.NewServeMux()
	w.page = httptest.NewServer(mux)
	t.Cleanup(w.page.Close)
	w.url = w.page.URL + "/setup"
	h, err := setup.New(setup.Options{Store: w.store, PublicURL: w.url, WebhookURL: hook.URL + "/hook", AllowHTTPWebhook: true,
		GitHubURL: w.sim.WebURL(), GitHubAPIURL: w.sim.URL(), Now: w.clock.Now, Logger: slog.New(slog.NewJSONHandler(w.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	mux.Handle("/setup/", h)
	mux.Handle("/setup", h)
	return w
}

// motoStore is the stack's store over three secrets in Secrets Manager on moto.
func motoStore(t *testing.T) setup.Store {
	t.Helper()
	sm := secretsmanager.NewFromConfig(testenv.AWSConfig(t), func(o *secretsmanager.Options) {
		o.BaseEndpoint = aws.String(testenv.Moto(t))
	})
	ctx := context.Background()
	create := func(name, value string) string {
		out, err := sm.CreateSecret(ctx, &secretsmanager.CreateSecretInput{Name: aws.String(testenv.Unique(name + "-" + strings.ReplaceAll(t.Name(), "/", "-"))),
			SecretString: aws.String(value)})
		if err != nil {
			t.Fatalf("creating secret %s: %v", name, err)
		}
		return aws.ToString(out.ARN)
	}
	return smstore.SecretsStore{API: sm, SetupARN: create("setup", canary), AppKeyARN: create("app-key", placeholder),
		WebhookSecretARN: create("webhook", placeholder)}
}

// fileStore is local mode's store over a data directory, with the canary as
// its setup secret.
func fileStore(t *testing.T) setup.Store {
	t.Helper()
	return &canaryFiles{FileStore: setup.NewFileStore(filepath.Join(t.TempDir(), "data"))}
}

type canaryFiles struct{ *setup.FileStore }

func (c *canaryFiles) Key(ctx context.Context) (github.Secret, error) {
	if id, _ := c.Configured(ctx); id != 0 {
		return c.FileStore.Key(ctx)
	}
	return canary, nil
}

// startURL is the setup page with the secret and the organisation in its
// fragment (never sent to the server) and submit=1: the link skiff prints.
func (w *world) startURL(org string) string {
	return w.url + "#" + url.Values{"key": {canary}, "org": {org}, "submit": {"1"}}.Encode()
}

var (
	installRe = regexp.MustCompile(`<a id="install" href="([^"]+)"`)
	appIDRe   = regexp.MustCompile(`<code id="app-id">(\d+)</code>`)
)

// TestSetupInChromium drives the whole flow in a real headless Chromium:
// the setup page, the simulated GitHub's new-App page (confirmed), back to
// the callback, which stores the App in Secrets Manager on moto; then the
// installation page, back to the setup_url. The stored secrets are what the
// functions read; a second setup is refused; no log line holds a secret.
func TestSetupInChromium(t *testing.T) {
	browser := testenv.Chromium(t)
	w := newWorld(t, motoStore)
	ctx := context.Background()

	dom, errOut := testenv.DumpDOM(t, browser, w.startURL("acme"))
	if !strings.Contains(dom, "GitHub App created") {
		t.Fatalf("the flow did not end on the created page:\n%s\nchromium:\n%s\nlogs:\n%s", dom, errOut, w.logs.String())
	}
	apps := w.sim.CreatedApps()
	if len(apps) != 1 || !apps[0].Converted || apps[0].Owner != "acme" {
		t.Fatalf("GitHub holds %+v, want one App of acme, its code exchanged", apps)
	}
	app := apps[0]
	if m := appIDRe.FindStringSubmatch(dom); m == nil || m[1] != itoa(app.ID) {
		t.Errorf("the page names App %v, want %d", m, app.ID)
	}
	// The manifest asked for exactly skiff's permissions and events, with the webhook.
	if got := app.Manifest.DefaultPermissions; len(got) != 3 || got["organization_self_hosted_runners"] != "write" ||
		got["actions"] != "read" || got["metadata"] != "read" {
		t.Errorf("permissions %v", got)
	}
	if strings.Join(app.Manifest.DefaultEvents, ",") != "workflow_job,workflow_run" || app.Manifest.Public ||
		!strings.HasSuffix(app.Manifest.HookAttributes.URL, "/hook") || app.Manifest.RedirectURL != w.url+"/callback" {
		t.Errorf("manifest %+v", app.Manifest)
	}

	// What the functions read at cold start: the App ids from the key secret.
	st := w.store.(smstore.SecretsStore)
	keys, err := smsecret.Fetch(ctx, st.API, st.AppKeyARN)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := github.ParseAppKeys(nil, keys)
	if err != nil || len(parsed) != 1 || parsed[0].ID != app.ID || !parsed[0].Key.Equal(app.Key) {
		t.Fatalf("App key secret parses to %v, %v; want App %d with its key", parsed, err, app.ID)
	}
	hook, err := smsecret.Fetch(ctx, st.API, st.WebhookSecretARN)
	if err != nil {
		t.Fatal(err)
	}
	if hs, err := secret.WebhookSecrets(hook); err != nil || len(hs) != 1 || string(hs[0]) != app.WebhookSecret {
		t.Errorf("webhook secret holds %d secrets (%v), want the App's", len(hs), err)
	}
	if k, err := st.Key(ctx); err != nil || k.Reveal() == canary || len(k.Reveal()) < 32 {
		t.Errorf("the setup secret was not replaced (%v)", err)
	}

	// The second click: install; GitHub sends the installation webhook and
	// returns to the setup_url.
	m := installRe.FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("no install link in\n%s", dom)
	}
	dom, errOut = testenv.DumpDOM(t, browser, htmlUnescape(m[1]))
	if !strings.Contains(dom, "GitHub App installed") {
		t.Fatalf("the installation did not return to the setup page:\n%s\n%s", dom, errOut)
	}
	if insts := w.sim.Installations(app.ID); len(insts) != 1 || !strings.Contains(dom, itoa(insts[0])) {
		t.Errorf("installations %v; page:\n%s", insts, dom)
	}
	if ev := <-w.hooked; ev != "installation" {
		t.Errorf("the App's first webhook is %q, want installation", ev)
	}

	// A second setup is refused, in the browser and by the start endpoint.
	dom, _ = testenv.DumpDOM(t, browser, w.startURL("acme"))
	if !strings.Contains(dom, "skiff is set up") || len(w.sim.CreatedApps()) != 1 {
		t.Errorf("a second setup was not refused (%d Apps):\n%s", len(w.sim.CreatedApps()), dom)
	}
	if code := post(t, http.DefaultClient, w.url+"/start", url.Values{"key": {canary}, "org": {"acme"}}); code != http.StatusConflict {
		t.Errorf("second start: %d, want 409", code)
	}

	checkSetupLog(t, w.logs.String(), map[string]string{"setup secret": canary, "App key": pemBody(t, keys), "webhook secret": app.WebhookSecret})
}

// checkSetupLog fails t if logs hold any of secrets (by name), or lack the
// App's manifest being posted and the App being stored.
func checkSetupLog(t *testing.T, logs string, secrets map[string]string) {
	t.Helper()
	for name, s := range secrets {
		if strings.Contains(logs, s) {
			t.Errorf("the %s reached the log", name)
		}
	}
	for _, want := range []string{"GitHub App stored", "posting the App manifest"} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %q:\n%s", want, logs)
		}
	}
}

// otherLastDigit returns state with its MAC's last hex digit changed: a
// state this setup did not issue, whatever digit the MAC ends in.
func otherLastDigit(state string) string {
	last := byte('0')
	if state[len(state)-1] == '0' {
		last = '1'
	}
	return state[:len(state)-1] + string(last)
}

// TestSetupRefusals: a wrong setup secret, a callback whose state was not
// issued here, expired, or carried by another browser, and a made-up code
// are refused, and nothing is stored. The state check runs before the code
// is exchanged, so a refused callback leaves GitHub's code unused.
func TestSetupRefusals(t *testing.T) {
	t.Parallel()
	w := newWorld(t, fileStore)
	ctx := context.Background()
	anon := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	if code := post(t, anon, w.url+"/start", url.Values{"key": {"not-the-secret-at-all"}, "org": {"acme"}}); code != http.StatusForbidden {
		t.Errorf("wrong setup secret: %d, want 403", code)
	}
	if code := post(t, anon, w.url+"/start", url.Values{"key": {canary}, "org": {"a/b"}}); code != http.StatusBadRequest {
		t.Errorf("bad organisation: %d, want 400", code)
	}

	// A real flow by hand: start in browser A, GitHub's code comes back.
	jar, _ := cookiejar.New(nil)
	a := &http.Client{Jar: jar, CheckRedirect: anon.CheckRedirect}
	state, manifest := startFlow(t, a, w.url)
	back := confirm(t, w.sim, state, manifest)
	code := back.Query().Get("code")

	cases := []struct {
		name   string
		client *http.Client
		state  string
	}{
		{"wrong state", a, otherLastDigit(state)},
		{"malformed state", a, "x"},
		{"no state", a, ""},
		{"another browser", anon, state},
	}
	for _, tc := range cases {
		u := w.url + "/callback?" + url.Values{"code": {code}, "state": {tc.state}}.Encode()
		if got := get(t, tc.client, u); got != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", tc.name, got)
		}
	}
	// A state older than GitHub's hour is refused.
	jar2, _ := cookiejar.New(nil)
	late := &http.Client{Jar: jar2, CheckRedirect: anon.CheckRedirect}
	lateState, lateManifest := startFlow(t, late, w.url, "skiff-late")
	lateBack := confirm(t, w.sim, lateState, lateManifest)
	w.clock.Advance(setup.StateTTL + time.Second)
	if got := get(t, late, w.url+"/callback?"+lateBack.RawQuery); got != http.StatusBadRequest {
		t.Errorf("expired state: %d, want 400", got)
	}
	w.clock.Advance(-setup.StateTTL - time.Second)
	for _, a := range w.sim.CreatedApps() {
		if a.Converted {
			t.Fatal("a refused callback exchanged GitHub's code")
		}
	}
	if id, _ := w.store.Configured(ctx); id != 0 {
		t.Fatalf("a refused callback stored App %d", id)
	}
	// A made-up code with a good state: GitHub's 404, nothing stored.
	if got := get(t, a, w.url+"/callback?"+url.Values{"code": {"0123456789abcdef0123"}, "state": {state}}.Encode()); got != http.StatusBadGateway {
		t.Errorf("unknown code: %d, want 502", got)
	}
	// The right state and code complete it; a replay is refused.
	if got := get(t, a, w.url+"/callback?"+url.Values{"code": {code}, "state": {state}}.Encode()); got != http.StatusOK {
		t.Fatalf("the real callback: %d", got)
	}
	if got := get(t, a, w.url+"/callback?"+url.Values{"code": {code}, "state": {state}}.Encode()); got != http.StatusConflict {
		t.Errorf("replayed callback: %d, want 409", got)
	}
	if got := get(t, anon, w.url); got != http.StatusConflict {
		t.Errorf("the page after setup: %d, want 409", got)
	}

	checkLocalAppFiles(t, w)
	if strings.Contains(w.logs.String(), canary) {
		t.Error("the setup secret reached the log")
	}
}

// checkLocalAppFiles fails t unless local mode's files of the App w's
// setup created are in its data directory, 0600, and load back as that
// App.
func checkLocalAppFiles(t *testing.T, w *world) {
	t.Helper()
	dir := w.store.(*canaryFiles).Dir
	for _, name := range []string{setup.AppKeyFile, setup.WebhookSecretFile, setup.AppFile} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, mode %v; want 0600", name, err, fi.Mode().Perm())
		}
	}
	keys, hook, ok, err := setup.LoadLocalApp(dir)
	if err != nil || !ok || hook != w.sim.CreatedApps()[0].WebhookSecret {
		t.Fatalf("LoadLocalApp: ok %v, %v", ok, err)
	}
	if apps, err := github.ParseAppKeys(nil, keys); err != nil || apps[0].ID != w.sim.CreatedApps()[0].ID {
		t.Errorf("local key file parses to %v, %v", apps, err)
	}
}

// TestSetupPersonalAccount: the personal-account choice posts to
// /settings/apps/new and the App belongs to the signed-in user.
func TestSetupPersonalAccount(t *testing.T) {
	t.Parallel()
	w := newWorld(t, fileStore)
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.PostForm(w.url+"/start", url.Values{"key": {canary}, "account": {"personal"}, "name": {"skiff-mona"}})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `action="`+w.sim.WebURL()+`/settings/apps/new?state=`) {
		t.Fatalf("the manifest is not posted to the personal account's page:\n%s", body)
	}
	state, manifest := parseRedirect(t, string(body))
	back := confirmAt(t, w.sim, "", state, manifest)
	if got := get(t, c, w.url+"/callback?"+back.RawQuery); got != http.StatusOK {
		t.Fatalf("callback: %d", got)
	}
	if a := w.sim.CreatedApps()[0]; a.Owner != "mona" || a.Slug != "skiff-mona" {
		t.Errorf("App %+v, want skiff-mona of mona", a)
	}
}

// TestSetupStoreFailureKeepsPageOpen: when storing fails, the page says
// so and stays usable (the key is written last, so nothing marks it set up).
func TestSetupStoreFailureKeepsPageOpen(t *testing.T) {
	t.Parallel()
	w := newWorld(t, func(t *testing.T) setup.Store {
		return &failingSave{canaryFiles{setup.NewFileStore(filepath.Join(t.TempDir(), "data"))}}
	})
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	state, manifest := startFlow(t, c, w.url)
	back := confirm(t, w.sim, state, manifest)
	if got := get(t, c, w.url+"/callback?"+back.RawQuery); got != http.StatusServiceUnavailable {
		t.Errorf("callback with a failing store: %d, want 503", got)
	}
	if got := get(t, c, w.url); got != http.StatusOK {
		t.Errorf("the page after a failed store: %d, want 200 (it can run again)", got)
	}
}

type failingSave struct{ canaryFiles }

func (failingSave) Save(context.Context, *github.ManifestApp) error {
	return errors.New("AccessDeniedException")
}

// startFlow posts the start form with the canary secret for acme and
// returns the state and manifest of the page that posts to GitHub.
func startFlow(t *testing.T, c *http.Client, page string, name ...string) (state, manifest string) {
	t.Helper()
	resp, err := c.PostForm(page+"/start", url.Values{"key": {canary}, "org": {"acme"}, "name": name})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("start: %d\n%s", resp.StatusCode, body)
	}
	return parseRedirect(t, string(body))
}

var (
	actionRe   = regexp.MustCompile(`<form id="manifest" method="post" action="[^"]*\?state=([^"]+)">`)
	manifestRe = regexp.MustCompile(`name="manifest" value="([^"]+)"`)
)

func parseRedirect(t *testing.T, body string) (state, manifest string) {
	t.Helper()
	a, m := actionRe.FindStringSubmatch(body), manifestRe.FindStringSubmatch(body)
	if a == nil || m == nil {
		t.Fatalf("no manifest form in\n%s", body)
	}
	st, err := url.QueryUnescape(htmlUnescape(a[1]))
	if err != nil {
		t.Fatal(err)
	}
	return st, htmlUnescape(m[1])
}

// confirm is the operator's click on GitHub's page for acme.
func confirm(t *testing.T, sim *ghsim.Server, state, manifest string) *url.URL {
	t.Helper()
	return confirmAt(t, sim, "/organizations/acme", state, manifest)
}

func confirmAt(t *testing.T, sim *ghsim.Server, prefix, state, manifest string) *url.URL {
	t.Helper()
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.PostForm(sim.WebURL()+prefix+"/settings/apps/new/confirm?"+url.Values{"state": {state}}.Encode(),
		url.Values{"manifest": {manifest}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	back, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || resp.StatusCode != http.StatusFound {
		t.Fatalf("confirm: %d %v", resp.StatusCode, err)
	}
	return back
}

func get(t *testing.T, c *http.Client, u string) int {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func post(t *testing.T, c *http.Client, u string, v url.Values) int {
	t.Helper()
	resp, err := c.PostForm(u, v)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func htmlUnescape(s string) string {
	return strings.NewReplacer("&amp;", "&", "&#34;", `"`, "&quot;", `"`, "&#39;", "'", "&lt;", "<", "&gt;", ">", "&#43;", "+").Replace(s)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// pemBody is a line from the middle of the stored key, to look for in logs.
func pemBody(t *testing.T, keys string) string {
	t.Helper()
	i := strings.Index(keys, "BEGIN RSA PRIVATE KEY")
	if i < 0 || len(keys) < i+120 {
		t.Fatal("no PEM in the key secret")
	}
	return keys[i+60 : i+110]
}

// TestFileStoreKeyWhileSaving: skiff setup serves its page's requests
// concurrently, so one request reads the setup secret (Key) while another
// saves the App, which forgets the secret (Save). The secret is guarded:
// under the race detector (make race) an unguarded one fails here, as it
// once did in cmd/skiff's browser test. Without it the test still checks
// that Save forgets the secret and that a reader sees the old one or the
// new one, never another.
func TestFileStoreKeyWhileSaving(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup.NewFileStore(filepath.Join(t.TempDir(), "data"))
	before, err := s.Key(ctx)
	if err != nil || before.Reveal() == "" {
		t.Fatalf("Key: %q, %v", before.Reveal(), err)
	}
	app := &github.ManifestApp{ID: 7, Slug: "skiff", Owner: "acme", HTMLURL: "https://github.com/apps/skiff",
		PEM: github.Secret(testenv.KeyPEM()), WebhookSecret: "hook"}
	var wg sync.WaitGroup
	seen := make([]github.Secret, 200)
	wg.Go(func() {
		if err := s.Save(ctx, app); err != nil {
			t.Errorf("Save: %v", err)
		}
	})
	for i := range seen {
		wg.Go(func() { seen[i], _ = s.Key(ctx) })
	}
	wg.Wait()
	after, _ := s.Key(ctx)
	if after == before || after.Reveal() == "" {
		t.Errorf("after Save the setup secret is %q, want a fresh one (the old one forgotten)", after.Reveal())
	}
	for i, k := range seen {
		if k != before && k != after {
			t.Errorf("read %d saw %q: neither the secret before Save nor after", i, k.Reveal())
		}
	}
	if id, err := s.Configured(ctx); err != nil || id != 7 {
		t.Errorf("Configured after Save: %d, %v", id, err)
	}
}
