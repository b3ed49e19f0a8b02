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
	fs := newFlags("setup", "--webhook-url URL [--org ORG] [flags]", stderr)
	dataDir := fs.String("data-dir", "skiff-data", "where the App's key and webhook secret are written (skiff local --data-dir)")
	listen := fs.String("listen", "127.0.0.1:8081", "the setup page's address (loopback)")
	hook := fs.String("webhook-url", "", "the URL GitHub sends webhooks to: skiff local's webhook, as reachable from GitHub (required)")
	org := fs.String("org", "", "the organisation that will own the App (empty: choose on the page)")
	webURL := fs.String("github-url", "https://github.com", "GitHub's web root (GHES: https://HOST)")
	apiURL := fs.String("github-api-url", github.DefaultBaseURL, "GitHub's REST root (GHES: https://HOST/api/v3)")
	if ok, code := parseFlags(fs, args); !ok {
		return code
	}
	if *hook == "" {
		fmt.Fprintln(stderr, "skiff setup: --webhook-url is required")
		return exitUsage
	}
	if *org != "" && !setup.ValidOwner(*org) {
		fmt.Fprintf(stderr, "skiff setup: --org %q is not a GitHub organisation name\n", *org)
		return exitUsage
	}
	host, _, err := net.SplitHostPort(*listen)
	if err != nil || (host != "127.0.0.1" && host != "localhost" && host != "::1") {
		fmt.Fprintf(stderr, "skiff setup: --listen %q: the setup page listens on loopback only\n", *listen)
		return exitUsage
	}
	store := setup.NewFileStore(*dataDir)
	if id, err := store.Configured(ctx); err != nil || id != 0 {
		if err != nil {
			fmt.Fprintln(stderr, "skiff setup:", err)
			return exitFailed
		}
		fmt.Fprintf(stderr, "skiff setup: %s already holds a GitHub App; delete %s there to set up again\n",
			*dataDir, setup.AppKeyFile)
		return exitFailed
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(stderr, "skiff setup:", err)
		return exitFailed
	}
	page := "http://" + ln.Addr().String() + "/setup"
	installed := make(chan int64, 1)
	h, err := setup.New(setup.Options{Store: store, PublicURL: page, WebhookURL: *hook, AllowHTTPWebhook: true,
		GitHubURL: *webURL, GitHubAPIURL: *apiURL, Logger: slog.New(slog.NewTextHandler(stderr, nil)),
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
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer srv.Close()
	key, _ := store.Key(ctx)
	frag := url.Values{"key": {key.Reveal()}, "submit": {"1"}}
	if *org != "" {
		frag.Set("org", *org)
	} else {
		frag.Del("submit")
	}
	// The secret rides in the fragment, which the browser never sends.
	fmt.Fprintf(stdout, "Open this link in your browser (it carries the one-time setup secret):\n\n  %s#%s\n\n", page, frag.Encode())
	fmt.Fprintln(stdout, "Create the App on GitHub, then install it; skiff setup ends once GitHub reports the installation (Ctrl-C stops).")
	select {
	case id := <-installed:
		fmt.Fprintf(stdout, "Installation %d recorded. The App is in %s (%s, %s, %s, mode 0600): run skiff local --data-dir %s.\n",
			id, *dataDir, setup.AppKeyFile, setup.WebhookSecretFile, setup.AppFile, *dataDir)
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
			fmt.Fprintf(stdout, "GitHub App %d is stored in %s; install it on the organisation.\n", id, filepath.Clean(*dataDir))
			return exitOK
		}
		fmt.Fprintln(stderr, "skiff setup: stopped before an App was created")
		return exitFailed
	}
}
