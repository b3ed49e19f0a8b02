package setup

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// Manifest is a GitHub App manifest (docs.github.com, "Registering a GitHub
// App from a manifest"): what skiff's App needs, nothing more.
type Manifest struct {
	Name               string            `json:"name"`
	URL                string            `json:"url"`
	Description        string            `json:"description"`
	HookAttributes     HookAttributes    `json:"hook_attributes"`
	RedirectURL        string            `json:"redirect_url,omitempty"`
	SetupURL           string            `json:"setup_url,omitempty"`
	Public             bool              `json:"public"`
	DefaultPermissions map[string]string `json:"default_permissions"`
	DefaultEvents      []string          `json:"default_events"`
}

// HookAttributes is the manifest's webhook: the webhook function's URL.
type HookAttributes struct {
	URL    string `json:"url"`
	Active bool   `json:"active"`
}

// Permissions are the App's permissions (docs/github.md): org runners (JIT configs, registration tokens, runner
// groups), job and run reads, and the metadata every App has.
var Permissions = map[string]string{
	"organization_self_hosted_runners": "write",
	"actions":                          "read",
	"metadata":                         "read",
}

// Events: workflow_job drives scale-up and the job lifecycle; workflow_run
// carries the trigger event the metrics record needs. GitHub delivers the
// installation events (created, deleted, suspend, unsuspend), which the
// webhook records, to every App without a subscription.
var Events = []string{"workflow_job", "workflow_run"}

var ownerRe = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})$`)

// ValidOwner reports whether s is a GitHub organisation or user name.
func ValidOwner(s string) bool { return ownerRe.MatchString(s) }

// NewManifest returns the manifest for webhookURL (https), named after org
// when given. redirectURL and setupURL are where GitHub sends the browser
// after creating and after installing the App (empty: none).
func NewManifest(webhookURL, org string) (Manifest, error) {
	u, err := url.Parse(webhookURL)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil || u.Fragment != "" {
		return Manifest{}, fmt.Errorf("webhook URL %q: want the https URL of the webhook function (the stack's WebhookUrl output)", webhookURL)
	}
	return newManifest(webhookURL, org)
}

// newManifest is NewManifest without the https requirement (local mode's
// webhook listens on plain HTTP).
func newManifest(webhookURL, org string) (Manifest, error) {
	if org != "" && !ValidOwner(org) {
		return Manifest{}, fmt.Errorf("%q is not a GitHub organisation name", org)
	}
	name := "skiff"
	if org != "" {
		name = "skiff-" + strings.ToLower(org)
	}
	perms := make(map[string]string, len(Permissions))
	for k, v := range Permissions {
		perms[k] = v
	}
	return Manifest{
		Name:               name,
		URL:                "https://github.com/skiffci/skiff",
		Description:        "Elastic, just-in-time self-hosted runners on AWS (skiff)",
		HookAttributes:     HookAttributes{URL: webhookURL, Active: true},
		Public:             false,
		DefaultPermissions: perms,
		DefaultEvents:      append([]string(nil), Events...),
	}, nil
}
