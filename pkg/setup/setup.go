// Package setup creates skiff's GitHub App from a browser: a page, guarded
// by a one-time setup secret, that runs GitHub's App-manifest flow and
// stores the new App's id, private key and webhook secret where skiff's
// functions read them (Secrets Manager in AWS, the data directory in local
// mode).
//
//	GET  {prefix}/          the form: setup secret, organisation or personal
//	                        account (or "already set up", 409)
//	POST {prefix}/start     setup secret checked (constant time); a state
//	                        bound to it and to a cookie; the manifest posted
//	                        to GitHub's new-App page by the browser
//	     GitHub             the operator names the App, clicks Create
//	GET  {prefix}/callback  state and cookie checked; the code exchanged
//	                        (POST /app-manifests/{code}/conversions); the
//	                        App stored, the setup secret replaced; the page
//	                        links to the App's installation page
//	GET  {prefix}/installed GitHub's setup_url after the installation
//
// Once an App is stored every step answers "already set up" (409); storing
// an empty JSON object ({}) in the App key secret resets it
// (docs/deploy.md). The setup secret, the state, the code and the App's
// credentials never reach a log line or an error the browser sees.
package setup

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/skiffci/skiff/pkg/config"
	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/names"
)

// Config is the setup function's configuration: the stack's secrets the
// page reads and writes, and the addresses the App's manifest names.
// ConfigFromEnv reads it; docs/configuration.md lists the variables.
type Config struct {
	SetupSecretARN   string // SKIFF_SETUP_SECRET_ARN: the one-time setup secret
	PrivateKeyARN    string // SKIFF_GITHUB_PRIVATE_KEY_ARN: where the App's key lands
	WebhookSecretARN string // SKIFF_WEBHOOK_SECRET_ARN: where its webhook secret lands
	WebhookURL       string // SKIFF_WEBHOOK_URL: the webhook function's URL
	GitHubURL        string // SKIFF_GITHUB_URL
	GitHubAPIURL     string // SKIFF_GITHUB_API_URL
}

// ConfigFromEnv reads the configuration through getenv and reports
// every missing or malformed variable by name.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	env := config.NewEnv(getenv)
	c := Config{
		SetupSecretARN:   env.Required(names.EnvSetupSecretARN),
		PrivateKeyARN:    env.Required(names.EnvGitHubPrivateKeyARN),
		WebhookSecretARN: env.Required(names.EnvWebhookSecretARN),
		WebhookURL:       env.Required(names.EnvWebhookURL),
		GitHubURL:        env.String(names.EnvGitHubURL, "https://github.com"),
		GitHubAPIURL:     env.String(names.EnvGitHubAPIURL, github.DefaultBaseURL),
	}
	// The webhook URL's shape (https) is checked when the page is built.
	return c, env.Err()
}

// String describes the configuration for a cold-start log line, without secrets.
func (c Config) String() string {
	return strings.Join([]string{"setup_secret=" + c.SetupSecretARN, "app_key=" + c.PrivateKeyARN,
		"webhook_secret=" + c.WebhookSecretARN, "webhook_url=" + c.WebhookURL, "github=" + c.GitHubURL,
		"github_api=" + c.GitHubAPIURL}, " ")
}

// Store is where the setup secret is read and the App is stored.
//
// Key returns the setup secret. Configured returns the id of the App
// already stored (0: none yet; the functions are waiting for one). Save
// stores the App's id, private key and webhook secret, so that the
// functions find them at their next read, and replaces the setup secret so
// that it cannot be used again. Errors never quote a secret's value.
type Store interface {
	Key(ctx context.Context) (github.Secret, error)
	Configured(ctx context.Context) (int64, error)
	Save(ctx context.Context, app *github.ManifestApp) error
}

