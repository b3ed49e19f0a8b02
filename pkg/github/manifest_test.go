package github_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/github/internal/apispec"
)

// noRedirect stops at GitHub's redirect, as a test reading the code needs.
var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// createFromManifest posts a manifest as the browser does (form field
// manifest, state in the query) to the org's (or the personal account's)
// new-App page, confirms it, and returns where GitHub redirected.
func createFromManifest(t *testing.T, sim *ghsim.Server, org string, manifest any, state string) *url.URL {
	t.Helper()
	raw, err := json.Marshal(manifest)
	if err != nil {
		t.Fatal(err)
	}
	page := sim.WebURL() + "/settings/apps/new"
	if org != "" {
		page = sim.WebURL() + "/organizations/" + org + "/settings/apps/new"
	}
	q := "?" + url.Values{"state": {state}}.Encode()
	resp, err := http.PostForm(page+q, url.Values{"manifest": {string(raw)}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("new App page: %d", resp.StatusCode)
	}
	resp, err = noRedirect.PostForm(page+"/confirm"+q, url.Values{"manifest": {string(raw)}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("confirming the App: %d, want 302", resp.StatusCode)
	}
	back, err := url.Parse(resp.Header.Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	return back
}

// TestManifestFlowMatchesGitHubSpec runs the App-manifest flow against the
// simulator, validates the conversion's answers (201, then 404 for the used
// code) against GitHub's description, and checks that the App works: its
// key signs JWTs the simulator accepts, and its installation webhooks
// (created, suspend, unsuspend, deleted) match the x-webhooks schemas.
func TestManifestFlowMatchesGitHubSpec(t *testing.T) {
	t.Parallel()
	sp := apispec.GitHub(t)
	opts, got := exchanges()
	clock := ghsim.NewClock(t0)
	opts.Now = clock.Now
	sim := ghsim.New(opts)
	t.Cleanup(sim.Close)
	sim.AddOrg("acme")
	sim.AddRepo("acme", "app")
	hooks := make(chan string, 16)
	receiver := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hooks <- r.Header.Get("X-GitHub-Event")
	})}
	hookURL := serve(t, receiver)
	manifest := map[string]any{
		"name": "skiff-acme", "url": "https://github.com/skiffci/skiff",
		"hook_attributes": map[string]any{"url": hookURL, "active": true},
		"redirect_url":    "https://setup.example/callback?x=1", "public": false,
		"default_permissions": map[string]string{"organization_self_hosted_runners": "write", "actions": "read", "metadata": "read"},
		"default_events":      []string{"workflow_job", "workflow_run"},
	}
	back := createFromManifest(t, sim, "acme", manifest, "st-123")
	if back.Host != "setup.example" || back.Query().Get("state") != "st-123" || back.Query().Get("x") != "1" {
		t.Fatalf("redirected to %s, want redirect_url with state and its own query", back)
	}
	code := back.Query().Get("code")
	ctx := ctxT(t)
	app, err := github.ConvertManifestCode(ctx, sim.URL(), code, nil)
	if err != nil {
		t.Fatal(err)
	}
	if app.Slug != "skiff-acme" || app.Owner != "acme" || app.WebhookSecret.Reveal() == "" || app.ID <= 0 {
		t.Errorf("app = %+v", app)
	}
	if !strings.HasSuffix(app.InstallURL(), "/apps/skiff-acme/installations/new") {
		t.Errorf("install URL %s", app.InstallURL())
	}
	if _, err := github.ConvertManifestCode(ctx, sim.URL(), code, nil); !errors.Is(err, github.ErrManifestCode) {
		t.Errorf("second conversion: %v, want ErrManifestCode", err)
	}
	if _, err := github.ConvertManifestCode(ctx, sim.URL(), "../../app", nil); !errors.Is(err, github.ErrManifestCode) {
		t.Errorf("malformed code: %v, want ErrManifestCode", err)
	}

	// The key works: the App's JWT finds its installation.
	key, err := github.ParsePrivateKey([]byte(app.PEM.Reveal()))
	if err != nil {
		t.Fatal(err)
	}
	inst := sim.Install(app.ID, "acme")
	client, err := github.NewClient([]github.App{{ID: app.ID, Key: key}}, github.WithBaseURL(sim.URL()), github.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	if id, err := client.OrgInstallation(ctx, "acme"); err != nil || id.ID != inst {
		t.Fatalf("installation = %+v, %v; want %d", id, err, inst)
	}
	if err := sim.Suspend(inst); err != nil {
		t.Fatal(err)
	}
	if err := sim.Unsuspend(inst); err != nil {
		t.Fatal(err)
	}
	sim.Uninstall(inst)
	sim.Step()
	_, _ = client.OrgInstallation(ctx, "acme") // pumps the last deliveries

	checkInstallationDeliveries(t, sp, sim.Deliveries())
	checkManifestAnswers(t, sp, got())
}

// checkInstallationDeliveries fails t unless ds hold an installation's
// created, suspend, unsuspend and deleted events, each delivered and each
// payload as GitHub describes it.
func checkInstallationDeliveries(t *testing.T, sp *apispec.Spec, ds []ghsim.Delivery) {
	t.Helper()
	seen := map[string]bool{}
	for _, d := range ds {
		name := d.Event + "-" + d.Action
		seen[name] = true
		if err := sp.ValidateWebhook(name, d.Payload); err != nil {
			t.Errorf("%s payload does not match GitHub's description: %v", name, err)
		}
		if d.StatusCode != http.StatusOK {
			t.Errorf("%s delivery: %d", name, d.StatusCode)
		}
	}
	for _, w := range []string{"installation-created", "installation-suspend", "installation-unsuspend", "installation-deleted"} {
		if !seen[w] {
			t.Errorf("no %s delivery", w)
		}
	}
}

// checkManifestAnswers fails t unless the manifest conversions among xs
// answered 201 and 404, each as GitHub describes it.
func checkManifestAnswers(t *testing.T, sp *apispec.Spec, xs []ghsim.Exchange) {
	t.Helper()
	covered := map[int]bool{}
	for _, x := range xs {
		if x.Op != ghsim.OpCreateAppFromManifest {
			continue
		}
		covered[x.Status] = true
		if err := sp.ValidateResponse(x.Op, x.Status, x.Body); err != nil {
			t.Errorf("%s %d: answer does not match GitHub's description: %v\n%.600s", x.Op, x.Status, err, x.Body)
		}
	}
	if !covered[201] || !covered[404] {
		t.Errorf("conversion answers validated: %v, want 201 and 404", covered)
	}
}

// TestManifestFlowPersonalAccount: an App created for a personal account
// is owned by the signed-in user; an unknown organization is a 404.
func TestManifestFlowPersonalAccount(t *testing.T) {
	t.Parallel()
	sim := ghsim.New(ghsim.Options{BrowserUser: "mona"})
	t.Cleanup(sim.Close)
	back := createFromManifest(t, sim, "", map[string]any{"name": "Skiff Mona", "url": "https://x.example",
		"redirect_url": "http://127.0.0.1:1/cb"}, "s")
	app, err := github.ConvertManifestCode(context.Background(), sim.URL(), back.Query().Get("code"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if app.Owner != "mona" || app.OwnerType != "User" || app.Slug != "skiff-mona" || app.WebhookSecret.Reveal() == "" {
		t.Errorf("app = %+v", app)
	}
	resp, err := http.PostForm(sim.WebURL()+"/organizations/nobody/settings/apps/new", url.Values{"manifest": {`{"url":"https://x"}`}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown organization: %d, want 404", resp.StatusCode)
	}
}

// serve runs srv on 127.0.0.1 until the test ends and returns its URL.
func serve(t *testing.T, srv *http.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String() + "/hook"
}
