package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"strings"
)

// AppManifest is a GitHub App manifest (docs.github.com, "Registering a
// GitHub App from a manifest"): what skiff's App needs, nothing more.
type AppManifest struct {
	Name               string            `json:"name"`
	URL                string            `json:"url"`
	Description        string            `json:"description"`
	HookAttributes     HookAttributes    `json:"hook_attributes"`
	Public             bool              `json:"public"`
	DefaultPermissions map[string]string `json:"default_permissions"`
	DefaultEvents      []string          `json:"default_events"`
}

// HookAttributes is the manifest's webhook: the webhook function's URL.
type HookAttributes struct {
	URL    string `json:"url"`
	Active bool   `json:"active"`
}

// appPermissions are the App's permissions (README "GitHub App",
// docs/github.md): org runners (JIT configs, registration tokens, runner
// groups), job and run reads, and the metadata every App has.
var appPermissions = map[string]string{
	"organization_self_hosted_runners": "write",
	"actions":                          "read",
	"metadata":                         "read",
}

// appEvents: workflow_job drives scale-up and the job lifecycle;
// workflow_run carries the trigger event the metrics record needs.
var appEvents = []string{"workflow_job", "workflow_run"}

var orgRe = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})$`)

// newAppManifest returns the manifest for webhookURL, named after org when given.
func newAppManifest(webhookURL, org string) (AppManifest, error) {
	u, err := url.Parse(webhookURL)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil || u.Fragment != "" {
		return AppManifest{}, fmt.Errorf("--webhook-url %q: want the https URL of the webhook function (the stack's WebhookUrl output)", webhookURL)
	}
	if org != "" && !orgRe.MatchString(org) {
		return AppManifest{}, fmt.Errorf("--org %q is not a GitHub organisation name", org)
	}
	name := "skiff"
	if org != "" {
		name = "skiff-" + strings.ToLower(org)
	}
	perms := make(map[string]string, len(appPermissions))
	for k, v := range appPermissions {
		perms[k] = v
	}
	return AppManifest{
		Name:               name,
		URL:                "https://github.com/skiffci/skiff",
		Description:        "Elastic, just-in-time self-hosted runners on AWS (skiff)",
		HookAttributes:     HookAttributes{URL: webhookURL, Active: true},
		Public:             false,
		DefaultPermissions: perms,
		DefaultEvents:      append([]string(nil), appEvents...),
	}, nil
}

// runAppManifest implements "skiff app-manifest --webhook-url URL [--org ORG]".
func runAppManifest(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("app-manifest", "--webhook-url URL [--org ORG]", stderr)
	hook := fs.String("webhook-url", "", "the webhook function's URL (the stack's WebhookUrl output); required")
	org := fs.String("org", "", "the organisation that will own the App (names it skiff-ORG)")
	if ok, code := parseFlags(fs, args); !ok {
		return code
	}
	if *hook == "" {
		fmt.Fprintln(stderr, "skiff app-manifest: --webhook-url is required")
		fs.Usage()
		return exitUsage
	}
	m, err := newAppManifest(*hook, *org)
	if err != nil {
		fmt.Fprintln(stderr, "skiff app-manifest:", err)
		return exitUsage
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		fmt.Fprintln(stderr, "skiff app-manifest:", err)
		return exitFailed
	}
	fmt.Fprintf(stdout, "%s\n", b)
	return exitOK
}
