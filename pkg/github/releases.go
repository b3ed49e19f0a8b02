package github

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/skiffci/skiff/pkg/runnerversion"
)

// releasesPerPage is the one page of actions/runner releases read: GitHub
// publishes a runner release every few weeks, so 30 releases reach back
// more than a year, far past the 30-day window that needs the first
// release newer than a pool's.
const releasesPerPage = 30

// RunnerReleases lists the published actions/runner releases (GET
// /repos/actions/runner/releases, one page), with the SHA-256 of each
// package from the release notes' markers; drafts, pre-releases and tags
// that are not a version are left out. One call against the budget of
// installation inst — any installation of the Apps will do, the
// repository is public — or, with inst 0, of the known installation with
// the most budget left.
//
// GitHub Enterprise Server has no actions/runner releases of its own: this
// call asks the client's base URL, so on GHES it answers ErrNotFound.
func (c *Client) RunnerReleases(ctx context.Context, inst int64) ([]runnerversion.Release, error) {
	in, err := c.anyInstall(inst)
	if err != nil {
		return nil, fmt.Errorf("listing runner releases: %w", err)
	}
	ctx, rq := asInstallation(ctx, "list_runner_releases", in)
	var page json.RawMessage
	path := fmt.Sprintf("repos/actions/runner/releases?per_page=%d", releasesPerPage)
	if _, err := c.do(ctx, rq, http.MethodGet, path, nil, &page); err != nil {
		return nil, fmt.Errorf("listing runner releases: %w", err)
	}
	return runnerversion.ParseReleases(page)
}

// anyInstall is the installation a call that concerns no owner acts as:
// inst when given, else the known one with the most budget left.
func (c *Client) anyInstall(inst int64) (*install, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if inst != 0 {
		var app *appState
		if len(c.apps) == 1 {
			app = c.apps[0]
		}
		return c.installLocked(inst, app, ""), nil
	}
	known := make([]*install, 0, len(c.installs))
	for _, in := range c.installs {
		if in.app != nil {
			known = append(known, in)
		}
	}
	if len(known) == 0 {
		return nil, fmt.Errorf("no installation known yet: %w", ErrNotInstalled)
	}
	return c.pickLocked(known), nil
}
