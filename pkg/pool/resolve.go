package pool

import (
	"fmt"
	"math/bits"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/skiffci/skiff/pkg/provider/ec2/ec2prices"
)

// Spec is what to launch for one job: the result of resolving its labels.
// It is the shared part, which every provider reads, plus the backend's own
// part (EC2, Slurm, Kubernetes or Process: the one of Backend is set), which
// only the matching provider reads. Slices, maps and the backend's part may
// be shared with the Config: treat them as read-only (copy a part before
// changing it).
type Spec struct {
	Shared
	// EC2 is the EC2 part, narrowed by the dynamic label: instance types or
	// requirements, capacity after spot=, root disk after disk=.
	EC2 *EC2
	// Slurm is the Slurm part; Slurm.Request maps it with Sizes.
	Slurm *Slurm
	// Kubernetes is the Kubernetes part; KubernetesResources maps it with Sizes.
	Kubernetes *Kubernetes
	// Process is the process part (local mode only).
	Process *Process
	// Container is the container part; Container.Limits maps it with Sizes.
	Container *Container
}

// Shared is the part of a launch spec every backend understands.
type Shared struct {
	// Pool is the chosen pool's name.
	Pool string
	// Backend is where the pool's runners run; its part of the Spec is set.
	Backend Backend
	// Architecture is x64 or arm64.
	Architecture string
	// RunnerGroup is the GitHub runner group to register in.
	RunnerGroup string
	// KeptGroup: RunnerGroup is skiff's own group for the pool (Pool.KeptGroup).
	KeptGroup bool
	// Workflows are the only workflows the kept group runs (none: any).
	Workflows []string
	// Labels are the labels to register the just-in-time runner with: the
	// job's labels (first spelling of each) plus the implied self-hosted,
	// linux and architecture labels. The dynamic label is among them, so a
	// job that asks for run=ID runs only on a runner launched for that run
	// (GitHub may still give this runner a job whose labels are a subset).
	Labels []string
	// RunID pins the runner to one workflow run (from run=), or "".
	RunID string
	// MaxRunners is the pool's limit of live runners.
	MaxRunners int
	// MaxLifetime is how long a runner of the pool may live.
	MaxLifetime time.Duration
	// QueueTimeout bounds a runner pending in its backend's own queue.
	QueueTimeout time.Duration
	// RunnerVersion and RunnerSHA256 are the pool's (Pool.RunnerVersion).
	RunnerVersion, RunnerSHA256 string
	// Dynamic is the parsed dynamic label, nil when the job had none.
	Dynamic *Label
	// Sizes are the neutral sizes the dynamic label asks for (zero
	// without one), already within the pool's bounds.
	Sizes Sizes
	// Policy is the pool's rule for who may run (see Policy.Admit).
	Policy Policy
	// Registration is how the runner registers: jit, or token when the pool
	// opted into organisation-wide registration tokens.
	Registration RegistrationMode
	// CostPerHour is the pool's cost of a runner-hour in USD off EC2, or 0.
	CostPerHour float64
	// Warm is the pool's warm capacity (EC2), nil when it keeps none.
	Warm *Warm
}

// labelIndex maps each lower-case effective label to the set of pools that
// carry it, as a bitset over pool positions.
type labelIndex struct {
	words  int
	labels map[string][]uint64
	order  []int // pool positions by ascending label count, then file order
}

func (c *Config) buildIndex() {
	n := len(c.Pools)
	c.index = labelIndex{words: (n + 63) / 64, labels: map[string][]uint64{}}
	c.byName = make(map[string]*Pool, n)
	for i, p := range c.Pools {
		c.byName[p.Name] = p
		for l := range p.effective {
			set := c.index.labels[l]
			if set == nil {
				set = make([]uint64, c.index.words)
				c.index.labels[l] = set
			}
			set[i/64] |= 1 << (i % 64)
		}
		c.index.order = append(c.index.order, i)
	}
	sort.SliceStable(c.index.order, func(a, b int) bool {
		return len(c.Pools[c.index.order[a]].effective) < len(c.Pools[c.index.order[b]].effective)
	})
}

