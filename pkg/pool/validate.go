package pool

import (
	"fmt"
	"math/bits"
	"sort"
	"strings"
	"time"
)

// GPUImageSSM is the SSM public parameter of AWS's Deep Learning Base OSS
// NVIDIA driver GPU AMI (Amazon Linux 2023, x86_64), suggested in fixes.
const GPUImageSSM = "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-amazon-linux-2023/latest/ami-id"

// check runs the semantic checks that a JSON Schema cannot express.
func (s *source) check(cfg *Config) []Diagnostic {
	var diags []Diagnostic
	add := func(ptr string, sev Severity, msg, fix string) {
		diags = append(diags, s.diag(ptr, sev, msg, fix))
	}
	seen := map[string]int{}
	for i, p := range cfg.Pools {
		base := fmt.Sprintf("/pools/%d", i)
		if j, dup := seen[p.Name]; dup {
			add(base+"/name", SeverityError, fmt.Sprintf("pool name %q is already used by pools[%d]", p.Name, j),
				"give every pool a unique name")
		} else {
			seen[p.Name] = i
		}
		s.checkPool(i, p, add)
	}
	diags = append(diags, s.checkOverlaps(cfg)...)
	sortDiagnostics(diags)
	return diags
}

// field returns the pointer of a pool's key, or of the defaults key it
// inherited, so that a message points at the line that set the value.
func (s *source) field(i int, key string) string {
	ptr := fmt.Sprintf("/pools/%d/%s", i, key)
	if _, ok := s.find(ptr); ok {
		return ptr
	}
	if _, ok := s.find("/defaults/" + key); ok {
		return "/defaults/" + key
	}
	return ptr
}

type addFunc func(ptr string, sev Severity, msg, fix string)

func (s *source) checkPool(i int, p *Pool, add addFunc) {
	base := fmt.Sprintf("/pools/%d", i)
	if p.Image.AMI == "" && p.Image.SSM == "" && p.Image.Name == "" {
		add(base, SeverityError, fmt.Sprintf("pool %q has no image", p.Name),
			"set image: in the pool or in defaults, e.g. image: {ssm: /aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64}")
	}
	if len(p.Subnets) == 0 {
		add(base, SeverityError, fmt.Sprintf("pool %q has no subnets", p.Name),
			"set subnets: in the pool or in defaults (subnet ids, one per Availability Zone)")
	}
	if p.lifetime != "" {
		d, err := time.ParseDuration(p.lifetime)
		if err != nil || d <= 0 || d > MaxLifetimeLimit {
			add(s.field(i, "maxLifetime"), SeverityError,
				fmt.Sprintf("maxLifetime %q must be between 1m and %s", p.lifetime, "120h"),
				"GitHub ends self-hosted jobs after 5 days; use e.g. 6h")
		}
	}

	// Instance types: known families, matching architecture, priced.
	for j, t := range p.InstanceTypes {
		ptr := fmt.Sprintf("%s/instanceTypes/%d", base, j)
		s.checkFamily(ptr, familyOf(t), p, add, t)
		if fi, ok := families[familyOf(t)]; ok && fi.arch == p.Architecture && Prices.Lookup(t) == nil {
			add(ptr, SeverityWarning, fmt.Sprintf("%s is not in the embedded price table", t),
				"plan shows no price for it, and cpu=/ram=/gpu= in dynamic labels never select it")
		}
	}
	if r := p.Requirements; r != nil {
		rp := base + "/requirements"
		checkRange(rp+"/vcpu", "vcpu", r.VCPU, add)
		checkRange(rp+"/memoryGiB", "memoryGiB", r.MemoryGiB, add)
		if r.GPU != nil {
			checkRange(rp+"/gpu/count", "gpu.count", r.GPU.Count, add)
		}
		if len(r.Families) == 0 {
			add(rp, SeverityWarning, "requirements without families let EC2 choose any family",
				"add families: [...] to bound what the pool can cost")
		}
		anyGPU := false
		for j, f := range r.Families {
			s.checkFamily(fmt.Sprintf("%s/families/%d", rp, j), f, p, add, "")
			anyGPU = anyGPU || families[f].gpu
		}
		if r.GPU != nil && r.GPU.Count.Min > 0 && len(r.Families) > 0 && !anyGPU {
			add(rp+"/gpu/count", SeverityError,
				fmt.Sprintf("impossible bound: gpu.count.min is %d but none of the families %s has GPUs", r.GPU.Count.Min, strings.Join(r.Families, ", ")),
				"add GPU families ("+gpuFamiliesList()+") or drop gpu:")
		}
	}

	// The image must suit GPU pools and the architecture.
	if p.HasGPU() && p.Image.String() != "(none)" && !isGPUImage(p.Image) {
		add(s.field(i, "image"), SeverityError,
			fmt.Sprintf("pool %q launches GPU instances but its image %s is not known to carry GPU drivers", p.Name, p.Image),
			"use a GPU image such as image: {ssm: "+GPUImageSSM+"}, or set image.gpu: true if your AMI has the NVIDIA driver")
	}
	if wrong := imageArchMismatch(p.Image, p.Architecture); wrong != "" {
		add(s.field(i, "image"), SeverityError,
			fmt.Sprintf("image %s is for %s but the pool's architecture is %s", p.Image, wrong, p.Architecture),
			"use the image built for "+p.Architecture+" or change architecture:")
	}

	if p.Dynamic != nil {
		s.checkBounds(i, p, add)
	}
}

