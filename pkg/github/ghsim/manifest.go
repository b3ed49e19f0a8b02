package ghsim

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"
)

// The App-manifest flow (docs.github.com, "Registering a GitHub App from a
// manifest"), both halves:
//
//	browser ──POST manifest──► /settings/apps/new?state=S            (a personal account)
//	                           /organizations/{org}/settings/apps/new?state=S
//	        ◄── a page naming the App, with a "Create GitHub App" button
//	        ──POST (the click)──► the App is registered; a code (one hour, single use)
//	        ◄── 302 redirect_url?code=C&state=S
//	client ──POST /app-manifests/{code}/conversions──► 201 the App with id, pem, webhook_secret
//
// The browser side is served at the web root (no BasePath); the conversion
// under the API's base path, without authentication, as GitHub does.

// OpCreateAppFromManifest is the conversion of a manifest code into the App's
// credentials.
const OpCreateAppFromManifest = "POST /app-manifests/{code}/conversions"

// manifestCodeTTL is how long a manifest code can be exchanged: GitHub asks
// for the three steps to be completed within one hour.
const manifestCodeTTL = time.Hour

// appKeyBits is the size of the keys the simulator issues for Apps created
// from a manifest (GitHub's are 2048-bit RSA keys).
const appKeyBits = 2048

// Manifest is a GitHub App manifest as the browser posts it.
type Manifest struct {
	Name               string            `json:"name"`
	URL                string            `json:"url"`
	Description        string            `json:"description,omitempty"`
	HookAttributes     *HookAttributes   `json:"hook_attributes,omitempty"`
	RedirectURL        string            `json:"redirect_url,omitempty"`
	CallbackURLs       []string          `json:"callback_urls,omitempty"`
	SetupURL           string            `json:"setup_url,omitempty"`
	Public             bool              `json:"public"`
	DefaultEvents      []string          `json:"default_events,omitempty"`
	DefaultPermissions map[string]string `json:"default_permissions,omitempty"`
}

// HookAttributes is the manifest's webhook.
type HookAttributes struct {
	URL    string `json:"url"`
	Active *bool  `json:"active,omitempty"`
}

// CreatedApp is an App the simulator registered from a manifest.
type CreatedApp struct {
	ID       int64
	Slug     string
	Owner    string // the organization or user that owns it
	Manifest Manifest
	Key      *rsa.PrivateKey
	// WebhookSecret is the secret GitHub generated for the App's webhook.
	WebhookSecret string
	// Converted reports whether the code was exchanged.
	Converted bool
}

type simManifestCode struct {
	app     *CreatedApp
	expires time.Time
	used    bool
}

// CreatedApps returns the Apps registered from manifests, oldest first.
func (s *Server) CreatedApps() []CreatedApp {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]CreatedApp, len(s.created))
	for i, a := range s.created {
		out[i] = *a
	}
	return out
}

// WebURL is the web root the browser side of the simulator is served at
// (https://github.com in production; no BasePath).
func (s *Server) WebURL() string { return s.webBase }

var slugUnsafe = regexp.MustCompile(`[^a-z0-9]+`)

func slugOf(name string) string {
	return strings.Trim(slugUnsafe.ReplaceAllString(strings.ToLower(name), "-"), "-")
}

// newAppForm answers the browser's POST of a manifest: the page where the
// operator confirms the App's name.
func (s *Server) newAppForm(w http.ResponseWriter, r *http.Request) {
	owner := r.PathValue("org")
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad form", http.StatusBadRequest)
		return
	}
	raw := r.PostForm.Get("manifest")
	m, err := parseManifest(raw)
	if err != nil {
		// GitHub shows the error on its page; the simulator answers 422 with it.
		http.Error(w, "Invalid GitHub App configuration: "+err.Error(), http.StatusUnprocessableEntity)
		return
	}
	if owner != "" {
		s.mu.Lock()
		a := s.accounts[strings.ToLower(owner)]
		s.mu.Unlock()
		if a == nil || a.typ != "Organization" {
			http.Error(w, "Not Found", http.StatusNotFound)
			return
		}
	}
	s.mu.Lock()
	auto := s.opts.ConfirmApps
	s.mu.Unlock()
	action := r.URL.Path + "/confirm"
	if st := r.URL.Query().Get("state"); st != "" {
		action += "?" + url.Values{"state": {st}}.Encode()
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = newAppPage.Execute(w, struct {
		Name, Manifest, Action string
		Auto                   bool
	}{m.Name, raw, action, auto})
}

var newAppPage = template.Must(template.New("new").Parse(`<!doctype html>
<html><head><title>Create GitHub App</title></head><body>
<h1>Create GitHub App</h1>
<form id="create" method="post" action="{{.Action}}">
<label>GitHub App name <input name="name" value="{{.Name}}"></label>
<input type="hidden" name="manifest" value="{{.Manifest}}">
<button type="submit">Create GitHub App</button>
</form>
{{if .Auto}}<script>document.getElementById("create").submit()</script>{{end}}
</body></html>
`))

