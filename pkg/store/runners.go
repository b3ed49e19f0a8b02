package store

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/skiffci/skiff/pkg/runnerversion"
)

// ReleaseList is the actions/runner release list as the daily check last
// fetched it: shared by every process of a deployment so that the check
// costs one GitHub call a day, and read by `skiff status`.
type ReleaseList struct {
	Releases  []runnerversion.Release
	FetchedAt time.Time
}

// RunnerHold stops a pool's launches: a runner of the pool ended because
// GitHub refused its version (exit code 7, or a refused registration).
// Scale-up launches nothing for the pool while the hold stands and the pool
// would launch the same Version again; a pool whose version changed (a new
// release for runnerVersion: latest, a new pin or image) lifts it.
type RunnerHold struct {
	Pool string
	// Version is the refused runner version ("unknown" when the runner did
	// not say); Launched is the runner version the pool handed its boots
	// when it was held (its runnerVersion as resolved then; "" unknown): a
	// hold lifts when that changes, not when Version differs from it (an
	// image's own stale runner).
	Version, Launched string
	// Reason is a short code (runner_outdated), Detail the fix in words.
	Reason, Detail string
	// At is when the first refused runner was seen; Until is when one
	// runner is let through again to try (a refusal GitHub lifted, an image
	// rebuilt under the same name).
	At, Until time.Time
}

// RunnerState keeps the release list and the pools' holds. Every method is
// safe for concurrent use.
type RunnerState interface {
	// RunnerReleases returns the stored release list, or ErrNotFound.
	RunnerReleases(ctx context.Context) (ReleaseList, error)
	// PutRunnerReleases replaces the stored release list.
	PutRunnerReleases(ctx context.Context, l ReleaseList) error
	// HoldPool records h, replacing the pool's hold; it returns false and
	// changes nothing when the pool is held for the same version already
	// (the reconciler sees a refused runner on every pass for an hour).
	HoldPool(ctx context.Context, h RunnerHold) (bool, error)
	// PoolHolds lists the holds, by pool name.
	PoolHolds(ctx context.Context) ([]RunnerHold, error)
	// ReleasePool lifts the pool's hold, if any.
	ReleasePool(ctx context.Context, pool string) error
	// PutInstalled records the runner version a pool's runners were seen
	// running, replacing the pool's last one.
	PutInstalled(ctx context.Context, in InstalledRunner) error
	// InstalledRunners lists the recorded versions, by pool name.
	InstalledRunners(ctx context.Context) ([]InstalledRunner, error)
}

// InstalledRunner is the runner version a pool's runners run, as their
// backend tells it (a runner directory's listener, an image's label), which
// may differ from the version its pools file declares: the reconciler
// records it, skiff status shows it.
type InstalledRunner struct {
	Pool, Version string
	// SeenAt is the pass that recorded it.
	SeenAt time.Time
}

// ValidateInstalled reports an installed version no adapter may write.
func ValidateInstalled(in InstalledRunner) error {
	if in.Pool == "" || in.Version == "" || in.SeenAt.IsZero() {
		return errors.New("recording an installed runner: pool, version and time are required")
	}
	return nil
}

// SortInstalled orders installed versions by pool name, the order
// InstalledRunners returns.
func SortInstalled(ins []InstalledRunner) {
	slices.SortFunc(ins, func(a, b InstalledRunner) int { return strings.Compare(a.Pool, b.Pool) })
}

// ValidateRunnerHold reports a hold no adapter may write.
func ValidateRunnerHold(h RunnerHold) error {
	if h.Pool == "" || h.Reason == "" || h.At.IsZero() {
		return errors.New("holding pool: pool, reason and time are required")
	}
	return nil
}

// SortRunnerHolds orders holds by pool name, the order PoolHolds returns.
func SortRunnerHolds(hs []RunnerHold) {
	slices.SortFunc(hs, func(a, b RunnerHold) int { return strings.Compare(a.Pool, b.Pool) })
}

// RunnerMemory is an in-memory RunnerState.
type RunnerMemory struct {
	mu        sync.Mutex
	releases  *ReleaseList
	holds     map[string]RunnerHold
	installed map[string]InstalledRunner
}

var _ RunnerState = (*RunnerMemory)(nil)

// NewRunnerMemory returns an empty RunnerMemory.
func NewRunnerMemory() *RunnerMemory {
	return &RunnerMemory{holds: map[string]RunnerHold{}, installed: map[string]InstalledRunner{}}
}

// RunnerReleases implements RunnerState.
func (m *RunnerMemory) RunnerReleases(ctx context.Context) (ReleaseList, error) {
	if err := ctx.Err(); err != nil {
		return ReleaseList{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.releases == nil {
		return ReleaseList{}, ErrNotFound
	}
	return cloneList(*m.releases), nil
}

// PutRunnerReleases implements RunnerState.
func (m *RunnerMemory) PutRunnerReleases(ctx context.Context, l ReleaseList) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l = cloneList(l)
	m.mu.Lock()
	m.releases = &l
	m.mu.Unlock()
	return nil
}

func cloneList(l ReleaseList) ReleaseList {
	out := ReleaseList{FetchedAt: l.FetchedAt, Releases: make([]runnerversion.Release, len(l.Releases))}
	for i, r := range l.Releases {
		sums := make(map[string]string, len(r.SHA256))
		for k, v := range r.SHA256 {
			sums[k] = v
		}
		r.SHA256 = sums
		out.Releases[i] = r
	}
	return out
}

// HoldPool implements RunnerState.
func (m *RunnerMemory) HoldPool(ctx context.Context, h RunnerHold) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if err := ValidateRunnerHold(h); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.holds[h.Pool]; ok && old.Version == h.Version {
		return false, nil
	}
	m.holds[h.Pool] = h
	return true, nil
}

// PoolHolds implements RunnerState.
func (m *RunnerMemory) PoolHolds(ctx context.Context) ([]RunnerHold, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	out := slices.Collect(maps.Values(m.holds))
	m.mu.Unlock()
	SortRunnerHolds(out)
	return out, nil
}

// ReleasePool implements RunnerState.
func (m *RunnerMemory) ReleasePool(ctx context.Context, pool string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	delete(m.holds, pool)
	m.mu.Unlock()
	return nil
}

// PutInstalled implements RunnerState.
func (m *RunnerMemory) PutInstalled(ctx context.Context, in InstalledRunner) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := ValidateInstalled(in); err != nil {
		return err
	}
	m.mu.Lock()
	m.installed[in.Pool] = in
	m.mu.Unlock()
	return nil
}

// InstalledRunners implements RunnerState.
func (m *RunnerMemory) InstalledRunners(ctx context.Context) ([]InstalledRunner, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	out := slices.Collect(maps.Values(m.installed))
	m.mu.Unlock()
	SortInstalled(out)
	return out, nil
}