func checkRange(ptr, name string, r Range, add addFunc) {
	if r.Max != 0 && r.Min > r.Max {
		add(ptr, SeverityError, fmt.Sprintf("impossible bound: %s.min %d is above %s.max %d", name, r.Min, name, r.Max),
			"swap them or raise max")
	}
}

// checkFamily reports an unknown family, or one of the wrong architecture.
// what names the instance type when the family came from one.
func (s *source) checkFamily(ptr, family string, p *Pool, add addFunc, what string) {
	if what == "" {
		what = "family " + family
	}
	fi, ok := families[family]
	if !ok {
		fix := "check the spelling; skiff knows the EC2 families listed in pkg/pool/catalog.go"
		if near := nearest(family, sortedFamilies()); near != "" {
			fix = fmt.Sprintf("did you mean %q?", near)
		}
		add(ptr, SeverityError, fmt.Sprintf("unknown instance family %q", family), fix)
		return
	}
	if fi.arch != p.Architecture {
		add(ptr, SeverityError, fmt.Sprintf("%s is %s but pool %q is %s", what, fi.arch, p.Name, p.Architecture),
			fmt.Sprintf("set architecture: %s in a separate pool, or use %s types here", fi.arch, p.Architecture))
	}
}

func sortedFamilies() []string {
	out := make([]string, 0, len(families))
	for f := range families {
		out = append(out, f)
	}
	sort.Strings(out)
	return out
}

