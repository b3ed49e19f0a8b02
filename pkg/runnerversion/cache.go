package runnerversion

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Source fetches the published runner releases, newest first or in any
// order (github.Client.RunnerReleases through an adapter). Its error
// contract: any error means "no fresh list now"; the cache keeps serving
// the list it has.
type Source interface {
	RunnerReleases(ctx context.Context) ([]Release, error)
}

// SourceFunc adapts a function to Source.
type SourceFunc func(ctx context.Context) ([]Release, error)

// RunnerReleases calls f.
func (f SourceFunc) RunnerReleases(ctx context.Context) ([]Release, error) { return f(ctx) }

// Shared is where the processes of a deployment share the release list
// (the store), so that the check costs one call a day for the deployment,
// not per process. Load fails (any error) when it holds none.
type Shared interface {
	Load(ctx context.Context) (rs []Release, fetchedAt time.Time, err error)
	Save(ctx context.Context, rs []Release, fetchedAt time.Time) error
}

// ErrNoReleases: the release list was never fetched successfully.
var ErrNoReleases = errors.New("no runner releases known")

// ErrNoChecksum: the newest release publishes no checksum for the platform.
var ErrNoChecksum = errors.New("the release publishes no SHA-256 for the platform")

// Cache holds the release list and fetches it again once it is Refresh
// old: one call a day per process, whatever the traffic. A failed fetch
// keeps the old list (and is tried again on the next use after
// RetryAfter), so GitHub being down never stops launches that a day-old
// list can serve. It is safe for concurrent use; one fetch runs at a time.
type Cache struct {
	src    Source
	shared Shared // nil: the process's own copy only
	now    func() time.Time
	// RetryAfter is how long a failed fetch waits before the next try
	// (default 10 minutes: a GitHub outage costs a handful of calls).
	RetryAfter time.Duration

	mu        sync.Mutex
	releases  []Release
	fetchedAt time.Time
	triedAt   time.Time
	fetches   int
}

// NewCache returns a cache over src on the clock now (time.Now when nil).
func NewCache(src Source, now func() time.Time) *Cache {
	if now == nil {
		now = time.Now
	}
	return &Cache{src: src, now: now, RetryAfter: 10 * time.Minute}
}

// WithShared makes the cache read the list from sh before fetching it, and
// write what it fetches there.
func (c *Cache) WithShared(sh Shared) *Cache {
	c.shared = sh
	return c
}

// Releases returns the cached list, fetching it first when it is missing
// or Refresh old (from the shared copy when that is fresh, else from the
// source). It fails only when no list was ever fetched.
func (c *Cache) Releases(ctx context.Context) ([]Release, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	stale := c.releases == nil || now.Sub(c.fetchedAt) >= Refresh
	if stale && c.shared != nil {
		if rs, at, err := c.shared.Load(ctx); err == nil && len(rs) > 0 && (c.releases == nil || at.After(c.fetchedAt)) {
			c.releases, c.fetchedAt = rs, at
			stale = now.Sub(at) >= Refresh
		}
	}
	var err error
	if stale && (c.triedAt.IsZero() || now.Sub(c.triedAt) >= c.RetryAfter) {
		c.triedAt = now
		c.fetches++
		var rs []Release
		if rs, err = c.src.RunnerReleases(ctx); err == nil && len(rs) > 0 {
			c.releases, c.fetchedAt = rs, now
			if c.shared != nil {
				// A failed write costs the next process one more call.
				_ = c.shared.Save(ctx, rs, now)
			}
		}
	}
	switch {
	case c.releases != nil:
		return c.releases, nil
	case err != nil:
		return nil, fmt.Errorf("fetching runner releases: %w", err)
	}
	return nil, ErrNoReleases
}

// Fetches counts the calls made to the source (the GitHub calls the check costs).
func (c *Cache) Fetches() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fetches
}

// FetchedAt is when the list in the cache was fetched (zero before the first).
func (c *Cache) FetchedAt() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fetchedAt
}

// Download is a runner package to download at boot: its version and the
// SHA-256 the boot script checks it against.
type Download struct {
	Version string
	SHA256  string
}

// Resolve turns a pool's runnerVersion into the download its runners get:
// Latest resolves to the newest release and its published checksum for
// arch ("x64", "arm64") from the cached list; a pinned version comes back
// with the pinned checksum as is.
func (c *Cache) Resolve(ctx context.Context, want, pinnedSHA, arch string) (Download, error) {
	if want != Latest {
		return Download{Version: want, SHA256: pinnedSHA}, nil
	}
	rs, err := c.Releases(ctx)
	if err != nil {
		return Download{}, fmt.Errorf("resolving the latest runner: %w", err)
	}
	newest, _ := Newest(rs)
	sum := newest.SHA256[Platform(arch)]
	if sum == "" {
		return Download{}, fmt.Errorf("resolving the latest runner %s for %s: %w", newest.Version, Platform(arch), ErrNoChecksum)
	}
	return Download{Version: newest.Version.String(), SHA256: sum}, nil
}