// confirmApp is the operator's click on "Create GitHub App": the App is
// registered and the browser sent back to the manifest's redirect_url with a
// code and the state it came with.
func (s *Server) confirmApp(w http.ResponseWriter, r *http.Request) {
	org := r.PathValue("org")
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad form", http.StatusBadRequest)
		return
	}
	m, err := parseManifest(r.PostForm.Get("manifest"))
	if err != nil {
		http.Error(w, "Invalid GitHub App configuration: "+err.Error(), http.StatusUnprocessableEntity)
		return
	}
	if n := strings.TrimSpace(r.PostForm.Get("name")); n != "" {
		m.Name = n
	}
	key, err := rsa.GenerateKey(rand.Reader, appKeyBits)
	if err != nil {
		http.Error(w, "key generation failed", http.StatusInternalServerError)
		return
	}
	s.mu.Lock()
	owner := s.opts.BrowserUser
	if owner == "" {
		owner = "octocat"
	}
	var acct *simAccount
	if org != "" {
		acct = s.accounts[strings.ToLower(org)]
	} else {
		acct = s.accountLocked(owner, "User")
	}
	if acct == nil {
		s.mu.Unlock()
		http.Error(w, "Not Found", http.StatusNotFound)
		return
	}
	slug := slugOf(m.Name)
	for _, a := range s.apps {
		if a.Slug == slug {
			s.mu.Unlock()
			http.Error(w, "Name is already in use", http.StatusUnprocessableEntity)
			return
		}
	}
	id := s.nextID()
	created := &CreatedApp{ID: id, Slug: slug, Owner: acct.login, Manifest: m, Key: key,
		WebhookSecret: s.tokenLocked("", 40, "0123456789abcdef")}
	app := &simApp{AppConfig: AppConfig{ID: id, Slug: slug, PublicKey: &key.PublicKey,
		WebhookSecret: created.WebhookSecret, InstallationEvents: true}}
	if h := m.HookAttributes; h != nil && (h.Active == nil || *h.Active) {
		app.WebhookURL = h.URL
	}
	app.owner, app.created, app.manifest = acct, s.now(), m
	s.apps[id] = app
	s.created = append(s.created, created)
	code := s.tokenLocked("", 20, "0123456789abcdef")
	s.codes[code] = &simManifestCode{app: created, expires: s.now().Add(manifestCodeTTL)}
	s.mu.Unlock()

	back, err := url.Parse(m.RedirectURL)
	if m.RedirectURL == "" || err != nil {
		// Without a redirect_url GitHub shows the new App's settings page.
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, "<!doctype html><p>App %s created.</p>\n", template.HTMLEscapeString(slug))
		return
	}
	q := back.Query()
	q.Set("code", code)
	if st := r.URL.Query().Get("state"); st != "" {
		q.Set("state", st)
	}
	back.RawQuery = q.Encode()
	http.Redirect(w, r, back.String(), http.StatusFound)
}

// parseManifest reads the manifest form field as GitHub does: JSON, with
// the url and, when given, hook_attributes.url required.
func parseManifest(raw string) (Manifest, error) {
	var m Manifest
	if strings.TrimSpace(raw) == "" {
		return m, fmt.Errorf("no manifest")
	}
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		return m, fmt.Errorf("the manifest is not JSON")
	}
	if m.URL == "" {
		return m, fmt.Errorf("url is required")
	}
	if m.HookAttributes != nil && m.HookAttributes.URL == "" {
		return m, fmt.Errorf("hook_attributes.url is required")
	}
	if m.Name == "" {
		m.Name = "app"
	}
	return m, nil
}

// createAppFromManifest exchanges a manifest code for the App (201), once.
func (s *Server) createAppFromManifest(c *call) {
	code := c.r.PathValue("code")
	s.mu.Lock()
	defer s.mu.Unlock()
	mc := s.codes[code]
	if mc == nil || mc.used || !s.now().Before(mc.expires) {
		c.fail(http.StatusNotFound, "Not Found")
		return
	}
	mc.used = true
	mc.app.Converted = true
	app := s.apps[mc.app.ID]
	pemKey := string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(mc.app.Key)}))
	s.secretLocked(pemKey)
	out := s.appJSON(app)
	out["client_id"] = fmt.Sprintf("Iv1.sim%d", app.ID)
	out["client_secret"] = s.tokenLocked("", 40, "0123456789abcdef")
	out["webhook_secret"] = mc.app.WebhookSecret
	out["pem"] = pemKey
	c.json(http.StatusCreated, out)
}

// appJSON is the integration schema of an App.
func (s *Server) appJSON(a *simApp) obj {
	owner := a.owner
	if owner == nil {
		owner = s.accountLocked("octocat", "User")
	}
	perms := obj{}
	events := []string{}
	if a.manifest.DefaultPermissions != nil {
		for k, v := range a.manifest.DefaultPermissions {
			perms[k] = v
		}
	}
	events = append(events, a.manifest.DefaultEvents...)
	var desc any
	if a.manifest.Description != "" {
		desc = a.manifest.Description
	}
	name := a.manifest.Name
	if name == "" {
		name = a.Slug
	}
	return obj{
		"id": a.ID, "slug": a.Slug, "node_id": nodeID("Integration", a.ID), "client_id": fmt.Sprintf("Iv1.sim%d", a.ID),
		"owner": s.userJSON(owner), "name": name, "description": desc, "external_url": a.manifest.URL,
		"html_url": s.webBase + "/apps/" + a.Slug, "created_at": ts(a.created), "updated_at": ts(a.created),
		"permissions": perms, "events": events,
	}
}
