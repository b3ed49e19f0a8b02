package setup_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/setup"
)

// TestFileStoreKeyWhileSaving: skiff setup serves its page's requests
// concurrently, so one request reads the setup secret (Key) while another
// saves the App, which forgets the secret (Save). The secret is guarded:
// under the race detector (make race) an unguarded one fails here, as it
// once did in cmd/skiff's browser test. Without it the test still checks
// that Save forgets the secret and that a reader sees the old one or the
// new one, never another.
func TestFileStoreKeyWhileSaving(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup.NewFileStore(filepath.Join(t.TempDir(), "data"))
	before, err := s.Key(ctx)
	if err != nil || before.Reveal() == "" {
		t.Fatalf("Key: %q, %v", before.Reveal(), err)
	}
	app := &github.ManifestApp{ID: 7, Slug: "skiff", Owner: "acme", HTMLURL: "https://github.com/apps/skiff",
		PEM: github.Secret(testenv.KeyPEM()), WebhookSecret: "hook"}
	var wg sync.WaitGroup
	seen := make([]github.Secret, 200)
	wg.Go(func() {
		if err := s.Save(ctx, app); err != nil {
			t.Errorf("Save: %v", err)
		}
	})
	for i := range seen {
		wg.Go(func() { seen[i], _ = s.Key(ctx) })
	}
	wg.Wait()
	after, _ := s.Key(ctx)
	if after == before || after.Reveal() == "" {
		t.Errorf("after Save the setup secret is %q, want a fresh one (the old one forgotten)", after.Reveal())
	}
	for i, k := range seen {
		if k != before && k != after {
			t.Errorf("read %d saw %q: neither the secret before Save nor after", i, k.Reveal())
		}
	}
	if id, err := s.Configured(ctx); err != nil || id != 7 {
		t.Errorf("Configured after Save: %d, %v", id, err)
	}
}
