// Package freshness keeps skiff's runners ones GitHub will serve: it knows
// the runner version each pool launches and how far it is behind the
// newest release, hands scale-up the runner to download for a pool that
// follows the releases, and stops a pool's launches when GitHub refuses its
// runners' version — instead of a replacement loop of runners that fail
// alike.
//
//	daily check ──► release list (store, shared) ──► Download (scale-up): latest → version + SHA-256
//	                        │
//	reconciler pass ──► gauges per pool: RunnerDaysLeft (alarm below 7), RunnerHeld
//	        │
//	        └─ an ended runner tagged skiff:runner-outdated (exit code 7, or GitHub's
//	           refusal) ──► hold the pool ──► scale-up dead-letters its jobs with the fix
//	                                            until the pool's version changes, or one
//	                                            trial runner after HoldFor
//
// The release list is fetched through the GitHub App's budget at most once a
// day for the whole deployment (runnerversion.Cache over the store's
// shared copy).
package freshness

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/runnerversion"
	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/telemetry"
)

// Metrics the reconciler's pass sets per pool (dimension Pool).
const (
	// MetricDaysLeft is how many days the pool's runner version has before
	// GitHub stops dispatching to it (runnerversion.Window after the first
	// newer release); 30 while it is the newest, negative once out. The
	// deployment's alarm fires below runnerversion.AlarmLead (7 days).
	MetricDaysLeft = "RunnerDaysLeft"
	// MetricHeld is 1 while the pool's launches are stopped because GitHub
	// refused its runners' version.
	MetricHeld = "RunnerHeld"
	// MetricOutdated counts runners seen ending refused for their version.
	MetricOutdated = "OutdatedRunners"
)

// ReasonOutdated is the dead-letter reason of a job of a held pool.
const ReasonOutdated = "runner_outdated"

// DefaultHoldFor is how long a hold stands before one trial runner is
// launched again when nothing changed the pool's version: long enough that a
// stale image costs one runner every few hours instead of one per job, short
// enough that a refusal GitHub lifts (an outage, as on 2026-08-06) does not
// stop the pool for a day.
const DefaultHoldFor = 6 * time.Hour

// holdsTTL is how long scale-up reuses the holds it read: one store read
// per 30 s per process instead of one per job; a hold made by another
// process (the reconciler's Lambda) is seen within it, so a warm scale-up
// may launch for that long after the refusal.
const holdsTTL = 30 * time.Second

// State is the part of the runner state the check keeps: the release
// list, shared by every process that reads it, the pools' holds, and the
// version each pool's runners were seen running. store.RunnerState
// implements it.
type State interface {
	RunnerReleases(ctx context.Context) (store.ReleaseList, error)
	PutRunnerReleases(ctx context.Context, l store.ReleaseList) error
	HoldPool(ctx context.Context, h store.RunnerHold) (bool, error)
	PoolHolds(ctx context.Context) ([]store.RunnerHold, error)
	ReleasePool(ctx context.Context, pool string) error
	PutInstalled(ctx context.Context, in store.InstalledRunner) error
}

var _ State = store.RunnerState(nil)

// sharedReleases shares the release list of the runnerversion.Cache
// through the State, so that one fetch serves every process.
type sharedReleases struct{ state State }

var _ runnerversion.Shared = sharedReleases{}

// Load implements runnerversion.Shared.
func (s sharedReleases) Load(ctx context.Context) ([]runnerversion.Release, time.Time, error) {
	l, err := s.state.RunnerReleases(ctx)
	return l.Releases, l.FetchedAt, err
}

// Save implements runnerversion.Shared.
func (s sharedReleases) Save(ctx context.Context, rs []runnerversion.Release, at time.Time) error {
	return s.state.PutRunnerReleases(ctx, store.ReleaseList{Releases: rs, FetchedAt: at})
}

