package process

import "time"

// WithoutCgroups makes p measure the runners it starts from now on
// without cgroups (through /proc and their rusage), for tests of that path.
func WithoutCgroups(p *Provider) { p.usage.cgroup = "" }

// CgroupParent is where p makes its runners' cgroups ("" for none).
func CgroupParent(p *Provider) string { return p.usage.cgroup }

// Group is the process group a runner's signals go to: its sandbox's
// init's, else its own process's (0 for an unknown id).
func Group(p *Provider, id string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pr := p.procs[id]; pr != nil {
		return pr.group
	}
	return 0
}

// WeakenSandbox rewrites the bwrap arguments of p's later runners, so
// that a test can plant a weakening and see it caught.
func WeakenSandbox(p *Provider, f func([]string) []string) { p.sandbox.weaken = f }

// WithoutSamples makes p sample its runners only as they end (its sampling
// loop ticks hourly), so that a test sees what the end alone measures: the
// rusage and the cgroup. Call it before p starts a runner.
func WithoutSamples(p *Provider) { p.usage.every = time.Hour }
