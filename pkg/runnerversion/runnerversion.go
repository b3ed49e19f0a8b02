// Package runnerversion knows which GitHub Actions runner releases exist
// and how long GitHub keeps serving each: pure decisions over plain values
// (version order, the checksums a release publishes, a pool's freshness
// and the day its runners fall out of GitHub's window), and a daily cache
// of the release list in front of whatever fetches it.
//
// GitHub's rule (github.com and GHE.com): a runner must be at least the
// minimum version to register, and must install each new release within
// 30 days of that release's publication to keep getting jobs. So a pool's
// runners fall out of the window 30 days after the first release newer than
// theirs was published — not 30 days after their own release, and not 30
// days after the latest one:
//
//	own release ── next release published ──────── +23 d: alarm ── +30 d: no more jobs
//	                (days behind count from here)
//
// JIT runners never update themselves, so a pool's version is what its
// image holds or what its boot script downloads.
package runnerversion

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Window and AlarmLead are GitHub's and skiff's clocks. Each says why it
// has its value.
const (
	// Window is how long GitHub keeps dispatching jobs to a runner after a
	// newer release was published (GitHub's enforcement for github.com and
	// GHE.com: "install each new runner release within 30 days of its
	// publication").
	Window = 30 * 24 * time.Hour
	// AlarmLead is how long before the window closes the pool's alarm
	// fires: a week leaves time to rebuild an image or redeploy a pin.
	AlarmLead = 7 * 24 * time.Hour
	// Refresh is how old the cached release list may get before it is
	// fetched again: GitHub publishes a runner release every few weeks, and
	// one call a day is nothing against an App's 5,000 an hour.
	Refresh = 24 * time.Hour
)

// Latest is the runnerVersion value that follows GitHub's newest release.
const Latest = "latest"

// Version is a runner version, major.minor.patch.
type Version struct{ Major, Minor, Patch int }

var versionRe = regexp.MustCompile(`^v?([0-9]{1,6})\.([0-9]{1,6})\.([0-9]{1,6})$`)

// Parse reads "2.333.0" (a leading v, as in a release tag, is allowed).
func Parse(s string) (Version, error) {
	m := versionRe.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return Version{}, fmt.Errorf("parsing runner version %q: want major.minor.patch, like 2.333.0", s)
	}
	var v [3]int
	for i := range v {
		v[i], _ = strconv.Atoi(m[i+1])
	}
	return Version{v[0], v[1], v[2]}, nil
}

// String renders the version without a leading v.
func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// Compare orders versions: -1 when v is older than w, 0 when equal, 1 when newer.
func (v Version) Compare(w Version) int {
	for _, d := range [][2]int{{v.Major, w.Major}, {v.Minor, w.Minor}, {v.Patch, w.Patch}} {
		if d[0] != d[1] {
			if d[0] < d[1] {
				return -1
			}
			return 1
		}
	}
	return 0
}

// Release is one published runner release.
type Release struct {
	Version     Version
	PublishedAt time.Time
	// SHA256 maps a platform ("linux-x64", "linux-arm64", ...) to the hex
	// SHA-256 of its package, as the release notes publish it.
	SHA256 map[string]string
}

// Platform is the release notes' name of a Linux runner package for an
// architecture ("x64", "arm64").
func Platform(arch string) string { return "linux-" + arch }

var (
	shaMarkerRe = regexp.MustCompile(`<!-- BEGIN SHA ([a-z0-9-]+) -->\s*([0-9a-fA-F]{64})\s*<!-- END SHA ([a-z0-9-]+) -->`)
)

// Checksums reads the per-platform SHA-256 checksums from a release's notes.
// GitHub's runner releases carry one per package between markers:
//
//   - actions-runner-linux-x64-2.333.0.tar.gz <!-- BEGIN SHA linux-x64 -->HEX<!-- END SHA linux-x64 -->
//
// Only marked values count: the notes hold other 64-digit hex strings
// (commit ids), so a bare pattern would pick a wrong one. A pair whose
// markers disagree is ignored. Values are lower-cased.
func Checksums(body string) map[string]string {
	out := map[string]string{}
	for _, m := range shaMarkerRe.FindAllStringSubmatch(body, -1) {
		if m[1] != m[3] {
			continue
		}
		if _, seen := out[m[1]]; !seen {
			out[m[1]] = strings.ToLower(m[2])
		}
	}
	return out
}