// Options configure a Service. State is required; Source too, unless the
// deployment runs no download pool and shows no freshness (GHES without a
// release source).
type Options struct {
	Pools  *pool.Config
	State  State
	Source runnerversion.Source // nil: no release list (GHES)
	Gauges telemetry.Gauges     // default telemetry.DiscardGauges
	Count  telemetry.Counter    // default telemetry.Discard
	Logger *slog.Logger         // default slog.Default()
	Now    func() time.Time     // default time.Now
	// HoldFor is how long a hold lasts without a version change (default DefaultHoldFor).
	HoldFor time.Duration
}

// Service is the freshness check. It is safe for concurrent use.
type Service struct {
	o     Options
	cache *runnerversion.Cache

	mu       sync.Mutex
	holds    map[string]store.RunnerHold
	readAt   time.Time
	noted    map[string]string // pool → installed version logged
	recorded map[string]string // pool → installed version stored
}

// New returns a Service.
func New(o Options) (*Service, error) {
	if o.State == nil || o.Pools == nil {
		return nil, errors.New("creating freshness service: pools and runner state are required")
	}
	if o.Gauges == nil {
		o.Gauges = telemetry.DiscardGauges
	}
	telemetry.FillDefaults(&o.Count, &o.Logger, &o.Now)
	if o.HoldFor <= 0 {
		o.HoldFor = DefaultHoldFor
	}
	s := &Service{o: o}
	if o.Source != nil {
		s.cache = runnerversion.NewCache(o.Source, o.Now).WithShared(sharedReleases{o.State})
	}
	return s, nil
}

type installationKey struct{}

// WithInstallation names the GitHub App installation a release fetch made
// under ctx may act as (any installation can read the public releases; the
// job's is known to have budget and a token).
func WithInstallation(ctx context.Context, id int64) context.Context {
	return context.WithValue(ctx, installationKey{}, id)
}

// Installation is the installation WithInstallation put in ctx, or 0.
func Installation(ctx context.Context) int64 {
	id, _ := ctx.Value(installationKey{}).(int64)
	return id
}

// ErrNoSource: the deployment has no release source (GHES) and the pool
// follows runnerVersion: latest.
var ErrNoSource = errors.New("no runner release source: pin runnerVersion (GitHub Enterprise Server)")

// Download is the runner a pool's registrations name: for latest, the
// newest release and its checksum from the daily list; for a pin, the pin.
func (s *Service) Download(ctx context.Context, spec pool.Shared) (runnerversion.Download, error) {
	if spec.RunnerVersion != runnerversion.Latest && spec.RunnerVersion != "" {
		return runnerversion.Download{Version: spec.RunnerVersion, SHA256: spec.RunnerSHA256}, nil
	}
	if s.cache == nil {
		return runnerversion.Download{}, ErrNoSource
	}
	return s.cache.Resolve(ctx, runnerversion.Latest, "", spec.Architecture)
}

// Held returns the pool's hold when it stops a launch that would download
// d, or nil. A hold for another version than d's is lifted (the pool's
// version changed: a new release, a new pin); a hold past its Until lets
// this launch through as the trial (the next refusal holds again).
func (s *Service) Held(ctx context.Context, pool string, d runnerversion.Download) (*store.RunnerHold, error) {
	h, ok, err := s.cachedHold(ctx, pool)
	if err != nil || !ok {
		return nil, err
	}
	now := s.o.Now()
	// The pool's version changed since the hold (a new release for latest,
	// a new pin): not merely different from the refused one, which an
	// image's own stale runner always is.
	changed := d.Version != "" && h.Launched != "" && d.Version != h.Launched
	if changed || (!h.Until.IsZero() && !now.Before(h.Until)) {
		if err := s.o.State.ReleasePool(ctx, pool); err != nil {
			return nil, fmt.Errorf("lifting the hold of pool %s: %w", pool, err)
		}
		s.forget(pool)
		s.o.Logger.Info("pool launches again", "pool", pool, "held_version", h.Version, "version", d.Version,
			"version_changed", changed)
		return nil, nil
	}
	return &h, nil
}

