package ghsim

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/skiffci/skiff/pkg/runnerversion"
)

// Runner releases and GitHub's version rules.
//
// The simulator publishes the actions/runner releases a test gives it
// (SetRunnerReleases), newest first, in GitHub's release shape with the
// checksums in the notes between GitHub's markers, at
//
//	GET /repos/actions/runner/releases          (?per_page, ?page)
//	GET /repos/actions/runner/releases/latest   (404 with none)
//
// and enforces GitHub's two rules when a runner connects with its version
// (ConnectRunnerVersion, or "runner_version" in OpRunnerConnect's body):
// below the minimum version (SetMinRunnerVersion) the registration is
// refused; older than the release window (a newer release published more
// than runnerversion.Window ago on the simulator's clock) the runner is told
// its version is deprecated and cannot receive messages. Both answer 403
// over HTTP, with "reason": "below_minimum" or "deprecated".
const (
	OpListReleases     = "GET /repos/{owner}/{repo}/releases"
	OpGetLatestRelease = "GET /repos/{owner}/{repo}/releases/latest"
)

// Errors of a runner refused for its version.
var (
	// ErrBelowMinimum: GitHub refuses to register a runner of this version.
	ErrBelowMinimum = errors.New("runner version below the minimum GitHub registers")
	// ErrDeprecated: the runner's version is out of GitHub's window; it
	// connects but cannot receive messages.
	ErrDeprecated = errors.New("runner version is deprecated and cannot receive messages")
)

// RunnerRelease is one actions/runner release the simulator publishes.
type RunnerRelease struct {
	Version   string
	Published time.Time
	// SHA256 maps a platform ("linux-x64") to its package's checksum;
	// each is written into the notes between GitHub's markers.
	SHA256 map[string]string
	// Body, when set, replaces the generated notes (tests of odd notes).
	Body string
}

// SetRunnerReleases replaces the published runner releases.
func (s *Server) SetRunnerReleases(rs []RunnerRelease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releases = slices.Clone(rs)
	slices.SortFunc(s.releases, func(a, b RunnerRelease) int { return b.Published.Compare(a.Published) })
}

// SetMinRunnerVersion sets the oldest runner version GitHub registers ("" for none).
func (s *Server) SetMinRunnerVersion(v string) {
	s.mu.Lock()
	s.minRunner = v
	s.mu.Unlock()
}

// RunnerReleaseBody is the release notes the simulator publishes for r:
// GitHub's layout, a commit id that is not a checksum, then one marked
// checksum per package.
func RunnerReleaseBody(r RunnerRelease) string {
	if r.Body != "" {
		return r.Body
	}
	var b strings.Builder
	fmt.Fprintf(&b, "## What's Changed\n* Update dependencies (%s)\n\n", strings.Repeat("0", 40)+strings.Repeat("f", 24))
	b.WriteString("The SHA-256 checksums for the packages included in this build are shown below:\n\n")
	platforms := make([]string, 0, len(r.SHA256))
	for p := range r.SHA256 {
		platforms = append(platforms, p)
	}
	slices.Sort(platforms)
	for _, p := range platforms {
		ext := ".tar.gz"
		if strings.HasPrefix(p, "win-") {
			ext = ".zip"
		}
		fmt.Fprintf(&b, "- actions-runner-%s-%s%s <!-- BEGIN SHA %s -->%s<!-- END SHA %s -->\n", p, r.Version, ext, p, r.SHA256[p], p)
	}
	return b.String()
}

