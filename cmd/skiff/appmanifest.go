package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/skiffci/skiff/pkg/setup"
)

// runAppManifest implements "skiff app-manifest --webhook-url URL [--org ORG]":
// the manifest the setup page posts (pkg/setup), for creating the App by hand.
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
	if *org != "" && !setup.ValidOwner(*org) {
		fmt.Fprintf(stderr, "skiff app-manifest: --org %q is not a GitHub organisation name\n", *org)
		return exitUsage
	}
	m, err := setup.NewManifest(*hook, *org)
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