// cachedHold is the pool's hold from the cache of every pool's holds,
// read again from the store when older than holdsTTL. The lookup is under
// the lock: concurrent launches ask while another lifts a hold (forget)
// or the reconciler makes one (remember).
func (s *Service) cachedHold(ctx context.Context, pool string) (store.RunnerHold, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.o.Now()
	if s.holds == nil || now.Sub(s.readAt) >= holdsTTL {
		hs, err := s.o.State.PoolHolds(ctx)
		if err != nil {
			return store.RunnerHold{}, false, fmt.Errorf("reading pool holds: %w", err)
		}
		s.holds, s.readAt = make(map[string]store.RunnerHold, len(hs)), now
		for _, h := range hs {
			s.holds[h.Pool] = h
		}
	}
	h, ok := s.holds[pool]
	return h, ok, nil
}

// remember puts a hold this process made into its cache: a scale-up in
// the same process (local mode) sees it at once.
func (s *Service) remember(h store.RunnerHold) {
	s.mu.Lock()
	if s.holds != nil {
		s.holds[h.Pool] = h
	}
	s.mu.Unlock()
}

func (s *Service) forget(pool string) {
	s.mu.Lock()
	delete(s.holds, pool)
	s.mu.Unlock()
}

// Holds lists the pools' holds as stored.
func (s *Service) Holds(ctx context.Context) ([]store.RunnerHold, error) {
	return s.o.State.PoolHolds(ctx)
}

// Report is what one Observe did.
type Report struct {
	// Held are the pools held by this pass.
	Held []string
	// Errors counts what failed (logged).
	Errors int
}

// Observe is the reconciler's step: every ended instance tagged
// names.TagRunnerOutdated holds its pool, and each pool's gauges are set
// from the release list (fetched when a day old) and the holds.
func (s *Service) Observe(ctx context.Context, insts []provider.Instance) Report {
	var rep Report
	now := s.o.Now()
	hs, err := s.o.State.PoolHolds(ctx)
	if err != nil {
		s.o.Logger.Warn("reading pool holds", "err", err)
		rep.Errors++
	}
	held := map[string]store.RunnerHold{}
	for _, h := range hs {
		held[h.Pool] = h
	}
	var rs []runnerversion.Release
	if s.cache != nil {
		if rs, err = s.cache.Releases(ctx); err != nil {
			s.o.Logger.Warn("reading the runner releases", "err", err)
			rep.Errors++
		}
	}
	for _, in := range insts {
		v, refused := in.Tags[names.TagRunnerOutdated]
		if !refused || in.Pool == "" || s.o.Pools.Pool(in.Pool) == nil {
			continue
		}
		if old, ok := held[in.Pool]; ok && old.Version == v && (old.Until.IsZero() || now.Before(old.Until)) {
			continue
		}
		if old, ok := held[in.Pool]; ok && old.Version == v {
			// The trial after an expired hold was refused again: hold anew.
			if err := s.o.State.ReleasePool(ctx, in.Pool); err != nil {
				s.o.Logger.Warn("renewing a pool hold", "pool", in.Pool, "err", err)
				rep.Errors++
				continue
			}
		}
		p := s.o.Pools.Pool(in.Pool)
		h := store.RunnerHold{Pool: in.Pool, Version: v, Launched: launched(p, rs), Reason: ReasonOutdated, At: now,
			Until: now.Add(s.o.HoldFor), Detail: Fix(p, v, rs, now.Add(s.o.HoldFor))}
		ok, err := s.o.State.HoldPool(ctx, h)
		if err != nil {
			s.o.Logger.Warn("holding a pool", "pool", in.Pool, "err", err)
			rep.Errors++
			continue
		}
		if ok {
			s.remember(h)
			s.o.Count.Count(MetricOutdated, in.Pool)
			s.o.Logger.Error("GitHub refused the pool's runner version: launches stopped", "pool", in.Pool, "version", v,
				"instance_id", in.ID, "fix", h.Detail)
			rep.Held = append(rep.Held, in.Pool)
		}
		held[in.Pool] = h
	}
	installed := Installed(insts)
	for _, p := range s.o.Pools.Pools {
		_, isHeld := held[p.Name]
		s.o.Gauges.Gauge(MetricHeld, p.Name, boolInt(isHeld))
		if v := installed[p.Name]; v != "" {
			s.noteInstalled(p, v)
			if err := s.recordInstalled(ctx, p.Name, v, now); err != nil {
				s.o.Logger.Warn("recording a pool's installed runner version", "pool", p.Name, "err", err)
				rep.Errors++
			}
		}
		if f, ok := AssessRunning(p, installed[p.Name], rs, held, now); ok {
			s.o.Gauges.Gauge(MetricDaysLeft, p.Name, f.DaysLeft)
		}
	}
	return rep
}