// Defaults, each with the reason for its value.
const (
	// StateTTL bounds how long a started setup can come back: GitHub asks
	// for the whole manifest flow to be completed within one hour.
	StateTTL = time.Hour
	// cookieName binds the state to the browser that started the flow, so
	// that a code and state replayed from elsewhere are refused.
	cookieName = "skiff_setup"
	// minKeyLen refuses a setup secret too short to guard anything (the
	// stack generates 48 characters, skiff setup 32 bytes).
	minKeyLen = 16
)

// Options configure a Handler. Store, PublicURL and WebhookURL are required.
type Options struct {
	Store Store
	// PublicURL is where the handler is reached, e.g.
	// http://127.0.0.1:8081/setup: GitHub redirects to PublicURL/callback.
	// Its path is the prefix the handler serves. Empty: https:// and the
	// request's host, then Prefix (a Function URL, whose own URL its
	// function cannot be told without a cycle in the template).
	PublicURL string
	// Prefix is the path served when PublicURL is empty (default none).
	Prefix string
	// WebhookURL is the App's webhook (the webhook function's URL).
	WebhookURL string
	// AllowHTTPWebhook accepts an http:// webhook URL (local mode behind a
	// tunnel or the simulator); production webhooks are https.
	AllowHTTPWebhook bool
	// GitHubURL is GitHub's web root (default https://github.com; a GHES
	// host https://HOST); GitHubAPIURL its REST root (default
	// github.DefaultBaseURL; https://HOST/api/v3).
	GitHubURL, GitHubAPIURL string
	// HTTPClient exchanges the code (default: 30 s timeout).
	HTTPClient *http.Client
	// OnInstalled, if set, is told the installation GitHub's setup_url
	// redirect names (skiff setup stops serving then).
	OnInstalled func(installationID int64)
	Logger      *slog.Logger     // default slog.Default()
	Now         func() time.Time // default time.Now
}

// Handler serves the setup page. It is safe for concurrent use.
type Handler struct {
	o      Options
	prefix string
	secure bool
}

// New returns a Handler, or an error naming what is missing.
func New(o Options) (*Handler, error) {
	if o.Store == nil {
		return nil, errors.New("setup: no store")
	}
	prefix, secure := strings.TrimRight(o.Prefix, "/"), true
	if o.PublicURL != "" {
		pub, err := url.Parse(o.PublicURL)
		if err != nil || (pub.Scheme != "https" && pub.Scheme != "http") || pub.Host == "" {
			return nil, fmt.Errorf("setup: public URL %q is not an http(s) URL", o.PublicURL)
		}
		prefix, secure = strings.TrimRight(pub.Path, "/"), pub.Scheme == "https"
	}
	if o.AllowHTTPWebhook {
		if u, err := url.Parse(o.WebhookURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
			return nil, fmt.Errorf("setup: webhook URL %q is not an http(s) URL", o.WebhookURL)
		}
	} else if _, err := NewManifest(o.WebhookURL, ""); err != nil {
		return nil, fmt.Errorf("setup: %w", err)
	}
	if o.GitHubURL == "" {
		o.GitHubURL = "https://github.com"
	}
	o.GitHubURL = strings.TrimRight(o.GitHubURL, "/")
	if o.GitHubAPIURL == "" {
		o.GitHubAPIURL = github.DefaultBaseURL
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	o.PublicURL = strings.TrimRight(o.PublicURL, "/")
	return &Handler{o: o, prefix: prefix, secure: secure}, nil
}

// publicURL is where GitHub sends the browser back to.
func (h *Handler) publicURL(r *http.Request) string {
	if h.o.PublicURL != "" {
		return h.o.PublicURL
	}
	return "https://" + r.Host + h.prefix
}

// Prefix is the path the handler serves under ("" or e.g. "/setup").
func (h *Handler) Prefix() string { return h.prefix }

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hdr := w.Header()
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("Referrer-Policy", "no-referrer")
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("X-Frame-Options", "DENY")
	sub, ok := strings.CutPrefix(r.URL.Path, h.prefix)
	if !ok {
		h.page(w, http.StatusNotFound, pageData{Title: "Not found"})
		return
	}
	switch {
	case (sub == "" || sub == "/") && r.Method == http.MethodGet:
		h.form(w, r)
	case sub == "/start" && r.Method == http.MethodPost:
		h.start(w, r)
	case sub == "/callback" && r.Method == http.MethodGet:
		h.callback(w, r)
	case sub == "/installed" && r.Method == http.MethodGet:
		h.installed(w, r)
	default:
		h.page(w, http.StatusNotFound, pageData{Title: "Not found"})
	}
}

