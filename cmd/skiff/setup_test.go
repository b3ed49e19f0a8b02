package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/setup"
)

// TestSetupLocalInChromium runs `skiff setup` against the GitHub simulator
// and drives the printed link in a real headless Chromium: the App is
// created for acme and installed, the command ends on GitHub's report of
// the installation, and the data directory holds the key and webhook secret
// with mode 0600, which `skiff local` then reads. A second run refuses.
func TestSetupLocalInChromium(t *testing.T) {
	browser := testenv.Chromium(t)
	sim := ghsim.New(ghsim.Options{ConfirmApps: true})
	t.Cleanup(sim.Close)
	sim.AddOrg("acme")
	dir := filepath.Join(t.TempDir(), "data")
	out, outW := io.Pipe()
	var stderr testenv.SyncBuffer
	done := make(chan int, 1)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		done <- setupLocal(ctx, []string{"--data-dir", dir, "--listen", "127.0.0.1:0", "--org", "acme",
			"--webhook-url", "http://127.0.0.1:1/webhook", "--github-url", sim.WebURL(), "--github-api-url", sim.URL()}, outW, &stderr)
		outW.Close()
	}()
	sc := bufio.NewScanner(out)
	link := ""
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); strings.HasPrefix(l, "http://127.0.0.1:") {
			link = l
			break
		}
	}
	if link == "" {
		t.Fatalf("no link printed; stderr:\n%s", stderr.String())
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	dom, errOut := testenv.DumpDOM(t, browser, link)
	m := regexp.MustCompile(`<a id="install" href="([^"]+)"`).FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("no install link:\n%s\n%s\n%s", dom, errOut, stderr.String())
	}
	if dom, _ = testenv.DumpDOM(t, browser, strings.ReplaceAll(m[1], "&amp;", "&")); !strings.Contains(dom, "GitHub App installed") {
		t.Errorf("installation page:\n%s", dom)
	}
	if code := <-done; code != exitOK {
		t.Fatalf("skiff setup exited %d:\n%s", code, stderr.String())
	}
	for _, name := range []string{setup.AppKeyFile, setup.WebhookSecretFile, setup.AppFile} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, want mode 0600", name, err)
		}
	}
	keys, hook, ok, err := setup.LoadLocalApp(dir)
	if err != nil || !ok || hook != sim.CreatedApps()[0].WebhookSecret {
		t.Fatalf("LoadLocalApp: %v %v", ok, err)
	}
	if apps, err := github.ParseAppKeys(nil, keys); err != nil || apps[0].ID != sim.CreatedApps()[0].ID {
		t.Errorf("key file: %v %v", apps, err)
	}
	key := regexp.MustCompile(`key=([0-9a-f]{64})`).FindStringSubmatch(link)
	if key == nil || strings.Contains(stderr.String(), key[1]) {
		t.Errorf("the setup secret reached the log (or the link has none): %s", stderr.String())
	}
	var again testenv.SyncBuffer
	if code := setupLocal(context.Background(), []string{"--data-dir", dir, "--webhook-url", "http://127.0.0.1:1/webhook"}, io.Discard, &again); code != exitFailed ||
		!strings.Contains(again.String(), "already holds a GitHub App") {
		t.Errorf("a second skiff setup: %d %s", code, again.String())
	}
}

// TestSetupFlagsCheck: a setup needs a webhook URL, a valid organisation
// name if any, and a loopback address for its page.
func TestSetupFlagsCheck(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, hook, org, listen string
		wantErr                 string // "" for none
	}{
		{"loopback", "http://h/webhook", "acme", "127.0.0.1:8081", ""},
		{"localhost, no org", "http://h/webhook", "", "localhost:0", ""},
		{"IPv6 loopback", "http://h/webhook", "", "[::1]:8081", ""},
		{"no webhook URL", "", "acme", "127.0.0.1:8081", "--webhook-url is required"},
		{"bad organisation", "http://h/webhook", "-acme", "127.0.0.1:8081", `--org "-acme" is not a GitHub organisation name`},
		{"every address", "http://h/webhook", "", "0.0.0.0:8081", `--listen "0.0.0.0:8081": the setup page listens on loopback only`},
		{"no port", "http://h/webhook", "", "127.0.0.1", `--listen "127.0.0.1": the setup page listens on loopback only`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := setupFlags{hook: tc.hook, org: tc.org, listen: tc.listen}.check()
			if got := fmt.Sprint(err); (tc.wantErr == "" && err != nil) || (tc.wantErr != "" && got != tc.wantErr) {
				t.Errorf("check() = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// TestSetupLink: the secret rides in the fragment; with an organisation
// the page submits itself.
func TestSetupLink(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, org, want string }{
		{"organisation", "acme", "http://127.0.0.1:1/setup#key=s3cr3t&org=acme&submit=1"},
		{"chosen on the page", "", "http://127.0.0.1:1/setup#key=s3cr3t"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := setupLink("http://127.0.0.1:1/setup", "s3cr3t", tc.org); got != tc.want {
				t.Errorf("setupLink = %q, want %q", got, tc.want)
			}
		})
	}
}
