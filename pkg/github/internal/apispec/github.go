package apispec

import (
	"path/filepath"
	"sync"
	"testing"

	"github.com/skiffci/skiff/internal/testenv"
)

var (
	githubOnce sync.Once
	github     *Spec
	githubErr  error
)

// GitHub is GitHub's description (generated/api.github.com.json of the npm
// package @octokit/openapi), read once per test binary: it is 13 MB. Where `npm ci` has not run, t skips or fails as testenv decides.
func GitHub(t testing.TB) *Spec {
	t.Helper()
	dir := testenv.NodeModule(t, "@octokit/openapi")
	githubOnce.Do(func() { github, githubErr = Load(filepath.Join(dir, "generated", "api.github.com.json")) })
	if githubErr != nil {
		t.Fatalf("loading GitHub's API description: %v", githubErr)
	}
	return github
}
