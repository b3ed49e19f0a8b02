package pool

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/skiffci/skiff/pkg/provider/ec2/ec2prices"
	"github.com/skiffci/skiff/pkg/runnerversion"
)

// Capacity is a pool's purchase option.
type Capacity string

// The capacity policies a pool can have.
const (
	// CapacitySpot launches spot instances only.
	CapacitySpot Capacity = "spot"
	// CapacityOnDemand launches on-demand instances only.
	CapacityOnDemand Capacity = "on-demand"
	// CapacitySpotThenOnDemand tries spot and falls back to on-demand.
	CapacitySpotThenOnDemand Capacity = "spot-then-on-demand"
)

// Defaults for fields a pool and the defaults block both leave unset. Each
// says why it has its value.
const (
	// DefaultRunnerGroup is the runner group every GitHub organisation has.
	DefaultRunnerGroup = "Default"
	// KeptGroupPrefix starts the name of the runner group skiff keeps for a
	// pool that names none: skiff-NAME. skiff creates and changes only the
	// groups so named, and only for its pools.
	KeptGroupPrefix = "skiff-"
	// DefaultArchitecture: most CI images and actions are built for x64.
	DefaultArchitecture = "x64"
	// DefaultDiskGiB fits a runner image plus a typical checkout and build cache.
	DefaultDiskGiB = 30
	// DefaultCapacity: spot is the cheap default, the fallback keeps jobs from waiting.
	DefaultCapacity = CapacitySpotThenOnDemand
	// DefaultMaxRunners bounds a misconfigured pool's bill until the operator sets it.
	DefaultMaxRunners = 10
	// DefaultMaxLifetime matches the job time limit of GitHub-hosted runners.
	DefaultMaxLifetime = 6 * time.Hour
	// MaxLifetimeLimit is GitHub's execution limit for a self-hosted job (5 days).
	MaxLifetimeLimit = 120 * time.Hour
	// DefaultIdleTimeout is the field reports' known-good value: an instance
	// whose runner got no job within about 10 minutes (its job was cancelled,
	// or another runner took it) is reaped, and long enough that a job queued
	// behind a busy pool still finds the runner.
	DefaultIdleTimeout = 10 * time.Minute
	// DefaultBootTimeout covers the slowest boot path measured (an encrypted
	// root, a runner download, a 3-minute registration wait) twice over.
	DefaultBootTimeout = 10 * time.Minute
	// DefaultQueueTimeout bounds a runner pending in its backend's own
	// queue (Slurm, Kubernetes): long enough for a busy cluster's queue to
	// move, short enough that a job does not wait silently for hours; the
	// job is launched again after it (bounded by the replacements).
	DefaultQueueTimeout = time.Hour
	// DefaultWaitAlarm is when a pool's oldest job in the waiting room
	// raises the pool's alarm: a freed slot starts the next waiting job at
	// once, so a job waiting half an hour means the pool is too small for
	// its load or its capacity is gone.
	DefaultWaitAlarm = 30 * time.Minute
	// MaxWaitAlarm is GitHub's limit for a queued job (24 h): a job leaves
	// the waiting room then, so a later threshold could never be passed.
	MaxWaitAlarm = 24 * time.Hour
)

// Config is a decoded pools file (package poolfile loads and checks one). It
// is immutable after Decode and
// safe for concurrent use.
type Config struct {
	// File is the name the config was loaded from, used in messages.
	File string
	// Version is the file format version (1).
	Version int
	// Pools are the pools in file order.
	Pools []*Pool
	// Warnings are the semantic findings that do not stop the config from loading.
	Warnings []Diagnostic

	byName map[string]*Pool
	index  labelIndex
}

