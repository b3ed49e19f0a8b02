package ghsim

import (
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Suspend suspends an installation (as an organization owner can, in its
// settings): its tokens stop working, new ones are refused, and an App with
// InstallationEvents gets the installation suspend webhook.
func (s *Server) Suspend(installationID int64) error {
	return s.setSuspended(installationID, true)
}

// Unsuspend lifts a suspension; the App gets the installation unsuspend webhook.
func (s *Server) Unsuspend(installationID int64) error {
	return s.setSuspended(installationID, false)
}

// setSuspended suspends an installation (dropping its tokens) or lifts its
// suspension, and sends its App the installation webhook of that action.
func (s *Server) setSuspended(installationID int64, suspended bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	in := s.installs[installationID]
	if in == nil {
		return fmt.Errorf("ghsim: no installation %d", installationID)
	}
	if !suspended {
		in.suspendedAt, in.suspendedBy = time.Time{}, nil
		s.installationHookLocked(in, "unsuspend")
		return nil
	}
	in.suspendedAt, in.suspendedBy = s.now(), in.account
	s.revokeTokensLocked(installationID)
	s.installationHookLocked(in, "suspend")
	return nil
}

// Installations returns the ids of an App's installations, oldest first.
func (s *Server) Installations(appID int64) []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []int64
	for _, in := range s.installs {
		if in.app.ID == appID {
			out = append(out, in.id)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// installationHookLocked queues an installation webhook (created, deleted,
// suspend, unsuspend) for the installation's App, when the App has a
// webhook and InstallationEvents. The sender is the account's owner as the
// simulator knows it: the signed-in browser user for a personal account,
// the organization's login otherwise.
func (s *Server) installationHookLocked(in *simInstall, action string) {
	if !in.app.InstallationEvents || in.app.WebhookURL == "" {
		return
	}
	sender := in.account
	if in.account.typ == "Organization" {
		sender = s.accountLocked(s.browserUserLocked(), "User")
	}
	p := obj{"action": action, "installation": s.installationJSON(in), "sender": s.userJSON(sender)}
	if action == "created" {
		p["repositories"] = s.installReposLocked(in)
		p["requester"] = nil
	} else {
		p["requester"] = nil
	}
	if in.account.typ == "Organization" {
		p["organization"] = s.orgJSON(in.account)
	}
	body, _ := json.Marshal(p)
	s.enqueueLocked(&simDelivery{id: s.nextID(), guid: s.guidLocked(), app: in.app, event: "installation",
		action: action, instID: in.id, payload: body})
}

// installReposLocked lists the account's repositories as the installation
// created webhook carries them (an installation covers all of them).
func (s *Server) installReposLocked(in *simInstall) []obj {
	out := []obj{}
	for _, r := range s.repos {
		if r.owner == in.account {
			out = append(out, obj{"id": r.id, "node_id": nodeID("Repository", r.id), "name": r.name,
				"full_name": r.fullName(), "private": r.visibility != VisibilityPublic})
		}
	}
	return out
}

func (s *Server) browserUserLocked() string {
	if s.opts.BrowserUser != "" {
		return s.opts.BrowserUser
	}
	return "octocat"
}

// installPage is GitHub's https://github.com/apps/{slug}/installations/new:
// the operator picks the account and clicks Install.
func (s *Server) installPage(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	var app *simApp
	for _, a := range s.apps {
		if a.Slug == r.PathValue("slug") {
			app = a
		}
	}
	auto := s.opts.ConfirmApps
	target, slug := "", ""
	if app != nil {
		slug = app.Slug
		if app.owner != nil {
			target = app.owner.login
		}
	}
	s.mu.Unlock()
	if app == nil {
		http.Error(w, "Not Found", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = installTmpl.Execute(w, struct {
		Slug, Target string
		Auto         bool
	}{slug, target, auto})
}

var installTmpl = template.Must(template.New("install").Parse(`<!doctype html>
<html><head><title>Install {{.Slug}}</title></head><body>
<h1>Install {{.Slug}}</h1>
<form id="install" method="post" action="/apps/{{.Slug}}/installations">
<label>Account <input name="account" value="{{.Target}}"></label>
<button type="submit">Install</button>
</form>
{{if .Auto}}<script>document.getElementById("install").submit()</script>{{end}}
</body></html>
`))

// install is the operator's click on Install: the App is installed on the
// account (all repositories), and the browser goes to the App's setup_url
// with installation_id and setup_action=install, when it has one.
func (s *Server) install(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad form", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	var app *simApp
	for _, a := range s.apps {
		if a.Slug == r.PathValue("slug") {
			app = a
		}
	}
	login := strings.TrimSpace(r.PostForm.Get("account"))
	acct := s.accounts[strings.ToLower(login)]
	if app == nil || acct == nil {
		s.mu.Unlock()
		http.Error(w, "Not Found", http.StatusNotFound)
		return
	}
	in := s.installLocked(app, acct)
	setup, slug, login, id := app.manifest.SetupURL, app.Slug, acct.login, in.id
	s.mu.Unlock()
	s.pump()
	if u, err := url.Parse(setup); setup != "" && err == nil {
		q := u.Query()
		q.Set("installation_id", strconv.FormatInt(id, 10))
		q.Set("setup_action", "install")
		u.RawQuery = q.Encode()
		http.Redirect(w, r, u.String(), http.StatusFound)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	fmt.Fprintf(w, "<!doctype html><p id=\"installed\">Installed %s on %s (installation %d).</p>\n",
		template.HTMLEscapeString(slug), template.HTMLEscapeString(login), id)
}
