package setup

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/skiffci/skiff/internal/privatefile"
	"github.com/skiffci/skiff/pkg/github"
)

// ConfiguredApp is the first App id a key secret's value holds, 0 for none
// (-1: a lone PEM, the id in the configuration).
func ConfiguredApp(v string) (int64, error) {
	trimmed := strings.TrimSpace(v)
	if strings.Contains(trimmed, "-----BEGIN") && !strings.HasPrefix(trimmed, "{") {
		return -1, nil // a lone PEM put there by hand: set up, id in the configuration
	}
	apps, err := github.ParseAppKeys(nil, v)
	switch {
	case errors.Is(err, github.ErrNoApp):
		return 0, nil
	case err != nil:
		return 0, err
	}
	return apps[0].ID, nil
}

// NewKey is a fresh setup secret: 32 random bytes, hex.
func NewKey() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Local mode's files in the data directory, each 0600.
const (
	// AppKeyFile holds {"<app id>": "<pem>"}, the App key secret's shape.
	AppKeyFile = "github-app-key.json"
	// WebhookSecretFile holds the App's webhook secret.
	WebhookSecretFile = "github-webhook-secret"
	// AppFile describes the App (id, slug, pages): no secret.
	AppFile = "github-app.json"
)

// AppInfo is what AppFile records.
type AppInfo struct {
	ID         int64  `json:"id"`
	Slug       string `json:"slug"`
	Owner      string `json:"owner"`
	HTMLURL    string `json:"html_url"`
	InstallURL string `json:"install_url"`
}

// FileStore keeps the App in local mode's data directory; its setup secret
// lives in memory, made by NewFileStore, for one run of `skiff setup`. It is
// safe for concurrent use: the page's requests are served concurrently, and
// one may read the secret while another saves the App and forgets it.
type FileStore struct {
	Dir string
	mu  sync.Mutex
	key github.Secret
}

// NewFileStore returns a store over dir with a fresh setup secret.
func NewFileStore(dir string) *FileStore {
	return &FileStore{Dir: dir, key: github.Secret(NewKey())}
}

// Key implements Store.
func (f *FileStore) Key(context.Context) (github.Secret, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.key, nil
}

// Configured implements Store: the data directory holds an App key.
func (f *FileStore) Configured(context.Context) (int64, error) {
	b, err := os.ReadFile(filepath.Join(f.Dir, AppKeyFile))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", AppKeyFile, err)
	}
	return ConfiguredApp(string(b))
}

// Save implements Store: the webhook secret, the App's description, then
// the key (which marks it set up), each written to a temporary file of
// mode 0600 and renamed into place; then the setup secret is forgotten.
func (f *FileStore) Save(_ context.Context, app *github.ManifestApp) error {
	if err := os.MkdirAll(f.Dir, 0o700); err != nil {
		return fmt.Errorf("creating the data directory: %w", err)
	}
	if err := CheckPrivate(f.Dir); err != nil {
		return err
	}
	info, _ := json.MarshalIndent(AppInfo{ID: app.ID, Slug: app.Slug, Owner: app.Owner, HTMLURL: app.HTMLURL, InstallURL: app.InstallURL()}, "", "  ")
	keys, err := json.Marshal(map[string]string{strconv.FormatInt(app.ID, 10): app.PEM.Reveal()})
	if err != nil {
		return err
	}
	for _, w := range []struct {
		name string
		data []byte
	}{{WebhookSecretFile, []byte(app.WebhookSecret.Reveal())}, {AppFile, append(info, '\n')}, {AppKeyFile, keys}} {
		if err := privatefile.Write(filepath.Join(f.Dir, w.name), w.data); err != nil {
			return fmt.Errorf("writing %s: %w", w.name, err)
		}
	}
	f.mu.Lock()
	f.key = github.Secret(NewKey())
	f.mu.Unlock()
	return nil
}

// CheckPrivate refuses a data directory, or a secret file in it, that
// other users can read, write or enter (any group or other permission):
// the directory holds skiff's queue and records and, after skiff setup,
// the GitHub App's private key. The error names the path and the chmod
// that fixes it.
func CheckPrivate(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("checking the permissions of %s: %w", path, err)
	}
	want := os.FileMode(0o600)
	if fi.IsDir() {
		want = 0o700
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("%s is open to other users (mode %04o): it holds skiff's records and the GitHub App's key; make it private with: chmod %o %s",
			path, perm, want, path)
	}
	return nil
}

// LoadLocalApp reads what `skiff setup` left in dir: the App key secret's
// value ({"<app id>": "<pem>"}) and the webhook secret. ok is false when
// dir holds no App; a key file others can read is an error (CheckPrivate).
func LoadLocalApp(dir string) (keys, webhookSecret string, ok bool, err error) {
	k, err := os.ReadFile(filepath.Join(dir, AppKeyFile))
	if errors.Is(err, os.ErrNotExist) {
		return "", "", false, nil
	}
	if err != nil {
		return "", "", false, fmt.Errorf("reading %s: %w", AppKeyFile, err)
	}
	for _, f := range []string{dir, filepath.Join(dir, AppKeyFile), filepath.Join(dir, WebhookSecretFile)} {
		if err := CheckPrivate(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", "", false, err
		}
	}
	s, err := os.ReadFile(filepath.Join(dir, WebhookSecretFile))
	if err != nil {
		return "", "", false, fmt.Errorf("reading %s: %w", WebhookSecretFile, err)
	}
	return string(k), string(s), true, nil
}