// recordInstalled stores the pool's installed runner version for skiff
// status when it is not the one this process stored last: one write per
// pool per version change (and per process start), not one per pass.
func (s *Service) recordInstalled(ctx context.Context, pool, v string, now time.Time) error {
	s.mu.Lock()
	same := s.recorded[pool] == v
	s.mu.Unlock()
	if same {
		return nil
	}
	if err := s.o.State.PutInstalled(ctx, store.InstalledRunner{Pool: pool, Version: v, SeenAt: now}); err != nil {
		return err
	}
	s.mu.Lock()
	if s.recorded == nil {
		s.recorded = map[string]string{}
	}
	s.recorded[pool] = v
	s.mu.Unlock()
	return nil
}

// Installed is the runner version each pool's runners run, where their
// backend can tell (names.TagRunnerVersion: a runner directory's listener,
// an image's label): that of the pool's most recently launched instance.
func Installed(insts []provider.Instance) map[string]string {
	out := map[string]string{}
	newest := map[string]time.Time{}
	for _, in := range insts {
		v := in.Tags[names.TagRunnerVersion]
		if _, err := runnerversion.Parse(v); err != nil || in.Pool == "" {
			continue
		}
		if t, ok := newest[in.Pool]; !ok || in.LaunchedAt.After(t) {
			out[in.Pool], newest[in.Pool] = v, in.LaunchedAt
		}
	}
	return out
}