// configured answers "already set up" and reports true when an App is
// stored, or a failure page when the store cannot tell.
func (h *Handler) configured(w http.ResponseWriter, r *http.Request) bool {
	id, err := h.o.Store.Configured(r.Context())
	if err != nil {
		h.o.Logger.Error("setup: reading the App secret failed", "err", err)
		h.page(w, http.StatusServiceUnavailable, pageData{Title: "Try again", Message: "skiff could not read its secrets; see the function's log."})
		return true
	}
	if id != 0 {
		app := "A GitHub App"
		if id > 0 {
			app = fmt.Sprintf("GitHub App %d", id)
		}
		h.page(w, http.StatusConflict, pageData{Title: "skiff is set up",
			Message: app + " is configured. This page does not run again; docs/deploy.md says how to reset it."})
		return true
	}
	return false
}

func (h *Handler) form(w http.ResponseWriter, r *http.Request) {
	if h.configured(w, r) {
		return
	}
	h.page(w, http.StatusOK, pageData{Title: "Set up skiff", Form: true, Action: h.prefix + "/start", GitHubURL: h.o.GitHubURL})
}

func (h *Handler) start(w http.ResponseWriter, r *http.Request) {
	if h.configured(w, r) {
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	if err := r.ParseForm(); err != nil {
		h.page(w, http.StatusBadRequest, pageData{Title: "Bad request", Message: "The form could not be read."})
		return
	}
	key, err := h.o.Store.Key(r.Context())
	if err != nil || len(key.Reveal()) < minKeyLen {
		h.o.Logger.Error("setup: reading the setup secret failed", "err", err)
		h.page(w, http.StatusServiceUnavailable, pageData{Title: "Try again", Message: "skiff could not read its setup secret; see the function's log."})
		return
	}
	given := r.PostForm.Get("key")
	if subtle.ConstantTimeCompare([]byte(given), []byte(key.Reveal())) != 1 {
		h.o.Logger.Warn("setup: wrong setup secret")
		h.page(w, http.StatusForbidden, pageData{Title: "Wrong setup secret",
			Message: "The setup secret does not match. docs/deploy.md says where to read it."})
		return
	}
	org := strings.TrimSpace(r.PostForm.Get("org"))
	personal := r.PostForm.Get("account") == "personal"
	if personal {
		org = ""
	} else if !ValidOwner(org) {
		h.page(w, http.StatusBadRequest, pageData{Title: "Organisation needed",
			Message: "Name the organisation that will own the App, or choose your personal account."})
		return
	}
	m, err := newManifest(h.o.WebhookURL, org)
	if err != nil {
		h.page(w, http.StatusBadRequest, pageData{Title: "Bad request", Message: err.Error()})
		return
	}
	if name := strings.TrimSpace(r.PostForm.Get("name")); name != "" {
		if len(name) > 34 {
			h.page(w, http.StatusBadRequest, pageData{Title: "Name too long", Message: "GitHub App names have at most 34 characters."})
			return
		}
		m.Name = name
	}
	m.RedirectURL = h.publicURL(r) + "/callback"
	m.SetupURL = h.publicURL(r) + "/installed"
	raw, err := json.Marshal(m)
	if err != nil {
		h.page(w, http.StatusInternalServerError, pageData{Title: "Error"})
		return
	}
	nonce, state := h.newState(key)
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: nonce, Path: h.prefix + "/", MaxAge: int(StateTTL / time.Second),
		HttpOnly: true, Secure: h.secure, SameSite: http.SameSiteLaxMode})
	target := h.o.GitHubURL + "/settings/apps/new"
	if org != "" {
		target = h.o.GitHubURL + "/organizations/" + url.PathEscape(org) + "/settings/apps/new"
	}
	target += "?" + url.Values{"state": {state}}.Encode()
	h.o.Logger.Info("setup: posting the App manifest to GitHub", "owner", org, "personal", personal, "github", h.o.GitHubURL)
	h.page(w, http.StatusOK, pageData{Title: "Creating the GitHub App", Redirect: true, Target: target, Manifest: string(raw)})
}