// checkBounds reports dynamic bounds that no job could ever satisfy.
func (s *source) checkBounds(i int, p *Pool, add addFunc) {
	dp := fmt.Sprintf("/pools/%d/dynamic", i)
	b := p.Dynamic
	own := map[string]bool{}
	for _, f := range p.families {
		own[f] = true
	}
	for j, f := range b.Families {
		ptr := fmt.Sprintf("%s/families/%d", dp, j)
		if _, ok := families[f]; !ok {
			s.checkFamily(ptr, f, p, add, "")
			continue
		}
		if len(own) > 0 && !own[f] {
			add(ptr, SeverityError,
				fmt.Sprintf("impossible bound: family %s is allowed for family= but pool %q cannot launch it", f, p.Name),
				"add its instance types (or the family under requirements.families), or remove it here")
		}
	}
	if b.MaxGPUs > 0 && !p.HasGPU() {
		add(dp+"/maxGpus", SeverityError,
			fmt.Sprintf("impossible bound: maxGpus is %d but pool %q launches no GPU instances", b.MaxGPUs, p.Name),
			"remove maxGpus, or add GPU instance types")
	}
	if b.MaxDiskGiB > 0 && b.MaxDiskGiB < p.DiskGiB {
		add(dp+"/maxDiskGiB", SeverityError,
			fmt.Sprintf("impossible bound: maxDiskGiB %d is below the pool's diskGiB %d", b.MaxDiskGiB, p.DiskGiB),
			"raise maxDiskGiB to at least diskGiB")
	}
	minCPU, minRAM := p.smallestShape()
	if b.MaxCPU > 0 && minCPU > 0 && b.MaxCPU < minCPU {
		add(dp+"/maxCpu", SeverityError,
			fmt.Sprintf("impossible bound: maxCpu %d is below the smallest instance of pool %q (%d vCPU)", b.MaxCPU, p.Name, minCPU),
			fmt.Sprintf("raise maxCpu to at least %d", minCPU))
	}
	if b.MaxRAMGiB > 0 && minRAM > 0 && b.MaxRAMGiB < minRAM {
		add(dp+"/maxRamGiB", SeverityError,
			fmt.Sprintf("impossible bound: maxRamGiB %d is below the smallest instance of pool %q (%d GiB)", b.MaxRAMGiB, p.Name, minRAM),
			fmt.Sprintf("raise maxRamGiB to at least %d", minRAM))
	}
	if b.AllowOnDemand && p.Capacity == CapacityOnDemand {
		add(dp+"/allowOnDemand", SeverityWarning,
			fmt.Sprintf("allowOnDemand has no effect: pool %q is already on-demand", p.Name), "remove it")
	}
}

// smallestShape is the fewest vCPUs and GiB any launch of the pool can have
// (0 when unknown).
func (p *Pool) smallestShape() (cpu, ram int) {
	if r := p.Requirements; r != nil {
		return r.VCPU.Min, r.MemoryGiB.Min
	}
	for _, t := range p.InstanceTypes {
		it := Prices.Lookup(t)
		if it == nil {
			return 0, 0
		}
		if cpu == 0 || it.VCPU < cpu {
			cpu = it.VCPU
		}
		if ram == 0 || it.MemoryGiB < ram {
			ram = it.MemoryGiB
		}
	}
	return cpu, ram
}

// isGPUImage reports whether an image declares or is recognisably a GPU image.
func isGPUImage(im Image) bool {
	if im.GPU {
		return true
	}
	ref := strings.ToLower(im.SSM + " " + im.Name)
	for _, w := range []string{"gpu", "nvidia", "deeplearning", "deep-learning", "cuda"} {
		if strings.Contains(ref, w) {
			return true
		}
	}
	return false
}

// imageArchMismatch returns the architecture an SSM path or name filter
// names when it is not arch, or "".
func imageArchMismatch(im Image, arch string) string {
	ref := strings.ToLower(im.SSM + " " + im.Name)
	hasX86 := strings.Contains(ref, "x86_64") || strings.Contains(ref, "amd64")
	hasArm := strings.Contains(ref, "arm64") || strings.Contains(ref, "aarch64")
	switch {
	case arch == "x64" && hasArm && !hasX86:
		return "arm64"
	case arch == "arm64" && hasX86 && !hasArm:
		return "x64"
	}
	return ""
}

// scopesOverlap reports whether some repository may use both scopes.
func scopesOverlap(a, b Scope) bool {
	if a.Empty() || b.Empty() {
		return true
	}
	for _, o := range a.Owners {
		for _, p := range b.Owners {
			if strings.EqualFold(o, p) {
				return true
			}
		}
	}
	for _, r := range a.Repositories {
		if b.Admits(r) {
			return true
		}
	}
	for _, r := range b.Repositories {
		if a.Admits(r) {
			return true
		}
	}
	return false
}