// Pool is one pool of runners, with the file's defaults applied. The
// shared settings are its fields; what only its backend understands is in
// the one section of its Backend (EC2, Slurm, Kubernetes or Process), the
// others nil.
type Pool struct {
	Name   string
	Labels []string
	Scope  Scope
	// RunnerGroup is the runner group the pool's runners join: the
	// operator's when the pool names one, else skiff's own (KeptGroup).
	RunnerGroup string
	// KeptGroup: the pool named no runner group, and its runners join
	// skiff-NAME, which skiff creates and keeps (package groups).
	KeptGroup bool
	// Workflows, when set, are the only workflows the kept group runs
	// (GitHub's selected_workflows): owner/repo/.github/workflows/FILE@REF.
	Workflows    []string
	Architecture string
	MaxRunners   int
	MaxLifetime  time.Duration
	// IdleTimeout is how long a registered runner may wait for a job before
	// scale-down reaps it (and the instance powers itself off).
	IdleTimeout time.Duration
	// BootTimeout is how long an instance may take to register its runner
	// before scale-down terminates it and launches again for its job.
	BootTimeout time.Duration
	// QueueTimeout is how long a runner may wait in its backend's own queue
	// (Slurm pending, an unschedulable Pod) before scale-down cancels it and
	// launches again for its job; the boot timeout starts when it leaves
	// the queue.
	QueueTimeout time.Duration
	// WaitAlarm is how long the pool's oldest job may wait in the waiting
	// room before the deployment's alarm for the pool fires.
	WaitAlarm time.Duration
	// CostPerHour is the operator's cost of one runner-hour in USD
	// (amortised hardware and power) for a pool off EC2; 0 when unknown.
	// EC2 pools are priced by their instance types and refuse it.
	CostPerHour float64
	Dynamic     *Bounds
	// Policy is who may run on the pool: repository visibilities and pull
	// requests from forks (see Policy.Admit).
	Policy Policy
	// Registration is how the pool's runners register: JIT (default) or,
	// opted into, an organisation-wide registration token.
	Registration RegistrationMode
	// RunnerVersion is the runner a boot downloads when its image holds
	// none: runnerversion.Latest (default), resolved by the control plane
	// once a day, or a pinned version with its RunnerSHA256.
	RunnerVersion string
	RunnerSHA256  string
	// Jobs is where the pool learns of its queued jobs: the webhook
	// (default) or, in skiff local, a runner scale set's listener.
	Jobs JobSource
	// Warm is the pool's warm capacity (EC2 only), nil when it keeps none.
	Warm *Warm

	// Backend is where the pool's runners run; its section is set.
	Backend    Backend
	EC2        *EC2
	Slurm      *Slurm
	Kubernetes *Kubernetes
	Process    *Process
	Container  *Container

	// Line is where the pool starts in the file.
	Line int

	lifetime  string          // maxLifetime as written
	idle      string          // idleTimeout as written
	boot      string          // bootTimeout as written
	queue     string          // queueTimeout as written
	waitAlarm string          // waitAlarm as written
	flat      bool            // EC2 settings written at the pool's top (the older form)
	topEC2    []string        // the EC2 keys written at the pool's top
	index     int             // position in Config.Pools
	effective map[string]bool // lower-case labels including the implied ones
	families  []string        // families the pool can launch, in preference order
}

// Scope limits which repositories may use a pool. An empty scope admits all.
type Scope struct {
	Owners       []string
	Repositories []string
}

// Empty reports whether the scope admits every repository.
func (s Scope) Empty() bool { return len(s.Owners) == 0 && len(s.Repositories) == 0 }

// Admits reports whether repository ("owner/name") may use a pool with this scope.
func (s Scope) Admits(repository string) bool {
	if s.Empty() {
		return true
	}
	owner, _, ok := strings.Cut(repository, "/")
	if !ok {
		return false
	}
	for _, o := range s.Owners {
		if strings.EqualFold(o, owner) {
			return true
		}
	}
	for _, r := range s.Repositories {
		if strings.EqualFold(r, repository) {
			return true
		}
	}
	return false
}

// Range is an inclusive integer range. Max 0 means no upper bound.
type Range struct {
	Min int
	Max int
}

// Contains reports whether v lies in the range.
func (r Range) Contains(v int) bool { return v >= r.Min && (r.Max == 0 || v <= r.Max) }

// String renders the range as "4-32", "4+" or "8".
func (r Range) String() string {
	switch {
	case r.Max == 0:
		return fmt.Sprintf("%d+", r.Min)
	case r.Min == r.Max:
		return fmt.Sprint(r.Min)
	default:
		return fmt.Sprintf("%d-%d", r.Min, r.Max)
	}
}

// Requirements select instance types by attributes (EC2 attribute-based
// instance type selection) instead of a fixed list.
type Requirements struct {
	VCPU      Range
	MemoryGiB Range
	GPU       *GPURequirements
	Families  []string
}

// GPURequirements narrow attribute-based selection to instances with GPUs.
type GPURequirements struct {
	Count        Range
	Manufacturer string
	Models       []string
}

