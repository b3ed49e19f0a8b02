package process

// WithoutCgroups makes p measure the runners it starts from now on
// without cgroups (through /proc and their rusage), for tests of that path.
func WithoutCgroups(p *Provider) { p.usage.cgroup = "" }

// CgroupParent is where p makes its runners' cgroups ("" for none).
func CgroupParent(p *Provider) string { return p.usage.cgroup }