// Resolve turns a job's runs-on labels into a launch spec, ignoring pool
// scopes. It is a pure function of the labels and the config.
//
// The rule: the dynamic label (skiff/...) is set aside; a pool matches when
// every other label of the job is one of the pool's labels or implied labels
// (self-hosted, linux, its architecture), compared case-insensitively. With
// pool=NAME only that pool can match. With dynamic sizes, a pool matches only
// if they are within its bounds. Of the matching pools the one with the
// fewest labels wins (the fewest labels the job did not ask for); a tie is
// ErrAmbiguous.
func (c *Config) Resolve(labels []string) (Spec, error) {
	return c.resolve(labels, "", false)
}

// ResolveRepo is Resolve for a job of repository ("owner/name"): pools whose
// scope does not admit the repository do not match.
func (c *Config) ResolveRepo(labels []string, repository string) (Spec, error) {
	return c.resolve(labels, repository, true)
}

// Route returns the name of the pool a job of repository ("owner/name") with
// these labels goes to, or a *ResolveError. It is what the webhook calls.
func (c *Config) Route(labels []string, repository string) (string, error) {
	p, _, _, err := c.match(labels, repository, true)
	if err != nil {
		return "", err
	}
	return p.Name, nil
}

func (c *Config) resolve(labels []string, repository string, scoped bool) (Spec, error) {
	p, dyn, f, err := c.match(labels, repository, scoped)
	if err != nil {
		return Spec{}, err
	}
	spec := p.spec(labels, dyn)
	if dyn != nil {
		spec.RunID = dyn.RunID
		spec.Sizes = dyn.sizes()
		if p.EC2 != nil && (f.types != nil || f.req != nil || f.capacity != p.EC2.Capacity || f.disk != p.EC2.DiskGiB) {
			e := *p.EC2
			if f.types != nil {
				e.InstanceTypes = f.types
			}
			if f.req != nil {
				e.Requirements = f.req
			}
			e.Capacity, e.DiskGiB = f.capacity, f.disk
			spec.EC2 = &e
		}
	}
	return spec, nil
}

// spec is the pool's launch spec for a job's labels and dynamic label,
// before the dynamic label narrows it.
func (p *Pool) spec(labels []string, dyn *Label) Spec {
	return Spec{
		Shared: Shared{
			Pool:          p.Name,
			Backend:       p.Backend,
			Architecture:  p.Architecture,
			RunnerGroup:   p.RunnerGroup,
			KeptGroup:     p.KeptGroup,
			Workflows:     p.Workflows,
			Labels:        registerLabels(labels, p.Architecture),
			MaxRunners:    p.MaxRunners,
			MaxLifetime:   p.MaxLifetime,
			QueueTimeout:  p.QueueTimeout,
			Dynamic:       dyn,
			Policy:        p.Policy,
			Registration:  p.Registration,
			CostPerHour:   p.CostPerHour,
			RunnerVersion: p.RunnerVersion,
			RunnerSHA256:  p.RunnerSHA256,
			Warm:          p.Warm,
		},
		EC2: p.EC2, Slurm: p.Slurm, Kubernetes: p.Kubernetes, Process: p.Process, Container: p.Container,
	}
}

// WarmSpec is the launch spec of the pool's warm machines: the pool's own,
// with no job's labels and no dynamic label. ok is false when the pool is
// unknown or keeps no warm capacity.
func (c *Config) WarmSpec(name string) (Spec, bool) {
	p := c.byName[name]
	if p == nil || p.Warm.Total() == 0 || p.EC2 == nil {
		return Spec{}, false
	}
	return p.spec(p.Labels, nil), true
}

// sizes are the smallest values the label admits, as neutral sizes.
func (l *Label) sizes() Sizes {
	var s Sizes
	if l.CPU != nil {
		s.VCPU = l.CPU.Lowest()
	}
	if l.RAM != nil {
		s.MemoryGiB = l.RAM.Lowest()
	}
	if l.GPU != nil {
		s.GPUs = l.GPU.Lowest()
	}
	s.DiskGiB = l.DiskGiB
	return s
}