// Image names the machine image: exactly one of AMI, SSM or Name is set.
type Image struct {
	AMI    string
	SSM    string
	Name   string
	Owners []string
	GPU    bool
	// Bake: the deployment builds the pool's image from this one (EC2
	// Image Builder) and the pool launches the baked image, read from
	// names.BakedImageParameter.
	Bake bool
}

// String renders the image for humans: "ami-0abc", "ssm:/aws/...", "name:foo-* (owners: self)",
// with " (baked)" for an image the deployment bakes from it.
func (im Image) String() string {
	if im.Bake {
		base := im
		base.Bake = false
		return base.String() + " (baked)"
	}
	switch {
	case im.AMI != "":
		return im.AMI
	case im.SSM != "":
		return "ssm:" + im.SSM
	case im.Name != "":
		owners := im.Owners
		if len(owners) == 0 {
			owners = []string{"self"}
		}
		return fmt.Sprintf("name:%s (owners: %s)", im.Name, strings.Join(owners, ", "))
	}
	return "(none)"
}

// Bounds are a pool's limits on the dynamic label. A zero bound refuses its key.
type Bounds struct {
	MaxCPU        int
	MaxRAMGiB     int
	MaxGPUs       int
	MaxDiskGiB    int
	Families      []string
	AllowOnDemand bool
}

// Pool returns the pool with the given name (case-insensitive), or nil.
func (c *Config) Pool(name string) *Pool { return c.byName[strings.ToLower(name)] }

// Decode turns a schema-valid pools document (the file's YAML as JSON
// values: maps, lists, strings, int64, float64, bool) into a Config with the
// defaults applied, ready for resolution. lines[i] is the line pools[i]
// starts on, for messages. The schema has already guaranteed every type, so
// decoding reads the values directly; the checks the schema cannot express
// are package poolfile's, which loads files.
func Decode(doc any, lines []int) *Config {
	root, _ := doc.(map[string]any)
	defaults, _ := root["defaults"].(map[string]any)
	pools, _ := root["pools"].([]any)
	cfg := &Config{Version: 1, Pools: make([]*Pool, 0, len(pools))}
	// The defaults' EC2 settings, written at their top or under ec2: (the
	// checks refuse both at once).
	defaultsEC2 := merged(flatEC2(defaults), sectionOf(defaults, BackendEC2))
	for i, raw := range pools {
		m, _ := raw.(map[string]any)
		p := decodeShared(i, m, defaults)
		if i < len(lines) {
			p.Line = lines[i]
		}
		decodeBackend(p, m, defaults, defaultsEC2)
		applyPoolDefaults(p)
		cfg.Pools = append(cfg.Pools, p)
	}
	cfg.buildIndex()
	return cfg
}

// decodeShared reads the settings every backend shares of pool i (its
// mapping m, over the defaults).
func decodeShared(i int, m, defaults map[string]any) *Pool {
	get := func(key string) any {
		if v, ok := m[key]; ok {
			return v
		}
		return defaults[key]
	}
	p := &Pool{
		Name:          str(get("name")),
		Labels:        strs(get("labels")),
		RunnerGroup:   str(get("runnerGroup")),
		Workflows:     strs(get("workflows")),
		Architecture:  str(get("architecture")),
		MaxRunners:    num(get("maxRunners")),
		CostPerHour:   float(m["costPerHour"]),
		Warm:          decodeWarm(m["warm"]),
		lifetime:      str(get("maxLifetime")),
		idle:          str(get("idleTimeout")),
		boot:          str(get("bootTimeout")),
		queue:         str(get("queueTimeout")),
		waitAlarm:     str(get("waitAlarm")),
		RunnerVersion: str(get("runnerVersion")),
		RunnerSHA256:  str(get("runnerSha256")),
		index:         i,
	}
	if sc, ok := get("scope").(map[string]any); ok {
		p.Scope = Scope{Owners: strs(sc["owners"]), Repositories: strs(sc["repositories"])}
	}
	for _, v := range strs(get("visibility")) {
		p.Policy.Visibilities = append(p.Policy.Visibilities, Visibility(v))
	}
	p.Policy.ForkPullRequests = ForkPolicy(str(get("forkPullRequests")))
	p.Registration = RegistrationMode(str(get("registration")))
	p.Jobs = JobSource(str(get("jobs")))
	if d, ok := get("dynamic").(map[string]any); ok {
		p.Dynamic = &Bounds{MaxCPU: num(d["maxCpu"]), MaxRAMGiB: num(d["maxRamGiB"]), MaxGPUs: num(d["maxGpus"]),
			MaxDiskGiB: num(d["maxDiskGiB"]), Families: strs(d["families"]), AllowOnDemand: d["allowOnDemand"] == true}
	}
	return p
}