// checkOverlaps finds pools that some job would match equally well.
//
// Two pools with the same effective labels and overlapping scopes are an
// error: every job that matches one matches the other with as few extra
// labels. Two pools with equally many labels are ambiguous for the job that
// asks for exactly their common labels, unless a pool with fewer labels
// also matches it; that is a warning, since such a job may never run. (When
// the common labels are only implied ones, the warning is left out: without
// a default pool, refusing a job that names no pool's label is intended.)
func (s *source) checkOverlaps(cfg *Config) []Diagnostic {
	var diags []Diagnostic
	n := len(cfg.Pools)
	// Label sets as bitsets over the labels used, so that the pairwise
	// checks do not allocate.
	ids := map[string]int{}
	for _, p := range cfg.Pools {
		for l := range p.effective {
			if _, ok := ids[l]; !ok {
				ids[l] = len(ids)
			}
		}
	}
	words := (len(ids) + 63) / 64
	sets := make([]uint64, n*words)
	set := func(i int) []uint64 { return sets[i*words : (i+1)*words] }
	for i, p := range cfg.Pools {
		for l := range p.effective {
			set(i)[ids[l]/64] |= 1 << (ids[l] % 64)
		}
	}
	custom := make([]uint64, words) // every label but the implied ones
	for l, id := range ids {
		if !onlyImplied([]string{l}) {
			custom[id/64] |= 1 << (id % 64)
		}
	}
	// Pools by ascending label count, for the cover search.
	bySize := make([]int, n)
	for i := range bySize {
		bySize[i] = i
	}
	sort.SliceStable(bySize, func(a, b int) bool { return len(cfg.Pools[bySize[a]].effective) < len(cfg.Pools[bySize[b]].effective) })
	common := make([]uint64, words)
	warned := map[string]bool{}
	for i := 0; i < n; i++ {
		a := cfg.Pools[i]
		for j := i + 1; j < n; j++ {
			b := cfg.Pools[j]
			if len(a.effective) != len(b.effective) || !scopesOverlap(a.Scope, b.Scope) {
				continue
			}
			size, hasCustom := 0, false
			for w := range common {
				common[w] = set(i)[w] & set(j)[w]
				size += bits.OnesCount64(common[w])
				hasCustom = hasCustom || common[w]&custom[w] != 0
			}
			if size == len(a.effective) {
				diags = append(diags, s.diag(fmt.Sprintf("/pools/%d/labels", j), SeverityError,
					fmt.Sprintf("pools %q and %q have the same labels [%s]: every job matching one would be ambiguous", a.Name, b.Name, strings.Join(sortedKeys(a.effective), ", ")),
					"add a label that tells them apart, or scope them to different repositories"))
				continue
			}
			if !hasCustom {
				continue
			}
			covered := false
			for _, k := range bySize {
				c := cfg.Pools[k]
				if len(c.effective) >= len(a.effective) {
					break
				}
				if isSubset(common, set(k)) && scopesOverlap(c.Scope, a.Scope) && scopesOverlap(c.Scope, b.Scope) {
					covered = true
					break
				}
			}
			if covered {
				continue
			}
			labels := intersect(a.effective, b.effective)
			key := strings.Join(labels, ",")
			if !warned[key] {
				warned[key] = true
				diags = append(diags, s.diag(fmt.Sprintf("/pools/%d/labels", j), SeverityWarning,
					fmt.Sprintf("a job with runs-on: [%s] matches pools %q and %q equally well and would not be launched (ambiguous)", strings.Join(labels, ", "), a.Name, b.Name),
					"add a pool whose labels are just those (a default pool), or accept that such jobs are refused"))
			}
		}
	}
	return diags
}

func isSubset(a, b []uint64) bool {
	for w := range a {
		if a[w]&^b[w] != 0 {
			return false
		}
	}
	return true
}

func intersect(a, b map[string]bool) []string {
	var out []string
	for k := range a {
		if b[k] {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// onlyImplied reports whether every label is self-hosted, linux or an architecture.
func onlyImplied(labels []string) bool {
	for _, l := range labels {
		switch l {
		case "self-hosted", "linux", "x64", "arm64":
		default:
			return false
		}
	}
	return true
}