// match finds the winning pool and its fit to the dynamic label: it narrows
// every pool to those carrying the job's labels, then to the pool the label
// pins, then to those whose scope admits the repository, and picks the one
// with the fewest labels among them.
func (c *Config) match(labels []string, repository string, scoped bool) (*Pool, *Label, fit, error) {
	if len(labels) == 0 {
		return nil, nil, fit{}, &ResolveError{Kind: ErrNoPool, Detail: "the job has no labels"}
	}
	var buf [4]uint64
	cand := c.everyPool(buf[:0])
	dynLabel, err := c.keepCarrying(cand, labels)
	if err != nil {
		return nil, nil, fit{}, err
	}
	var dyn *Label
	if dynLabel != "" {
		if dyn, err = ParseLabel(dynLabel); err != nil {
			return nil, nil, fit{}, err
		}
		if err := c.keepPinned(cand, dyn, dynLabel, labels); err != nil {
			return nil, nil, fit{}, err
		}
	}
	if scoped {
		if err := c.keepAdmitting(cand, repository); err != nil {
			return nil, nil, fit{}, err
		}
	}
	winner, f, err := c.pickFewest(cand, dyn, dynLabel)
	if err != nil {
		return nil, nil, fit{}, err
	}
	return winner, dyn, f, nil
}

// everyPool is the set of every pool's position, in buf when it is large
// enough.
func (c *Config) everyPool(buf []uint64) []uint64 {
	var cand []uint64
	if c.index.words <= cap(buf) {
		cand = buf[:c.index.words]
	} else {
		cand = make([]uint64, c.index.words)
	}
	for i := range cand {
		cand[i] = ^uint64(0)
	}
	if rem := len(c.Pools) % 64; rem != 0 {
		cand[len(cand)-1] = 1<<rem - 1
	}
	return cand
}

// keepCarrying keeps in cand the pools that carry every static label of the
// job, and returns the job's dynamic label ("" without one). A job with two
// dynamic labels, or with a label no pool has, is refused.
func (c *Config) keepCarrying(cand []uint64, labels []string) (string, error) {
	var dynLabel string
	for _, l := range labels {
		if IsDynamic(l) {
			if dynLabel != "" {
				return "", malformed(l, "", "", "a job may carry only one skiff/ label")
			}
			dynLabel = l
			continue
		}
		set, ok := c.index.labels[strings.ToLower(l)]
		if !ok {
			return "", &ResolveError{Kind: ErrNoPool, Detail: fmt.Sprintf("no pool has the label %q", l)}
		}
		for i := range cand {
			cand[i] &= set[i]
		}
	}
	if isEmpty(cand) {
		return "", &ResolveError{Kind: ErrNoPool,
			Detail: fmt.Sprintf("no pool has all of the labels %s", strings.Join(staticLabels(labels), ", "))}
	}
	return dynLabel, nil
}

// keepPinned keeps in cand only the pool that pool=NAME names, when the
// dynamic label names one; the pool must exist and carry the job's labels.
func (c *Config) keepPinned(cand []uint64, dyn *Label, dynLabel string, labels []string) error {
	if dyn.Pool == "" {
		return nil
	}
	p := c.byName[dyn.Pool]
	if p == nil {
		return &ResolveError{Kind: ErrNoPool, Label: dynLabel, Key: KeyPool, Value: dyn.Pool,
			Detail: "no pool has this name"}
	}
	if cand[p.index/64]&(1<<(p.index%64)) == 0 {
		return &ResolveError{Kind: ErrNoPool, Pool: p.Name,
			Detail: fmt.Sprintf("the pool does not carry all of the labels %s", strings.Join(staticLabels(labels), ", "))}
	}
	for i := range cand {
		cand[i] = 0
	}
	cand[p.index/64] = 1 << (p.index % 64)
	return nil
}