// decodeBackend sets the pool's backend (EC2 when its mapping m names none)
// and reads that backend's part, over the defaults'.
func decodeBackend(p *Pool, m, defaults, defaultsEC2 map[string]any) {
	p.Backend, _ = backendOf(m)
	if p.Backend == "" {
		p.Backend, p.flat = BackendEC2, true
	}
	section := func(b Backend) map[string]any {
		return merged(sectionOf(defaults, b), sectionOf(m, b))
	}
	for _, k := range EC2Keys {
		if _, ok := m[k]; ok {
			p.topEC2 = append(p.topEC2, k)
		}
	}
	switch p.Backend {
	case BackendEC2:
		// The pool's EC2 settings over the defaults'.
		own := sectionOf(m, BackendEC2)
		p.EC2 = decodeEC2(func(k string) any {
			if v, ok := own[k]; ok {
				return v
			}
			if v, ok := m[k]; ok {
				return v
			}
			return defaultsEC2[k]
		})
	case BackendSlurm:
		p.Slurm = decodeSlurm(section(BackendSlurm))
	case BackendKubernetes:
		p.Kubernetes = decodeKubernetes(section(BackendKubernetes))
	case BackendProcess:
		p.Process = &Process{Sandbox: str(section(BackendProcess)["sandbox"])}
	case BackendContainer:
		p.Container = decodeContainer(section(BackendContainer))
	}
}

// sectionOf returns a mapping's section of backend b, or nil.
func sectionOf(m map[string]any, b Backend) map[string]any {
	sec, _ := m[string(b)].(map[string]any)
	return sec
}

// flatEC2 returns the EC2 settings a mapping writes at its top (the older form).
func flatEC2(m map[string]any) map[string]any {
	var out map[string]any
	for _, k := range EC2Keys {
		if v, ok := m[k]; ok {
			if out == nil {
				out = map[string]any{}
			}
			out[k] = v
		}
	}
	return out
}

// merged lays the mappings over each other key by key, later ones winning.
func merged(levels ...map[string]any) map[string]any {
	out := map[string]any{}
	for _, l := range levels {
		for k, v := range l {
			out[k] = v
		}
	}
	return out
}

func decodeEC2(get func(key string) any) *EC2 {
	e := &EC2{
		InstanceTypes: strs(get("instanceTypes")),
		DiskGiB:       num(get("diskGiB")),
		Subnets:       strs(get("subnets")),
		Capacity:      Capacity(str(get("capacity"))),
	}
	if im, ok := get("image").(map[string]any); ok {
		e.Image = Image{AMI: str(im["ami"]), SSM: str(im["ssm"]), Name: str(im["name"]),
			Owners: strs(im["owners"]), GPU: im["gpu"] == true, Bake: im["bake"] == true}
	}
	if r, ok := get("requirements").(map[string]any); ok {
		e.Requirements = &Requirements{VCPU: rng(r["vcpu"]), MemoryGiB: rng(r["memoryGiB"]), Families: strs(r["families"])}
		if g, ok := r["gpu"].(map[string]any); ok {
			e.Requirements.GPU = &GPURequirements{Count: rng(g["count"]), Manufacturer: str(g["manufacturer"]), Models: strs(g["models"])}
		}
	}
	if tags, ok := get("tags").(map[string]any); ok {
		e.Tags = make(map[string]string, len(tags))
		for k, t := range tags {
			e.Tags[k] = str(t)
		}
	}
	if e.DiskGiB == 0 {
		e.DiskGiB = DefaultDiskGiB
	}
	if e.Capacity == "" {
		e.Capacity = DefaultCapacity
	}
	return e
}