// Newest returns the newest release (by version), or false when there is none.
func Newest(rs []Release) (Release, bool) {
	if len(rs) == 0 {
		return Release{}, false
	}
	best := rs[0]
	for _, r := range rs[1:] {
		if r.Version.Compare(best.Version) > 0 {
			best = r
		}
	}
	return best, true
}

// Freshness is where a pool's runner version stands against the releases.
type Freshness struct {
	// Version is the pool's runner version; Latest the newest release.
	Version, Latest Version
	// Current: no newer release exists.
	Current bool
	// NextPublished is when the first release newer than Version was
	// published (zero when Current): the window's start.
	NextPublished time.Time
	// Deadline is when GitHub stops dispatching to Version (zero when
	// Current); AlarmAt is AlarmLead before it.
	Deadline, AlarmAt time.Time
	// DaysBehind counts whole days since NextPublished (0 when Current).
	DaysBehind int
}

// State names where f stands at now: "current", "behind" (inside the
// window), "alarm" (within AlarmLead of the deadline) or "expired".
func (f Freshness) State(now time.Time) string {
	switch {
	case f.Current:
		return "current"
	case !now.Before(f.Deadline):
		return "expired"
	case !now.Before(f.AlarmAt):
		return "alarm"
	}
	return "behind"
}

// Alarm reports whether the pool's alarm should fire at now: its runners
// fall out of GitHub's window within AlarmLead, or already have.
func (f Freshness) Alarm(now time.Time) bool {
	s := f.State(now)
	return s == "alarm" || s == "expired"
}

// Assess places version among the releases at now. The window starts when
// the first release newer than version was published. It fails when there
// are no releases.
func Assess(version Version, rs []Release, now time.Time) (Freshness, error) {
	latest, ok := Newest(rs)
	if !ok {
		return Freshness{}, fmt.Errorf("assessing runner %s: no releases known", version)
	}
	f := Freshness{Version: version, Latest: latest.Version}
	newer := slices.DeleteFunc(slices.Clone(rs), func(r Release) bool { return r.Version.Compare(version) <= 0 })
	if len(newer) == 0 {
		f.Current = true
		return f, nil
	}
	first := newer[0]
	for _, r := range newer[1:] {
		if r.PublishedAt.Before(first.PublishedAt) {
			first = r
		}
	}
	f.NextPublished = first.PublishedAt
	f.Deadline = first.PublishedAt.Add(Window)
	f.AlarmAt = f.Deadline.Add(-AlarmLead)
	if d := now.Sub(first.PublishedAt); d > 0 {
		f.DaysBehind = int(d / (24 * time.Hour))
	}
	return f, nil
}

// PoolVersion is the version a pool whose runnerVersion is want launches:
// the newest release for Latest, else the pinned version.
func PoolVersion(want string, rs []Release) (Version, error) {
	if want == Latest || want == "" {
		r, ok := Newest(rs)
		if !ok {
			return Version{}, fmt.Errorf("resolving runnerVersion latest: %w", ErrNoReleases)
		}
		return r.Version, nil
	}
	return Parse(want)
}

// gitHubRelease is the part of GitHub's release object read here.
type gitHubRelease struct {
	TagName     string    `json:"tag_name"`
	Body        string    `json:"body"`
	Draft       bool      `json:"draft"`
	Prerelease  bool      `json:"prerelease"`
	PublishedAt time.Time `json:"published_at"`
}

// ParseReleases reads a page of GitHub's releases API (GET
// /repos/actions/runner/releases, as saved by curl): drafts, pre-releases
// and tags that are not a version are left out.
func ParseReleases(data []byte) ([]Release, error) {
	var page []gitHubRelease
	if err := json.Unmarshal(data, &page); err != nil {
		return nil, fmt.Errorf("decoding runner releases: %w", err)
	}
	out := make([]Release, 0, len(page))
	for _, r := range page {
		if r.Draft || r.Prerelease || r.PublishedAt.IsZero() {
			continue
		}
		v, err := Parse(r.TagName)
		if err != nil {
			continue
		}
		out = append(out, Release{Version: v, PublishedAt: r.PublishedAt, SHA256: Checksums(r.Body)})
	}
	return out, nil
}