// keepAdmitting drops from cand the pools whose scope does not admit the
// repository; when none is left, the refusal names the pools dropped.
func (c *Config) keepAdmitting(cand []uint64, repository string) error {
	var refused []string
	for i, p := range c.Pools {
		if cand[i/64]&(1<<(i%64)) != 0 && !p.Scope.Admits(repository) {
			cand[i/64] &^= 1 << (i % 64)
			refused = append(refused, p.Name)
		}
	}
	if isEmpty(cand) {
		return &ResolveError{Kind: ErrRepositoryNotAllowed, Pools: refused,
			Detail: fmt.Sprintf("repository %q is outside the scope of every matching pool", repository)}
	}
	return nil
}

// pickFewest walks the candidates from the fewest labels up: the first that
// fits the dynamic label wins unless another of the same size fits too
// (ErrAmbiguous). When none fits, the most telling refusal is returned.
func (c *Config) pickFewest(cand []uint64, dyn *Label, dynLabel string) (*Pool, fit, error) {
	var (
		winner *Pool
		winFit fit
		tied   []string
		best   *ResolveError // the most telling refusal, if none fits
	)
	for _, i := range c.index.order {
		if cand[i/64]&(1<<(i%64)) == 0 {
			continue
		}
		p := c.Pools[i]
		if winner != nil && len(p.effective) > len(winner.effective) {
			break
		}
		f, err := p.fit(dyn, dynLabel)
		if err != nil {
			if best == nil || err.rank > best.rank {
				best = err
			}
			continue
		}
		if winner == nil {
			winner, winFit = p, f
			continue
		}
		if tied == nil {
			tied = []string{winner.Name}
		}
		tied = append(tied, p.Name)
	}
	if tied != nil {
		return nil, fit{}, &ResolveError{Kind: ErrAmbiguous, Pools: tied,
			Detail: "several pools match with equally few extra labels; add a label that tells them apart, or skiff/pool=NAME"}
	}
	if winner == nil {
		if best == nil {
			return nil, fit{}, &ResolveError{Kind: ErrNoPool, Detail: "no pool fits"}
		}
		return nil, fit{}, best
	}
	return winner, winFit, nil
}

func isEmpty(set []uint64) bool {
	n := 0
	for _, w := range set {
		n += bits.OnesCount64(w)
	}
	return n == 0
}

func staticLabels(labels []string) []string {
	out := make([]string, 0, len(labels))
	for _, l := range labels {
		if !IsDynamic(l) {
			out = append(out, l)
		}
	}
	return out
}

// registerLabels is the job's labels, deduplicated case-insensitively (first
// spelling kept), plus whichever implied labels the job did not name.
func registerLabels(labels []string, arch string) []string {
	out := make([]string, 0, len(labels)+3)
	add := func(l string) {
		for _, o := range out {
			if strings.EqualFold(o, l) {
				return
			}
		}
		out = append(out, l)
	}
	for _, l := range labels {
		add(l)
	}
	for _, l := range impliedLabels(arch) {
		add(l)
	}
	return out
}

// fit is a pool's answer to a dynamic label.
type fit struct {
	types    []string      // filtered instance types; nil: the pool's own
	req      *Requirements // narrowed requirements; nil: the pool's own
	capacity Capacity
	disk     int
}

// fit checks a dynamic label against the pool's bounds and narrows the
// pool's instance choice to it.
func (p *Pool) fit(d *Label, raw string) (fit, *ResolveError) {
	var f fit
	if p.EC2 != nil {
		f = fit{capacity: p.EC2.Capacity, disk: p.EC2.DiskGiB}
	}
	if d == nil || !d.Sizing() {
		return f, nil
	}
	r := refusal{pool: p, label: d, raw: raw}
	if err := p.checkSizes(d, r); err != nil {
		return f, err
	}
	if err := p.checkBackendKeys(d, r); err != nil {
		return f, err
	}
	if d.DiskGiB != 0 {
		disk, err := p.fitDisk(d, f.disk, r)
		if err != nil {
			return f, err
		}
		f.disk = disk
	}
	if p.EC2 == nil {
		return f, nil // the backend maps the sizes itself (Spec.Sizes)
	}
	return p.fitEC2(d, f, r)
}

// refusal builds a pool's out-of-bounds errors for one dynamic label.
type refusal struct {
	pool  *Pool
	label *Label
	raw   string
}

// oob refuses a value beyond the pool's bound.
func (r refusal) oob(key, bound string) *ResolveError {
	return r.refused(key, bound, 2)
}