func decodeSlurm(v map[string]any) *Slurm {
	sl := &Slurm{
		Partition: str(v["partition"]), Account: str(v["account"]), QOS: str(v["qos"]),
		Reservation: str(v["reservation"]), Constraint: str(v["constraint"]), Gres: str(v["gres"]),
		CPUsPerTask: num(v["cpusPerTask"]), Exclusive: v["exclusive"] == true,
		RunnerDir: str(v["runnerDir"]), WorkDir: str(v["workDir"]), ExtraOptions: strs(v["extraOptions"]),
	}
	sl.MemoryMiB, _ = parseSlurmMemory(str(v["memory"]))
	sl.RunAs = strs(v["runAs"])
	sl.RunAsShared = str(v["runAs"]) == RunAsSharedValue
	return sl
}

func decodeKubernetes(v map[string]any) *Kubernetes {
	k := &Kubernetes{
		Namespace: str(v["namespace"]), Image: str(v["image"]),
		Requests: resources(v["requests"]), Limits: resources(v["limits"]),
		RuntimeClassName: str(v["runtimeClassName"]), PriorityClassName: str(v["priorityClassName"]),
		ServiceAccountName:           str(v["serviceAccountName"]),
		AutomountServiceAccountToken: v["automountServiceAccountToken"] == true,
		APIServerAccess:              v["apiServerAccess"] == true,
		SecurityContext:              SecurityContext{RunAsNonRoot: true},
	}
	if g, ok := v["gpu"].(map[string]any); ok {
		k.GPU = &KubernetesGPU{Resource: str(g["resource"]), Count: num(g["count"])}
		if k.GPU.Resource == "" {
			k.GPU.Resource = DefaultGPUResource
		}
	}
	if ns, ok := v["nodeSelector"].(map[string]any); ok {
		k.NodeSelector = make(map[string]string, len(ns))
		for key, val := range ns {
			k.NodeSelector[key] = str(val)
		}
	}
	for _, raw := range asList(v["tolerations"]) {
		t, _ := raw.(map[string]any)
		tol := Toleration{Key: str(t["key"]), Operator: str(t["operator"]), Value: str(t["value"]), Effect: str(t["effect"])}
		if tol.Operator == "" {
			tol.Operator = "Equal"
		}
		if sec, ok := t["tolerationSeconds"]; ok {
			n := int64(num(sec))
			tol.Seconds = &n
		}
		k.Tolerations = append(k.Tolerations, tol)
	}
	if sc, ok := v["securityContext"].(map[string]any); ok {
		id := func(key string) *int64 {
			if x, ok := sc[key]; ok {
				n := int64(num(x))
				return &n
			}
			return nil
		}
		k.SecurityContext.RunAsUser, k.SecurityContext.RunAsGroup, k.SecurityContext.FSGroup = id("runAsUser"), id("runAsGroup"), id("fsGroup")
		if b, ok := sc["runAsNonRoot"].(bool); ok {
			k.SecurityContext.RunAsNonRoot = b
		}
		k.SecurityContext.Privileged = sc["privileged"] == true
	}
	return k
}

func resources(v any) Resources {
	m, _ := v.(map[string]any)
	return Resources{CPU: quantity(m["cpu"]), Memory: quantity(m["memory"]), EphemeralStorage: quantity(m["ephemeralStorage"])}
}