// newState returns a random nonce (the cookie) and the state GitHub carries
// back: nonce, expiry and their MAC under the setup secret, so that no
// storage is needed between the two halves, and a state outlives neither
// its hour nor the setup secret (replaced once the App is stored).
func (h *Handler) newState(key github.Secret) (nonce, state string) {
	b := make([]byte, 18)
	_, _ = rand.Read(b)
	nonce = base64.RawURLEncoding.EncodeToString(b)
	exp := strconv.FormatInt(h.o.Now().Add(StateTTL).Unix(), 10)
	return nonce, nonce + "." + exp + "." + mac(key, nonce, exp)
}

func mac(key github.Secret, nonce, exp string) string {
	m := hmac.New(sha256.New, []byte(key.Reveal()))
	fmt.Fprintf(m, "skiff-setup-state\x00%s\x00%s", nonce, exp)
	return hex.EncodeToString(m.Sum(nil))
}

// checkState reports why a state and cookie do not belong together ("" if
// they do).
func (h *Handler) checkState(key github.Secret, state string, cookie *http.Cookie) string {
	parts := strings.Split(state, ".")
	if len(parts) != 3 {
		return "malformed state"
	}
	nonce, exp, sum := parts[0], parts[1], parts[2]
	if !hmac.Equal([]byte(sum), []byte(mac(key, nonce, exp))) {
		return "state not issued by this setup"
	}
	n, err := strconv.ParseInt(exp, 10, 64)
	if err != nil || !h.o.Now().Before(time.Unix(n, 0)) {
		return "state expired"
	}
	if cookie == nil || subtle.ConstantTimeCompare([]byte(cookie.Value), []byte(nonce)) != 1 {
		return "state started in another browser"
	}
	return ""
}

func (h *Handler) callback(w http.ResponseWriter, r *http.Request) {
	if h.configured(w, r) {
		return
	}
	q := r.URL.Query()
	key, err := h.o.Store.Key(r.Context())
	if err != nil || len(key.Reveal()) < minKeyLen {
		h.o.Logger.Error("setup: reading the setup secret failed", "err", err)
		h.page(w, http.StatusServiceUnavailable, pageData{Title: "Try again", Message: "skiff could not read its setup secret; see the function's log."})
		return
	}
	cookie, _ := r.Cookie(cookieName)
	if why := h.checkState(key, q.Get("state"), cookie); why != "" {
		h.o.Logger.Warn("setup: callback refused", "reason", why)
		h.page(w, http.StatusBadRequest, pageData{Title: "Setup refused",
			Message: "GitHub's answer does not belong to a setup started here (" + why + "). Start again from the setup page."})
		return
	}
	app, err := github.ConvertManifestCode(r.Context(), h.o.GitHubAPIURL, q.Get("code"), h.o.HTTPClient)
	if err != nil {
		h.o.Logger.Error("setup: exchanging the manifest code failed", "err", err)
		h.page(w, http.StatusBadGateway, pageData{Title: "Setup failed",
			Message: "GitHub did not hand over the new App (the code may have expired or been used). Start again from the setup page."})
		return
	}
	if err := h.o.Store.Save(r.Context(), app); err != nil {
		h.o.Logger.Error("setup: storing the App failed", "app_id", app.ID, "err", err)
		h.page(w, http.StatusServiceUnavailable, pageData{Title: "Setup failed",
			Message: fmt.Sprintf("GitHub created App %s (%d), but skiff could not store its credentials. Delete the App in its settings on GitHub and start again.", app.Slug, app.ID)})
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Path: h.prefix + "/", MaxAge: -1, HttpOnly: true, Secure: h.secure, SameSite: http.SameSiteLaxMode})
	h.o.Logger.Info("setup: GitHub App stored", "app_id", app.ID, "slug", app.Slug, "owner", app.Owner)
	h.page(w, http.StatusOK, pageData{Title: "GitHub App created", AppID: app.ID, Slug: app.Slug, Install: app.InstallURL(),
		Message: "skiff stored the App's id, key and webhook secret. Install the App on the organisation; its jobs are then served."})
}