// noteInstalled logs, once per pool and version, a pool whose runners run
// another version than the pin it declares: the install, not the pools
// file, decides what GitHub sees.
func (s *Service) noteInstalled(p *pool.Pool, v string) {
	if p.RunnerVersion == runnerversion.Latest || p.RunnerVersion == "" || p.RunnerVersion == v {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.noted == nil {
		s.noted = map[string]string{}
	}
	if s.noted[p.Name] == v {
		return
	}
	s.noted[p.Name] = v
	s.o.Logger.Warn("the pool's runners run another runner version than its runnerVersion says; the freshness check follows the install",
		"pool", p.Name, "runner_version", p.RunnerVersion, "installed", v)
}

// launched is the runner version pool p hands its boots now ("" when its
// runnerVersion is latest and no release list is known).
func launched(p *pool.Pool, rs []runnerversion.Release) string {
	v, err := runnerversion.PoolVersion(p.RunnerVersion, rs)
	if err != nil {
		return ""
	}
	return v.String()
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// Fix is the operator's fix for pool p whose runner version v GitHub
// refused, in words: what to change for the pool's kind of runner, and when
// launches resume by themselves.
func Fix(p *pool.Pool, v string, rs []runnerversion.Release, until time.Time) string {
	latest := "the newest release"
	if r, ok := runnerversion.Newest(rs); ok {
		latest = r.Version.String()
	}
	var what string
	switch {
	case v == latest:
		what = fmt.Sprintf("none on skiff's side: GitHub refuses its newest release %s (a GitHub incident?)", latest)
	case p.RunnerVersion != runnerversion.Latest:
		what = fmt.Sprintf("pin runnerVersion %s with its runnerSha256 in the pools file and redeploy, or use runnerVersion: latest", latest)
	case p.Backend == pool.BackendEC2:
		what = fmt.Sprintf("the pool's image holds its own runner: rebuild it with runner %s (the image pipeline, or remove the runner from the image so the boot downloads it)", latest)
	default:
		what = fmt.Sprintf("update the pool's runner (image or runner directory) to %s", latest)
	}
	return fmt.Sprintf("GitHub refuses runner %s (deprecated: exit code 7). Fix: %s. Launches resume when the pool's runner version changes, or for one trial runner at %s.",
		v, what, until.UTC().Format(time.RFC3339))
}

// PoolFreshness is one pool's line of skiff status.
type PoolFreshness struct {
	Pool string `json:"pool"`
	// Version is the runner version the pool launches ("" unknown), Latest the newest release.
	Version string `json:"version,omitempty"`
	Latest  string `json:"latest,omitempty"`
	// DaysBehind counts days since a newer release was published; DaysLeft
	// the days before GitHub stops dispatching to Version.
	DaysBehind int   `json:"daysBehind"`
	DaysLeft   int64 `json:"daysLeft"`
	// Installed says Version is what the pool's runners were seen running
	// (a runner directory's listener, an image's label); Declared is then
	// the pools file's runnerVersion when it names another version.
	Installed bool   `json:"installed,omitempty"`
	Declared  string `json:"declared,omitempty"`
	// State is current, behind, alarm, expired, held, or unknown.
	State string `json:"state"`
	// Reason and Detail explain a hold.
	Reason string `json:"reason,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// AssessRunning is Assess at the version pool p's runners were seen
// running (installed; "" unknown) rather than the one its pools file
// declares: the install, not the file, decides what GitHub sees. Like
// Assess it reports false when it could not place the pool against the
// releases; f.Installed still says when the version alone is known.
func AssessRunning(p *pool.Pool, installed string, rs []runnerversion.Release, held map[string]store.RunnerHold, now time.Time) (PoolFreshness, bool) {
	if installed == "" {
		return Assess(p, rs, held, now)
	}
	q := *p
	q.RunnerVersion = installed
	f, ok := Assess(&q, rs, held, now)
	if f.State != "held" {
		f.Installed = true
		if !ok {
			// No release list yet: the version, without its window.
			f.Version, f.State = installed, StateUnknown
		}
		if d, err := runnerversion.PoolVersion(p.RunnerVersion, rs); err != nil || d.String() != installed {
			f.Declared = p.RunnerVersion
		}
	}
	return f, ok
}

// StateUnknown is the state of a pool whose installed runner version is
// known but not yet placed against a release list.
const StateUnknown = "unknown"

// Assess places pool p against the releases and its hold at now. A held
// pool is assessed at the refused version when that is a version. It
// reports false when nothing is known (no releases, no hold).
func Assess(p *pool.Pool, rs []runnerversion.Release, held map[string]store.RunnerHold, now time.Time) (PoolFreshness, bool) {
	out := PoolFreshness{Pool: p.Name}
	h, isHeld := held[p.Name]
	want := p.RunnerVersion
	if isHeld {
		if _, err := runnerversion.Parse(h.Version); err == nil {
			want = h.Version
		}
		out.State, out.Reason, out.Detail, out.Version = "held", h.Reason, h.Detail, h.Version
	}
	if len(rs) == 0 {
		return out, isHeld
	}
	v, err := runnerversion.PoolVersion(want, rs)
	if err != nil {
		return out, isHeld
	}
	f, err := runnerversion.Assess(v, rs, now)
	if err != nil {
		return out, isHeld
	}
	out.Version, out.Latest, out.DaysBehind = v.String(), f.Latest.String(), f.DaysBehind
	out.DaysLeft = int64(runnerversion.Window / (24 * time.Hour))
	if !f.Current {
		// Whole days, rounded down: 0 on the last day, -1 the day after.
		out.DaysLeft = int64(math.Floor(f.Deadline.Sub(now).Hours() / 24))
	}
	if !isHeld {
		out.State = f.State(now)
	}
	return out, true
}