// quantity reads a quantity written as a string or, for cpu, a number.
func quantity(v any) string {
	switch q := v.(type) {
	case string:
		return q
	case int64:
		return strconv.FormatInt(q, 10)
	case float64:
		return strconv.FormatFloat(q, 'f', -1, 64)
	}
	return ""
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

// float reads a number the schema has checked.
func float(v any) float64 {
	switch n := v.(type) {
	case int64:
		return float64(n)
	case float64:
		return n
	}
	return 0
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

func strs(v any) []string {
	arr, ok := v.([]any)
	if !ok {
		return nil
	}
	out := make([]string, len(arr))
	for i, x := range arr {
		out[i] = str(x)
	}
	return out
}

// num reads an integer the schema has checked; YAML gives int64, or float64
// for a whole number written as 4.0.
func num(v any) int {
	return int(float(v))
}

func rng(v any) Range {
	m, _ := v.(map[string]any)
	return Range{Min: num(m["min"]), Max: num(m["max"])}
}

func applyPoolDefaults(p *Pool) {
	if p.RunnerGroup == "" {
		p.RunnerGroup, p.KeptGroup = KeptGroupPrefix+p.Name, true
	}
	if p.Architecture == "" {
		p.Architecture = DefaultArchitecture
	}
	if p.MaxRunners == 0 {
		p.MaxRunners = DefaultMaxRunners
	}
	if len(p.Policy.Visibilities) == 0 {
		p.Policy.Visibilities = DefaultVisibilities
	}
	if p.Policy.ForkPullRequests == "" {
		p.Policy.ForkPullRequests = DefaultForkPullRequests
	}
	if p.Registration == "" {
		p.Registration = DefaultRegistration
	}
	if p.Jobs == "" {
		p.Jobs = JobsWebhook
	}
	p.MaxLifetime = DefaultMaxLifetime
	if p.lifetime != "" {
		if d, err := time.ParseDuration(p.lifetime); err == nil {
			p.MaxLifetime = d
		}
	}
	p.IdleTimeout, p.BootTimeout, p.QueueTimeout = DefaultIdleTimeout, DefaultBootTimeout, DefaultQueueTimeout
	if d, err := time.ParseDuration(p.idle); err == nil && d > 0 {
		p.IdleTimeout = d
	}
	if d, err := time.ParseDuration(p.boot); err == nil && d > 0 {
		p.BootTimeout = d
	}
	if d, err := time.ParseDuration(p.queue); err == nil && d > 0 {
		p.QueueTimeout = d
	}
	if p.RunnerVersion == "" {
		p.RunnerVersion = runnerversion.Latest
	}
	p.WaitAlarm = DefaultWaitAlarm
	if d, err := time.ParseDuration(p.waitAlarm); err == nil && d > 0 {
		p.WaitAlarm = d
	}
	p.effective = make(map[string]bool, len(p.Labels)+3)
	for _, l := range p.Labels {
		p.effective[strings.ToLower(l)] = true
	}
	for _, l := range impliedLabels(p.Architecture) {
		p.effective[l] = true
	}
	p.families = poolFamilies(p)
}

// impliedLabels are the labels every skiff runner carries without the
// operator listing them, as GitHub gives every self-hosted runner.
func impliedLabels(arch string) [3]string { return [3]string{"self-hosted", "linux", arch} }

// poolFamilies lists the EC2 families a pool can launch, in preference
// order (none for a pool off EC2).
func poolFamilies(p *Pool) []string {
	if p.EC2 == nil {
		return nil
	}
	if p.EC2.Requirements != nil {
		return p.EC2.Requirements.Families
	}
	out := make([]string, 0, len(p.EC2.InstanceTypes))
	for _, t := range p.EC2.InstanceTypes {
		if f := ec2prices.FamilyOf(t); !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out
}

// allowedFamilies are the families family= may name for this pool.
func (p *Pool) allowedFamilies() []string {
	if p.Dynamic != nil && len(p.Dynamic.Families) > 0 {
		return p.Dynamic.Families
	}
	return p.families
}

// Effective returns the pool's labels plus the implied ones, lower-case, as
// a set. Read only.
func (p *Pool) Effective() map[string]bool { return p.effective }

// Families returns the EC2 families the pool can launch, in preference
// order (none for a pool off EC2). Read only.
func (p *Pool) Families() []string { return p.families }

// EffectiveLabels returns the pool's labels plus the implied ones, lower-case and sorted.
func (p *Pool) EffectiveLabels() []string { return slices.Sorted(maps.Keys(p.effective)) }

// HasGPU reports whether the pool's runners get GPUs without asking: GPU
// instance types or requirements on EC2, a gpu gres on Slurm, a GPU
// resource on Kubernetes.
func (p *Pool) HasGPU() bool {
	switch {
	case p.EC2 != nil:
		if r := p.EC2.Requirements; r != nil && r.GPU != nil && r.GPU.Count.Min > 0 {
			return true
		}
		for _, f := range p.families {
			if ec2prices.Families[f].GPU {
				return true
			}
		}
	case p.Slurm != nil:
		return slurmGPUs(p.Slurm.Gres) > 0
	case p.Kubernetes != nil:
		return p.Kubernetes.GPU != nil && p.Kubernetes.GPU.Count > 0
	}
	return false
}

// Sectioned reports whether the pool names its backend with a section
// (ec2:, slurm:, ...) rather than writing EC2 settings at its top.
func (p *Pool) Sectioned() bool { return !p.flat }

// Capabilities returns what the pool's backend can do (Declared).
func (p *Pool) Capabilities() Capabilities { return Declared[p.Backend] }