func (s *Server) releaseJSON(i int, r RunnerRelease) obj {
	id := int64(9000 + i)
	u := s.apiBase + "/repos/actions/runner/releases/" + strconv.FormatInt(id, 10)
	html := s.webBase + "/actions/runner/releases/tag/v" + r.Version
	bot := s.userJSON(&simAccount{login: "github-actions[bot]", id: 41898282, typ: "Bot", created: r.Published})
	assets := []obj{}
	for p := range r.SHA256 {
		name := "actions-runner-" + p + "-" + r.Version + ".tar.gz"
		aid := id*100 + int64(len(assets))
		assets = append(assets, obj{
			"url": s.apiBase + "/repos/actions/runner/releases/assets/" + strconv.FormatInt(aid, 10), "id": aid,
			"node_id": nodeID("ReleaseAsset", aid), "name": name, "label": "", "uploader": bot,
			"content_type": "application/gzip", "state": "uploaded", "size": 100 << 20, "download_count": 1,
			"digest":     "sha256:" + r.SHA256[p],
			"created_at": ts(r.Published), "updated_at": ts(r.Published),
			"browser_download_url": s.webBase + "/actions/runner/releases/download/v" + r.Version + "/" + name,
		})
	}
	slices.SortFunc(assets, func(a, b obj) int { return strings.Compare(a["name"].(string), b["name"].(string)) })
	return obj{
		"url": u, "html_url": html, "assets_url": u + "/assets",
		"upload_url":  "https://uploads.github.com/repos/actions/runner/releases/" + strconv.FormatInt(id, 10) + "/assets{?name,label}",
		"tarball_url": s.apiBase + "/repos/actions/runner/tarball/v" + r.Version,
		"zipball_url": s.apiBase + "/repos/actions/runner/zipball/v" + r.Version,
		"id":          id, "node_id": nodeID("Release", id), "tag_name": "v" + r.Version, "target_commitish": "main",
		"name": "v" + r.Version, "body": RunnerReleaseBody(r), "draft": false, "prerelease": false, "immutable": false,
		"created_at": ts(r.Published), "published_at": ts(r.Published), "updated_at": ts(r.Published),
		"author": bot, "assets": assets,
	}
}

// actions/runner is the only repository whose releases the simulator knows.
func (s *Server) releasesRepo(c *call) bool {
	if c.r.PathValue("owner") != "actions" || c.r.PathValue("repo") != "runner" {
		c.fail(http.StatusNotFound, "Not Found")
		return false
	}
	return true
}

func (s *Server) listReleases(c *call) {
	if !s.releasesRepo(c) {
		return
	}
	perPage, page := 30, 1
	if v, err := strconv.Atoi(c.r.URL.Query().Get("per_page")); err == nil && v > 0 {
		perPage = min(v, 100)
	}
	if v, err := strconv.Atoi(c.r.URL.Query().Get("page")); err == nil && v > 0 {
		page = v
	}
	s.mu.Lock()
	out := []obj{}
	for i, r := range s.releases {
		if i >= (page-1)*perPage && i < page*perPage {
			out = append(out, s.releaseJSON(i, r))
		}
	}
	s.mu.Unlock()
	c.json(http.StatusOK, out)
}

func (s *Server) latestRelease(c *call) {
	if !s.releasesRepo(c) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.releases) == 0 {
		c.fail(http.StatusNotFound, "Not Found")
		return
	}
	c.json(http.StatusOK, s.releaseJSON(0, s.releases[0]))
}

// versionCheckLocked applies GitHub's rules to a runner of version v
// connecting now. An empty version is not checked (in-process runners of
// tests that do not care).
func (s *Server) versionCheckLocked(v string) error {
	if v == "" {
		return nil
	}
	ver, err := runnerversion.Parse(v)
	if err != nil {
		return fmt.Errorf("%w: %q is not a runner version", ErrBelowMinimum, v)
	}
	if s.minRunner != "" {
		if m, err := runnerversion.Parse(s.minRunner); err == nil && ver.Compare(m) < 0 {
			return fmt.Errorf("%w: v%s is below v%s", ErrBelowMinimum, ver, m)
		}
	}
	if len(s.releases) == 0 {
		return nil
	}
	rs := make([]runnerversion.Release, 0, len(s.releases))
	for _, r := range s.releases {
		if rv, err := runnerversion.Parse(r.Version); err == nil {
			rs = append(rs, runnerversion.Release{Version: rv, PublishedAt: r.Published})
		}
	}
	now := s.now()
	if f, err := runnerversion.Assess(ver, rs, now); err == nil && f.State(now) == "expired" {
		//lint:ignore ST1005 the message a deprecated runner is sent, in GitHub's words, full stop included
		return fmt.Errorf("%w: Runner version v%s is deprecated and cannot receive messages.", ErrDeprecated, ver)
	}
	return nil
}
