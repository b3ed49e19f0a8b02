package github

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	gh "github.com/google/go-github/v62/github"
)

// ManifestApp is what GitHub returns for a completed App-manifest flow
// (POST /app-manifests/{code}/conversions): the new App and its credentials.
type ManifestApp struct {
	ID            int64
	Slug          string
	Name          string
	HTMLURL       string // https://github.com/apps/<slug>
	Owner         string // the organization or user owning the App
	OwnerType     string // "Organization" or "User"
	PEM           Secret // the App's private key
	WebhookSecret Secret // empty when the manifest had no webhook
	ClientID      string
	ClientSecret  Secret
}

// InstallURL is the page where the App is installed on an account.
func (a ManifestApp) InstallURL() string {
	return strings.TrimRight(a.HTMLURL, "/") + "/installations/new"
}

// manifestCodeRe bounds a manifest code before it is put in a path: GitHub's
// are 20 hexadecimal characters; anything else (a slash, dots) is refused.
var manifestCodeRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,100}$`)

// ErrManifestCode is returned for a code GitHub does not know (expired,
// used or made up: its 404) or that is malformed.
var ErrManifestCode = errors.New("unknown or expired App-manifest code")

// ConvertManifestCode exchanges the code GitHub sent back to the manifest's
// redirect_url for the App's id, key and webhook secret (one hour, once).
// The call needs no credential. baseURL is the API root (DefaultBaseURL, or
// https://HOST/api/v3); hc makes the request (nil: 30 s timeout).
func ConvertManifestCode(ctx context.Context, baseURL, code string, hc *http.Client) (*ManifestApp, error) {
	if !manifestCodeRe.MatchString(code) {
		return nil, fmt.Errorf("converting App manifest: %w", ErrManifestCode)
	}
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	u, err := url.Parse(strings.TrimRight(baseURL, "/") + "/")
	if err != nil {
		return nil, fmt.Errorf("converting App manifest: API URL: %w", err)
	}
	client := gh.NewClient(hc)
	client.BaseURL = u
	cfg, resp, err := client.Apps.CompleteAppManifest(ctx, code)
	if err != nil {
		if resp != nil && resp.StatusCode == http.StatusNotFound {
			return nil, fmt.Errorf("converting App manifest: %w", ErrManifestCode)
		}
		if resp != nil {
			return nil, fmt.Errorf("converting App manifest: GitHub answered %d", resp.StatusCode)
		}
		// A transport error names the URL, which holds the code: keep its cause.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("converting App manifest: %w", err)
	}
	if cfg.GetID() <= 0 || cfg.GetPEM() == "" {
		return nil, errors.New("converting App manifest: the answer has no App id or key")
	}
	if _, err := ParsePrivateKey([]byte(cfg.GetPEM())); err != nil {
		return nil, fmt.Errorf("converting App manifest: %w", err)
	}
	return &ManifestApp{
		ID: cfg.GetID(), Slug: cfg.GetSlug(), Name: cfg.GetName(), HTMLURL: cfg.GetHTMLURL(),
		Owner: cfg.GetOwner().GetLogin(), OwnerType: cfg.GetOwner().GetType(),
		PEM: Secret(cfg.GetPEM()), WebhookSecret: Secret(cfg.GetWebhookSecret()),
		ClientID: cfg.GetClientID(), ClientSecret: Secret(cfg.GetClientSecret()),
	}, nil
}
