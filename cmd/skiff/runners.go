package main

import (
	"fmt"
	"os"
	"time"

	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/runnerversion"
)

// loadReleases reads a saved page of GitHub's runner releases (curl -s
// https://api.github.com/repos/actions/runner/releases > FILE).
func loadReleases(path string) ([]runnerversion.Release, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading runner releases: %w", err)
	}
	rs, err := runnerversion.ParseReleases(data)
	if err != nil {
		return nil, err
	}
	if len(rs) == 0 {
		return nil, fmt.Errorf("reading runner releases: %s holds no published release", path)
	}
	return rs, nil
}

// runnerWarnings says, for each pool that pins its runner, when that pin
// falls out of GitHub's window if that is within runnerversion.AlarmLead of
// now, or that it already has.
func runnerWarnings(cfg *pool.Config, rs []runnerversion.Release, now time.Time) []string {
	var out []string
	for _, p := range cfg.Pools {
		if p.RunnerVersion == runnerversion.Latest {
			continue
		}
		v, err := runnerversion.Parse(p.RunnerVersion)
		if err != nil {
			continue // the schema has refused it already
		}
		f, err := runnerversion.Assess(v, rs, now)
		if err != nil {
			continue
		}
		day := f.Deadline.UTC().Format("2006-01-02")
		switch f.State(now) {
		case "alarm":
			out = append(out, fmt.Sprintf("pool %q: runnerVersion %s falls out of GitHub's window on %s (%d days from now): "+
				"GitHub stops dispatching jobs to a runner 30 days after a newer release (%s was published %s). "+
				"Pin %s with its runnerSha256, or use runnerVersion: latest",
				p.Name, v, day, int(f.Deadline.Sub(now).Hours()/24), nextAfter(v, rs), f.NextPublished.UTC().Format("2006-01-02"), f.Latest))
		case "expired":
			out = append(out, fmt.Sprintf("pool %q: runnerVersion %s is out of GitHub's window since %s: its runners get no jobs. "+
				"Pin %s with its runnerSha256, or use runnerVersion: latest", p.Name, v, day, f.Latest))
		}
	}
	return out
}

// nextAfter is the first release newer than v: the one that opened its window.
func nextAfter(v runnerversion.Version, rs []runnerversion.Release) runnerversion.Version {
	var next *runnerversion.Release
	for i, r := range rs {
		if r.Version.Compare(v) > 0 && (next == nil || r.PublishedAt.Before(next.PublishedAt)) {
			next = &rs[i]
		}
	}
	if next == nil {
		return v
	}
	return next.Version
}