func (h *Handler) installed(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.URL.Query().Get("installation_id"), 10, 64)
	if err != nil || id <= 0 {
		h.page(w, http.StatusBadRequest, pageData{Title: "Bad request"})
		return
	}
	h.page(w, http.StatusOK, pageData{Title: "GitHub App installed", Installation: id,
		Message: "GitHub sends skiff the installation; jobs of allowed repositories are served from now on."})
	if h.o.OnInstalled != nil {
		h.o.OnInstalled(id)
	}
}

type pageData struct {
	Title, Message string
	// Form: the start form.
	Form              bool
	Action, GitHubURL string
	// Redirect: the manifest posted to GitHub.
	Redirect         bool
	Target, Manifest string
	// Done.
	AppID        int64
	Slug         string
	Install      string
	Installation int64
	Nonce        string
}

func (h *Handler) page(w http.ResponseWriter, status int, d pageData) {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	d.Nonce = base64.RawStdEncoding.EncodeToString(b)
	formAction := "'self'"
	if d.Redirect {
		formAction += " " + h.o.GitHubURL
	}
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; script-src 'nonce-"+d.Nonce+
		"'; form-action "+formAction+"; frame-ancestors 'none'; base-uri 'none'")
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_ = pageTmpl.Execute(w, d)
}

var pageTmpl = template.Must(template.New("setup").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Title}}</title>
<style>body{font-family:sans-serif;max-width:40em;margin:2em auto}label{display:block;margin:.6em 0}</style></head>
<body><h1 id="title">{{.Title}}</h1>
{{if .Message}}<p id="message">{{.Message}}</p>{{end}}
{{if .Form}}<form id="setup" method="post" action="{{.Action}}">
<label>Setup secret <input id="key" name="key" type="password" autocomplete="off" required></label>
<label><input type="radio" name="account" value="organization" checked> an organisation:
<input name="org" placeholder="acme"></label>
<label><input type="radio" name="account" value="personal"> my personal account</label>
<label>App name (optional) <input name="name" maxlength="34" placeholder="skiff-acme"></label>
<p>The App is created on {{.GitHubURL}}, with exactly the permissions skiff needs.</p>
<button type="submit">Create the GitHub App</button>
</form>
<script nonce="{{.Nonce}}">
(function () {
  var h = new URLSearchParams(location.hash.slice(1));
  var f = document.getElementById("setup");
  if (h.get("key")) { document.getElementById("key").value = h.get("key"); history.replaceState(null, "", location.pathname); }
  if (h.get("org")) { f.elements.org.value = h.get("org"); }
  if (h.get("account") === "personal") { f.elements.account.value = "personal"; }
  if (h.get("submit") === "1" && f.elements.key.value) { f.submit(); }
})();
</script>{{end}}
{{if .Redirect}}<form id="manifest" method="post" action="{{.Target}}">
<input type="hidden" name="manifest" value="{{.Manifest}}">
<button type="submit">Continue to GitHub</button>
</form>
<script nonce="{{.Nonce}}">document.getElementById("manifest").submit();</script>{{end}}
{{if .AppID}}<p>App <code id="slug">{{.Slug}}</code> (id <code id="app-id">{{.AppID}}</code>).</p>
<p><a id="install" href="{{.Install}}">Install the App</a></p>{{end}}
{{if .Installation}}<p>Installation <code id="installation">{{.Installation}}</code>.</p>{{end}}
</body></html>
`))
