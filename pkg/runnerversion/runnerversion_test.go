package runnerversion

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func day(d int) time.Time { return time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC).AddDate(0, 0, d) }

func rel(v string, published time.Time) Release {
	ver, err := Parse(v)
	if err != nil {
		panic(err)
	}
	return Release{Version: ver, PublishedAt: published, SHA256: map[string]string{
		"linux-x64": strings.Repeat("a", 63) + string(rune('0'+ver.Minor%10)), "linux-arm64": strings.Repeat("b", 64)}}
}

func TestParseAndCompare(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"2.333.0", "2.333.0", 0},
		{"v2.333.0", "2.333.0", 0},
		{"2.333.0", "2.333.1", -1},
		{"2.334.0", "2.333.9", 1},
		{"2.99.0", "2.100.0", -1}, // numbers, not strings
		{"3.0.0", "2.999.999", 1},
	} {
		a, err := Parse(tc.a)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := Parse(tc.b)
		if got := a.Compare(b); got != tc.want {
			t.Errorf("%s vs %s = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
	for _, bad := range []string{"", "latest", "2.333", "2.333.0-rc1", "2.333.0 ", "x.y.z"} {
		if _, err := Parse(bad); err == nil && strings.TrimSpace(bad) != "2.333.0" {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}

// The release notes' real shape: one marked checksum per package, and other
// 64-digit hex strings (a commit id) that must not be taken.
func TestChecksums(t *testing.T) {
	t.Parallel()
	x64 := strings.Repeat("c", 64)
	arm := strings.Repeat("D", 64)
	body := "## What's Changed\n* Bump node (#4321) " + strings.Repeat("e", 64) + "\n\n" +
		"## Linux x64\n```bash\ncurl -o actions-runner-linux-x64-2.333.0.tar.gz -L https://github.com/actions/runner/releases/download/v2.333.0/actions-runner-linux-x64-2.333.0.tar.gz\n```\n" +
		"The SHA-256 checksums for the packages included in this build are shown below:\n\n" +
		"- actions-runner-win-x64-2.333.0.zip <!-- BEGIN SHA win-x64 -->" + strings.Repeat("f", 64) + "<!-- END SHA win-x64 -->\n" +
		"- actions-runner-linux-x64-2.333.0.tar.gz <!-- BEGIN SHA linux-x64 -->" + x64 + "<!-- END SHA linux-x64 -->\n" +
		"- actions-runner-linux-arm64-2.333.0.tar.gz <!-- BEGIN SHA linux-arm64 -->" + arm + "<!-- END SHA linux-arm64 -->\n" +
		"- broken <!-- BEGIN SHA linux-arm -->" + strings.Repeat("1", 64) + "<!-- END SHA osx-arm64 -->\n"
	got := Checksums(body)
	if got["linux-x64"] != x64 || got["linux-arm64"] != strings.ToLower(arm) || got["win-x64"] != strings.Repeat("f", 64) {
		t.Errorf("Checksums = %v", got)
	}
	if _, ok := got["linux-arm"]; ok {
		t.Error("a pair with mismatched markers was taken")
	}
	if len(Checksums("no markers "+x64)) != 0 {
		t.Error("an unmarked hex string was taken as a checksum")
	}
}

// The window starts at the publication of the first release newer than the
// pool's, not at the pool's own release nor at the latest's.
func TestAssess(t *testing.T) {
	t.Parallel()
	releases := []Release{
		rel("2.335.0", day(40)), // latest
		rel("2.334.0", day(10)), // the first newer than 2.333.0
		rel("2.333.0", day(-20)),
		rel("2.332.0", day(-60)),
	}
	v := func(s string) Version { x, _ := Parse(s); return x }
	for _, tc := range []struct {
		name      string
		version   string
		now       time.Time
		current   bool
		deadline  time.Time
		behind    int
		state     string
		wantAlarm bool
	}{
		{name: "latest is current", version: "2.335.0", now: day(41), current: true, state: "current"},
		{name: "newer than latest (a pre-release pin) is current", version: "2.336.0", now: day(41), current: true, state: "current"},
		{name: "one behind, fresh", version: "2.334.0", now: day(45), deadline: day(70), behind: 5, state: "behind"},
		{name: "two behind: the window opened with 2.334.0", version: "2.333.0", now: day(22), deadline: day(40), behind: 12, state: "behind"},
		{name: "alarm a week before", version: "2.333.0", now: day(33), deadline: day(40), behind: 23, state: "alarm", wantAlarm: true},
		{name: "expired", version: "2.333.0", now: day(40), deadline: day(40), behind: 30, state: "expired", wantAlarm: true},
		{name: "older still: its own next release opened the window", version: "2.332.0", now: day(12), deadline: day(10), behind: 32, state: "expired", wantAlarm: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f, err := Assess(v(tc.version), releases, tc.now)
			if err != nil {
				t.Fatal(err)
			}
			if f.Current != tc.current || !f.Deadline.Equal(tc.deadline) || f.DaysBehind != tc.behind {
				t.Errorf("current=%v deadline=%s behind=%d, want %v %s %d", f.Current, f.Deadline, f.DaysBehind, tc.current, tc.deadline, tc.behind)
			}
			if got := f.State(tc.now); got != tc.state {
				t.Errorf("state %q, want %q", got, tc.state)
			}
			if f.Alarm(tc.now) != tc.wantAlarm {
				t.Errorf("alarm %v, want %v", f.Alarm(tc.now), tc.wantAlarm)
			}
			if f.Latest.String() != "2.335.0" {
				t.Errorf("latest %s", f.Latest)
			}
		})
	}
	if _, err := Assess(v("2.333.0"), nil, day(0)); err == nil {
		t.Error("Assess with no releases succeeded")
	}
}

type countingSource struct {
	releases []Release
	err      error
	calls    int
}

func (s *countingSource) RunnerReleases(context.Context) ([]Release, error) {
	s.calls++
	return s.releases, s.err
}

// A latest pool follows a new release on the next day's check, and no
// sooner: one fetch a day, however many launches ask.
func TestCacheFollowsTheNextDaysRelease(t *testing.T) {
	t.Parallel()
	now := day(0)
	src := &countingSource{releases: []Release{rel("2.333.0", day(-5))}}
	c := NewCache(src, func() time.Time { return now })
	ctx := context.Background()
	resolve := func() Download {
		t.Helper()
		d, err := c.Resolve(ctx, Latest, "", "x64")
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if d := resolve(); d.Version != "2.333.0" || d.SHA256 != src.releases[0].SHA256["linux-x64"] {
		t.Fatalf("first resolve = %+v", d)
	}
	src.releases = append([]Release{rel("2.334.0", day(0).Add(time.Hour))}, src.releases...)
	for i := 0; i < 100; i++ {
		now = now.Add(10 * time.Minute) // 16 h 40 min of launches
		if d := resolve(); d.Version != "2.333.0" {
			t.Fatalf("the cache fetched before a day had passed: %+v", d)
		}
	}
	now = day(1)
	if d := resolve(); d.Version != "2.334.0" || d.SHA256 != src.releases[0].SHA256["linux-x64"] {
		t.Fatalf("next day's resolve = %+v, want 2.334.0 with its checksum", d)
	}
	if src.calls != 2 {
		t.Errorf("%d fetches over a day and a bit, want 2", src.calls)
	}
	if d, _ := c.Resolve(ctx, "2.330.0", strings.Repeat("9", 64), "x64"); d.Version != "2.330.0" || d.SHA256 != strings.Repeat("9", 64) {
		t.Errorf("a pin resolved to %+v", d)
	}
}

// GitHub failing keeps yesterday's list and retries after RetryAfter, not
// on every launch; with no list at all the resolve fails.
func TestCacheOutage(t *testing.T) {
	t.Parallel()
	now := day(0)
	src := &countingSource{err: errors.New("502")}
	c := NewCache(src, func() time.Time { return now })
	ctx := context.Background()
	if _, err := c.Resolve(ctx, Latest, "", "x64"); err == nil {
		t.Fatal("resolved with no release ever fetched")
	}
	if _, err := c.Releases(ctx); err == nil || src.calls != 1 {
		t.Fatalf("err=%v calls=%d: a second use within RetryAfter must not call again", err, src.calls)
	}
	now = now.Add(c.RetryAfter)
	src.err, src.releases = nil, []Release{rel("2.333.0", day(-1))}
	if _, err := c.Releases(ctx); err != nil {
		t.Fatal(err)
	}
	now = day(1).Add(time.Hour)
	src.err = errors.New("502")
	rs, err := c.Releases(ctx)
	if err != nil || len(rs) != 1 {
		t.Fatalf("an outage lost yesterday's list: %v %v", rs, err)
	}
	for i := 0; i < 5; i++ {
		now = now.Add(time.Minute)
		_, _ = c.Releases(ctx)
	}
	if src.calls != 3 {
		t.Errorf("%d calls, want 3 (retries spaced by RetryAfter)", src.calls)
	}
	noSum := NewCache(SourceFunc(func(context.Context) ([]Release, error) {
		return []Release{{Version: Version{2, 333, 0}, PublishedAt: day(0)}}, nil
	}), nil)
	if _, err := noSum.Resolve(ctx, Latest, "", "arm64"); !errors.Is(err, ErrNoChecksum) {
		t.Errorf("a release without the platform's checksum resolved: %v", err)
	}
}

type memShared struct {
	rs []Release
	at time.Time
}

func (m *memShared) Load(context.Context) ([]Release, time.Time, error) {
	if m.rs == nil {
		return nil, time.Time{}, errors.New("none")
	}
	return m.rs, m.at, nil
}

func (m *memShared) Save(_ context.Context, rs []Release, at time.Time) error {
	m.rs, m.at = rs, at
	return nil
}

// Two processes sharing the list make one call a day between them.
func TestCacheShared(t *testing.T) {
	t.Parallel()
	now := day(0)
	clock := func() time.Time { return now }
	src := &countingSource{releases: []Release{rel("2.333.0", day(-5))}}
	sh := &memShared{}
	a, b := NewCache(src, clock).WithShared(sh), NewCache(src, clock).WithShared(sh)
	ctx := context.Background()
	for range 3 {
		for _, c := range []*Cache{a, b} {
			if _, err := c.Releases(ctx); err != nil {
				t.Fatal(err)
			}
		}
		now = now.Add(23 * time.Hour)
	}
	// a fetches at 0 h and at 46 h; b reads the shared copy both times.
	if src.calls != 2 {
		t.Errorf("%d calls over 46 hours from two processes, want 2", src.calls)
	}
}