// refused refuses a key, ranked by how much the refusal tells.
func (r refusal) refused(key, bound string, rank int) *ResolveError {
	return &ResolveError{Kind: ErrOutOfBounds, Label: r.raw, Pool: r.pool.Name, Key: key, Value: r.label.value(key), Bound: bound, rank: rank}
}

// checkSizes refuses sizes the pool does not take: any, without a dynamic:
// block; cpu=, ram= and gpu= above its limits or with no limit set.
func (p *Pool) checkSizes(d *Label, r refusal) *ResolveError {
	b := p.Dynamic
	if b == nil {
		why := "the pool takes no dynamic sizes (it has no dynamic: block)"
		if !p.Capabilities().DynamicSizes {
			why = fmt.Sprintf("pool %s runs on %s, which cannot size a runner", p.Name, p.Backend)
		}
		for _, k := range Keys[1:] {
			if k != KeyRun && d.value(k) != "" {
				return r.refused(k, why, 0)
			}
		}
	}
	check := func(key string, s Spans, limit int, name string) *ResolveError {
		switch {
		case s == nil:
			return nil
		case limit == 0:
			return r.refused(key, fmt.Sprintf("not allowed (dynamic.%s is unset)", name), 1)
		case s.Highest() > limit:
			return r.oob(key, fmt.Sprintf("%s %d", name, limit))
		}
		return nil
	}
	if err := check(KeyCPU, d.CPU, b.MaxCPU, "maxCpu"); err != nil {
		return err
	}
	if err := check(KeyRAM, d.RAM, b.MaxRAMGiB, "maxRamGiB"); err != nil {
		return err
	}
	return check(KeyGPU, d.GPU, b.MaxGPUs, "maxGpus")
}

// checkBackendKeys refuses family= off EC2 or outside the pool's families,
// and spot= on a backend without spot capacity.
func (p *Pool) checkBackendKeys(d *Label, r refusal) *ResolveError {
	if d.Families != nil && p.EC2 == nil {
		return r.refused(KeyFamily, fmt.Sprintf("instance families are EC2's; pool %s runs on %s", p.Name, p.Backend), 1)
	}
	if d.Spot != SpotUnset && !p.Capabilities().Spot {
		return r.refused(KeySpot, fmt.Sprintf("pool %s runs on %s, which has no spot capacity", p.Name, p.Backend), 1)
	}
	if d.Families != nil {
		allowed := p.allowedFamilies()
		for _, fam := range d.Families {
			if !slices.Contains(allowed, fam) {
				return r.oob(KeyFamily, "families "+strings.Join(allowed, "+"))
			}
		}
	}
	return nil
}

// fitDisk is the root disk for disk=, given the pool's own: disk= asks for
// at least that much, within dynamic.maxDiskGiB (and at least 8 GiB on EC2).
func (p *Pool) fitDisk(d *Label, own int, r refusal) (int, *ResolveError) {
	b := p.Dynamic
	switch {
	case b.MaxDiskGiB == 0:
		return own, r.refused(KeyDisk, "not allowed (dynamic.maxDiskGiB is unset)", 1)
	case d.DiskGiB > b.MaxDiskGiB:
		return own, r.oob(KeyDisk, fmt.Sprintf("maxDiskGiB %d", b.MaxDiskGiB))
	case d.DiskGiB < 8 && p.EC2 != nil:
		return own, r.oob(KeyDisk, "at least 8 GiB")
	}
	// The pool's own size fits its image, and a smaller volume than the
	// image's snapshot fails to launch.
	return max(d.DiskGiB, own), nil
}

