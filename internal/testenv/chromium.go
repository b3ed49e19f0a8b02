package testenv

import (
	"bytes"
	"os"
	"os/exec"
	"testing"
)

// Chromium returns the path of a headless-capable Chromium (Debian's
// chromium, which make deps installs), or skips (fails with
// SKIFF_REQUIRE_EMULATORS=1).
func Chromium(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	Missing(t, "chromium", "apt-get install -y chromium (make deps)")
	return ""
}

// chromiumBudgetMs is the virtual time Chromium gives a page and the
// navigations it starts (form auto-submits, redirects) before dumping the
// DOM. Virtual time advances as soon as the page is idle, so a flow that
// finishes early ends early; 30 s of it covers a multi-page flow on a busy
// machine.
const chromiumBudgetMs = "30000"

// DumpDOM loads url in a fresh headless Chromium (its own profile
// directory, no sync, no background networking, no component updates),
// lets it run scripts and follow the navigations they start, and returns
// the final page's DOM and Chromium's stderr.
func DumpDOM(t testing.TB, browser, url string) (dom, stderr string) {
	t.Helper()
	home := t.TempDir()
	cmd := exec.CommandContext(t.Context(), browser, "--headless", "--no-sandbox", "--disable-gpu",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run",
		"--user-data-dir="+home, "--enable-logging=stderr", "--v=0",
		"--virtual-time-budget="+chromiumBudgetMs, "--dump-dom", url)
	cmd.Env = append(os.Environ(), "HOME="+home)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium: %v\n%s", err, errOut.String())
	}
	return out.String(), errOut.String()
}
