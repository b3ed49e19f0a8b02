package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/skiffci/skiff/internal/httpserve"
	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/setup"
)

// runSetup is `skiff setup`: the setup page for local mode, on 127.0.0.1.
// The browser runs GitHub's App-manifest flow; the App's key, webhook
// secret and description land in the data directory (0600), where
// `skiff local` finds them.
func runSetup(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return setupLocal(ctx, args, stdout, stderr)
}

func setupLocal(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f, ok, code := parseSetupFlags(args, stderr)
	if !ok {
		return code
	}
	if err := f.check(); err != nil {
		fmt.Fprintln(stderr, "skiff setup:", err)
		return exitUsage
	}
	store := setup.NewFileStore(f.dataDir)
	if id, err := store.Configured(ctx); err != nil || id != 0 {
		if err != nil {
			fmt.Fprintln(stderr, "skiff setup:", err)
			return exitFailed
		}
		fmt.Fprintf(stderr, "skiff setup: %s already holds a GitHub App; delete %s there to set up again\n",
			f.dataDir, setup.AppKeyFile)
		return exitFailed
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		fmt.Fprintln(stderr, "skiff setup:", err)
		return exitFailed
	}
	page := "http://" + ln.Addr().String() + "/setup"
	installed := make(chan int64, 1)
	h, err := setup.New(setup.Options{Store: store, PublicURL: page, WebhookURL: f.hook, AllowHTTPWebhook: true,
		GitHubURL: f.webURL, GitHubAPIURL: f.apiURL, Logger: slog.New(slog.NewTextHandler(stderr, nil)),
		OnInstalled: func(id int64) {
			select {
			case installed <- id:
			default:
			}
		}})
	if err != nil {
		ln.Close()
		fmt.Fprintln(stderr, "skiff setup:", err)
		return exitUsage
	}
	// The page's forms are small (setup cuts them at 16 KiB); the server's
	// timeouts and body bound are skiff's usual ones (internal/httpserve).
	srv := httpserve.New(h, httpserve.Options{})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer srv.Close()
	key, _ := store.Key(ctx)
	// The secret rides in the fragment, which the browser never sends.
	fmt.Fprintf(stdout, "Open this link in your browser (it carries the one-time setup secret):\n\n  %s\n\n", setupLink(page, key.Reveal(), f.org))
	fmt.Fprintln(stdout, "Create the App on GitHub, then install it; skiff setup ends once GitHub reports the installation (Ctrl-C stops).")
	return f.awaitInstallation(ctx, store, srv, installed, served, stdout, stderr)
}

// setupFlags are `skiff setup`'s flags.
type setupFlags struct {
	dataDir, listen, hook, org, webURL, apiURL string
}

// parseSetupFlags reads `skiff setup`'s flags; when ok is false the
// command ends with code.
func parseSetupFlags(args []string, stderr io.Writer) (f setupFlags, ok bool, code int) {
	fs := newFlags("setup", "--webhook-url URL [--org ORG] [flags]", stderr)
	fs.StringVar(&f.dataDir, "data-dir", "skiff-data", "where the App's key and webhook secret are written (skiff local --data-dir)")
	fs.StringVar(&f.listen, "listen", "127.0.0.1:8081", "the setup page's address (loopback)")
	fs.StringVar(&f.hook, "webhook-url", "", "the URL GitHub sends webhooks to: skiff local's webhook, as reachable from GitHub (required)")
	fs.StringVar(&f.org, "org", "", "the organisation that will own the App (empty: choose on the page)")
	fs.StringVar(&f.webURL, "github-url", "https://github.com", "GitHub's web root (GHES: https://HOST)")
	fs.StringVar(&f.apiURL, "github-api-url", github.DefaultBaseURL, "GitHub's REST root (GHES: https://HOST/api/v3)")
	ok, code = parseFlags(fs, args)
	return f, ok, code
}

// check refuses a setup without a webhook URL, with an organisation name
// GitHub would not take, or with a page listening beyond loopback.
func (f setupFlags) check() error {
	if f.hook == "" {
		return errors.New("--webhook-url is required")
	}
	if f.org != "" && !setup.ValidOwner(f.org) {
		return fmt.Errorf("--org %q is not a GitHub organisation name", f.org)
	}
	host, _, err := net.SplitHostPort(f.listen)
	if err != nil || (host != "127.0.0.1" && host != "localhost" && host != "::1") {
		return fmt.Errorf("--listen %q: the setup page listens on loopback only", f.listen)
	}
	return nil
}

// setupLink is the link to the setup page with the one-time secret in its
// fragment; with an organisation the page submits itself.
func setupLink(page, secret, org string) string {
	frag := url.Values{"key": {secret}, "submit": {"1"}}
	if org != "" {
		frag.Set("org", org)
	} else {
		frag.Del("submit")
	}
	return page + "#" + frag.Encode()
}

// awaitInstallation waits for GitHub's report of the installation, the
// server's end or a signal, and returns the exit status.
func (f setupFlags) awaitInstallation(ctx context.Context, store *setup.FileStore, srv *http.Server, installed <-chan int64,
	served <-chan error, stdout, stderr io.Writer) int {
	select {
	case id := <-installed:
		fmt.Fprintf(stdout, "Installation %d recorded. The App is in %s (%s, %s, %s, mode 0600): run skiff local --data-dir %s.\n",
			id, f.dataDir, setup.AppKeyFile, setup.WebhookSecretFile, setup.AppFile, f.dataDir)
		// Let the browser's page finish loading before the server closes.
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
		return exitOK
	case err := <-served:
		if !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintln(stderr, "skiff setup:", err)
		}
		return exitFailed
	case <-ctx.Done():
		if id, _ := store.Configured(context.Background()); id != 0 {
			fmt.Fprintf(stdout, "GitHub App %d is stored in %s; install it on the organisation.\n", id, filepath.Clean(f.dataDir))
			return exitOK
		}
		fmt.Fprintln(stderr, "skiff setup: stopped before an App was created")
		return exitFailed
	}
}