// fitEC2 narrows an EC2 pool to the label: the capacity spot= asks for, and
// the instance types or requirements that satisfy its shape keys.
func (p *Pool) fitEC2(d *Label, f fit, r refusal) (fit, *ResolveError) {
	switch d.Spot {
	case SpotTrue:
		f.capacity = CapacitySpot
	case SpotFalse:
		if p.EC2.Capacity != CapacityOnDemand && !p.Dynamic.AllowOnDemand {
			return f, r.refused(KeySpot, "allowOnDemand is false", 1)
		}
		f.capacity = CapacityOnDemand
	}
	if d.CPU == nil && d.RAM == nil && d.GPU == nil && d.Families == nil {
		return f, nil
	}
	if p.EC2.Requirements != nil {
		req, err := p.narrow(d, r.oob)
		f.req = req
		return f, err
	}
	types := filterTypes(p.EC2.InstanceTypes, d, "")
	if len(types) == 0 {
		key, value := culprit(p.EC2.InstanceTypes, d)
		return f, &ResolveError{Kind: ErrOutOfBounds, Label: r.raw, Pool: p.Name, Key: key, Value: value,
			Bound: "the pool's instance types " + strings.Join(p.EC2.InstanceTypes, ", "), rank: 2}
	}
	f.types = types
	return f, nil
}

// filterTypes keeps the instance types that satisfy the label (only the key
// only, when only is not ""), ordered by family preference, then list order.
func filterTypes(types []string, d *Label, only string) []string {
	want := func(k string) bool { return only == "" || only == k }
	var out []string
	if want(KeyFamily) && d.Families != nil {
		for _, fam := range d.Families {
			for _, t := range types {
				if ec2prices.FamilyOf(t) == fam && shapeOK(t, d, want) {
					out = append(out, t)
				}
			}
		}
		return out
	}
	for _, t := range types {
		if shapeOK(t, d, want) {
			out = append(out, t)
		}
	}
	return out
}

func shapeOK(t string, d *Label, want func(string) bool) bool {
	cpu, ram, gpu := want(KeyCPU) && d.CPU != nil, want(KeyRAM) && d.RAM != nil, want(KeyGPU) && d.GPU != nil
	if !cpu && !ram && !gpu {
		return true
	}
	it := ec2prices.Prices.Lookup(t)
	if it == nil {
		return false
	}
	return (!cpu || d.CPU.Contains(it.VCPU)) && (!ram || d.RAM.Contains(it.MemoryGiB)) && (!gpu || d.GPU.Contains(it.GPUs))
}

// culprit names the key that alone empties the instance list, or all the
// shape keys when only their combination does.
func culprit(types []string, d *Label) (string, string) {
	var keys, values []string
	for _, k := range []string{KeyFamily, KeyCPU, KeyRAM, KeyGPU} {
		if d.value(k) == "" {
			continue
		}
		if len(filterTypes(types, d, k)) == 0 {
			return k, d.value(k)
		}
		keys, values = append(keys, k), append(values, d.value(k))
	}
	return strings.Join(keys, ","), strings.Join(values, ",")
}

// narrow intersects the pool's requirements with the label's sizes.
func (p *Pool) narrow(d *Label, oob func(key, bound string) *ResolveError) (*Requirements, *ResolveError) {
	r := *p.EC2.Requirements
	span := func(key string, s Spans, pool Range, name string) (Range, *ResolveError) {
		if s == nil {
			return pool, nil
		}
		lo, hi := max(s.Lowest(), pool.Min), s.Highest()
		if pool.Max != 0 {
			hi = min(hi, pool.Max)
		}
		if lo > hi {
			return pool, oob(key, "requirements."+name+" "+pool.String())
		}
		return Range{lo, hi}, nil
	}
	var err *ResolveError
	if r.VCPU, err = span(KeyCPU, d.CPU, r.VCPU, "vcpu"); err != nil {
		return nil, err
	}
	if r.MemoryGiB, err = span(KeyRAM, d.RAM, r.MemoryGiB, "memoryGiB"); err != nil {
		return nil, err
	}
	if d.GPU != nil {
		g := GPURequirements{}
		if r.GPU != nil {
			g = *r.GPU
		}
		if g.Count, err = span(KeyGPU, d.GPU, g.Count, "gpu.count"); err != nil {
			return nil, err
		}
		if g.Count.Min > 0 && !p.HasGPU() {
			return nil, oob(KeyGPU, "the pool's families have no GPUs")
		}
		r.GPU = &g
	}
	if d.Families != nil {
		r.Families = d.Families
	}
	return &r, nil
}
