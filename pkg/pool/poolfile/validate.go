package poolfile

import (
	"encoding/binary"
	"fmt"
	"maps"
	"math/bits"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provider/ec2/ec2prices"
	"github.com/skiffci/skiff/pkg/runnerversion"
)

// GPUImageSSM is the SSM public parameter of AWS's Deep Learning Base OSS
// NVIDIA driver GPU AMI (Amazon Linux 2023, x86_64), suggested in fixes.
const GPUImageSSM = "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-amazon-linux-2023/latest/ami-id"

// check runs the semantic checks that a JSON Schema cannot express.
func (s *source) check(cfg *pool.Config) []pool.Diagnostic {
	var diags []pool.Diagnostic
	add := func(ptr string, sev pool.Severity, msg, fix string) {
		diags = append(diags, s.diag(ptr, sev, msg, fix))
	}
	for _, k := range pool.EC2Keys {
		if _, ok := s.find("/defaults/" + k); !ok {
			continue
		}
		if _, ok := s.find("/defaults/ec2/" + k); ok {
			add("/defaults/"+k, pool.SeverityError, fmt.Sprintf("defaults set %s both at their top and under ec2:", k),
				"keep the one under defaults.ec2")
		}
	}
	seen := make(map[string]int, len(cfg.Pools))
	for i, p := range cfg.Pools {
		if j, dup := seen[p.Name]; dup {
			add(poolPtr(i)+"/name", pool.SeverityError, fmt.Sprintf("pool name %q is already used by pools[%d]", p.Name, j),
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

// poolPtr is the JSON pointer of pools[i].
func poolPtr(i int) string { return "/pools/" + strconv.Itoa(i) }

// field returns the pointer of a pool's key, or of the defaults key it
// inherited, so that a message points at the line that set the value.
func (s *source) field(i int, key string) string {
	ptr := poolPtr(i) + "/" + key
	if _, ok := s.find(ptr); ok {
		return ptr
	}
	if _, ok := s.find("/defaults/" + key); ok {
		return "/defaults/" + key
	}
	return ptr
}

type addFunc func(ptr string, sev pool.Severity, msg, fix string)

// sectionField returns the pointer of a setting of pool i's backend
// section, wherever it was written: under the pool's section, at the
// pool's top (EC2's older form), under the defaults' section or at the
// defaults' top (EC2).
func (s *source) sectionField(i int, b pool.Backend, key string) string {
	cands := []string{poolPtr(i) + "/" + string(b) + "/" + key}
	if b == pool.BackendEC2 {
		cands = append(cands, poolPtr(i)+"/"+key)
	}
	cands = append(cands, "/defaults/"+string(b)+"/"+key)
	if b == pool.BackendEC2 {
		cands = append(cands, "/defaults/"+key)
	}
	for _, c := range cands {
		if _, ok := s.find(c); ok {
			return c
		}
	}
	return cands[0]
}

// sectionPtr is the pointer of pool i's backend section (the pool itself
// for EC2's older form).
func sectionPtr(i int, p *pool.Pool) string {
	if !p.Sectioned() {
		return poolPtr(i)
	}
	return poolPtr(i) + "/" + string(p.Backend)
}

func (s *source) checkPool(i int, p *pool.Pool, add addFunc) {
	if lifetime := s.written(i, "maxLifetime"); lifetime != "" {
		d, err := time.ParseDuration(lifetime)
		if err != nil || d <= 0 || d > pool.MaxLifetimeLimit {
			add(s.field(i, "maxLifetime"), pool.SeverityError,
				fmt.Sprintf("maxLifetime %q must be between 1m and %s", lifetime, "120h"),
				"GitHub ends self-hosted jobs after 5 days; use e.g. 6h")
		}
	}
	for _, key := range []string{"idleTimeout", "bootTimeout", "queueTimeout"} {
		t := struct{ key, value string }{key, s.written(i, key)}
		if t.value == "" {
			continue
		}
		if d, err := time.ParseDuration(t.value); err != nil || d < time.Minute || d >= p.MaxLifetime && t.key != "queueTimeout" {
			add(s.field(i, t.key), pool.SeverityError,
				fmt.Sprintf("%s %q must be at least 1m and shorter than maxLifetime (%s)", t.key, t.value, pool.FormatDuration(p.MaxLifetime)),
				"scale-down reaps by it every minute; use e.g. 10m")
		}
	}
	if alarm := s.written(i, "waitAlarm"); alarm != "" {
		if d, err := time.ParseDuration(alarm); err != nil || d < time.Minute || d >= pool.MaxWaitAlarm {
			add(s.field(i, "waitAlarm"), pool.SeverityError,
				fmt.Sprintf("waitAlarm %q must be at least 1m and shorter than 24h", alarm),
				"a job leaves the waiting room after GitHub's 24h limit for a queued job; use e.g. 30m")
		}
	}
	switch pinned := p.RunnerVersion != "" && p.RunnerVersion != runnerversion.Latest; {
	case pinned && p.RunnerSHA256 == "":
		add(s.field(i, "runnerVersion"), pool.SeverityError,
			fmt.Sprintf("runnerVersion %s is pinned without runnerSha256", p.RunnerVersion),
			"copy the linux package's SHA-256 from the release notes into runnerSha256, or use runnerVersion: latest")
	case !pinned && p.RunnerSHA256 != "":
		add(s.field(i, "runnerSha256"), pool.SeverityError, "runnerSha256 is set without a pinned runnerVersion",
			"latest resolves the checksum itself: remove runnerSha256, or pin runnerVersion")
	}
	s.checkForm(i, p, add)
	switch {
	case p.EC2 != nil:
		s.checkEC2(i, p, add)
	case p.Slurm != nil:
		s.checkSlurm(i, p, add)
	case p.Kubernetes != nil:
		s.checkKubernetes(i, p, add)
	case p.Container != nil:
		s.checkContainer(i, p, add)
	case p.Process.Unsandboxed():
		add(s.sectionField(i, pool.BackendProcess, "sandbox"), pool.SeverityWarning,
			fmt.Sprintf("pool %q runs its runners unsandboxed: each job runs as skiff's own Unix account and sees the machine as skiff does: "+
				"it can read skiff's data directory (the queue, the job records, the GitHub App's private key), the other runners' work directories "+
				"and just-in-time configurations (their files and /proc/<pid>/environ), signal the other runners, and leave processes running after it ends", p.Name),
			"keep this pool to repositories you trust as you trust skiff's operator (scope:), or remove sandbox: none and install bubblewrap (docs/local.md#the-sandbox)")
	}
	if p.Dynamic != nil {
		s.checkBounds(i, p, add)
	}
	s.checkCapabilities(i, p, add)
	s.checkPolicy(i, p, add)
	if p.Warm != nil {
		s.checkWarm(i, p, add)
	}
}

// checkForm refuses EC2 settings on a pool of another backend, and an EC2
// pool that writes its settings both at its top and under ec2:.
func (s *source) checkForm(i int, p *pool.Pool, add addFunc) {
	base := poolPtr(i)
	for _, k := range s.topEC2(i) {
		switch {
		case p.Backend != pool.BackendEC2:
			add(base+"/"+k, pool.SeverityError,
				fmt.Sprintf("%s is an EC2 setting, but pool %q runs on %s", k, p.Name, p.Backend),
				fmt.Sprintf("remove it; what %s needs goes under %s: (see docs/pools.md#backends)", p.Backend, p.Backend))
		case p.Sectioned():
			add(base+"/"+k, pool.SeverityError,
				fmt.Sprintf("pool %q writes %s at its top and has an ec2: section", p.Name, k),
				"move it under ec2:; a pool writes its EC2 settings either all at its top (the older form) or all under ec2:")
		}
	}
	if p.CostPerHour > 0 && p.Backend == pool.BackendEC2 {
		add(base+"/costPerHour", pool.SeverityError,
			fmt.Sprintf("pool %q runs on EC2, whose runners are priced by their instance types", p.Name),
			"remove costPerHour; it prices pools off EC2 (slurm, kubernetes, process)")
	}
}

// checkEC2 checks an EC2 pool's section: image, subnets, instance types,
// requirements and the image's fit to the architecture and GPUs.
func (s *source) checkEC2(i int, p *pool.Pool, add addFunc) {
	base, e := poolPtr(i), p.EC2
	sec := sectionPtr(i, p)
	if len(e.InstanceTypes) == 0 && e.Requirements == nil {
		add(sec, pool.SeverityError, "a pool needs exactly one of instanceTypes or requirements",
			"list instance types in the order to try them, or give requirements for attribute-based selection, not both")
	}
	if e.Image.AMI == "" && e.Image.SSM == "" && e.Image.Name == "" {
		add(base, pool.SeverityError, fmt.Sprintf("pool %q has no image", p.Name),
			"set image: in the pool or in defaults, e.g. image: {ssm: /aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64}")
	}
	if e.Image.Bake && e.Image.Name != "" {
		add(base, pool.SeverityError, fmt.Sprintf("pool %q bakes an image found by name", p.Name),
			"Image Builder starts from an AMI id or an SSM parameter: give image: {ssm: ..., bake: true} or {ami: ..., bake: true}")
	}
	if len(e.Subnets) == 0 {
		add(base, pool.SeverityError, fmt.Sprintf("pool %q has no subnets", p.Name),
			"set subnets: in the pool or in defaults (subnet ids, one per Availability Zone)")
	}

	// Instance types: known families, matching architecture, priced.
	for j, t := range e.InstanceTypes {
		fi, known := ec2prices.Families[ec2prices.FamilyOf(t)]
		if known && fi.Arch == p.Architecture && ec2prices.Prices.Lookup(t) != nil {
			continue // the common case, checked without building a pointer
		}
		ptr := sec + "/instanceTypes/" + strconv.Itoa(j)
		s.checkFamily(ptr, ec2prices.FamilyOf(t), p, add, t)
		if known && fi.Arch == p.Architecture {
			add(ptr, pool.SeverityWarning, fmt.Sprintf("%s is not in the embedded price table", t),
				"plan shows no price for it, and cpu=/ram=/gpu= in dynamic labels never select it")
		}
	}
	if r := e.Requirements; r != nil {
		rp := sec + "/requirements"
		checkRange(rp+"/vcpu", "vcpu", r.VCPU, add)
		checkRange(rp+"/memoryGiB", "memoryGiB", r.MemoryGiB, add)
		if r.GPU != nil {
			checkRange(rp+"/gpu/count", "gpu.count", r.GPU.Count, add)
		}
		if len(r.Families) == 0 {
			add(rp, pool.SeverityWarning, "requirements without families let EC2 choose any family",
				"add families: [...] to bound what the pool can cost")
		}
		anyGPU := false
		for j, f := range r.Families {
			if fi, ok := ec2prices.Families[f]; !ok || fi.Arch != p.Architecture {
				s.checkFamily(rp+"/families/"+strconv.Itoa(j), f, p, add, "")
			}
			anyGPU = anyGPU || ec2prices.Families[f].GPU
		}
		if r.GPU != nil && r.GPU.Count.Min > 0 && len(r.Families) > 0 && !anyGPU {
			add(rp+"/gpu/count", pool.SeverityError,
				fmt.Sprintf("impossible bound: gpu.count.min is %d but none of the families %s has GPUs", r.GPU.Count.Min, strings.Join(r.Families, ", ")),
				"add GPU families ("+ec2prices.GPUFamilies()+") or drop gpu:")
		}
	}

	// The image must suit GPU pools and the architecture.
	facts := s.imageFacts(e.Image)
	if p.HasGPU() && (e.Image.AMI != "" || e.Image.SSM != "" || e.Image.Name != "") && !e.Image.GPU && !facts.gpu {
		add(s.sectionField(i, pool.BackendEC2, "image"), pool.SeverityError,
			fmt.Sprintf("pool %q launches GPU instances but its image %s is not known to carry GPU drivers", p.Name, e.Image),
			"use a GPU image such as image: {ssm: "+GPUImageSSM+"}, or set image.gpu: true if your AMI has the NVIDIA driver")
	}
	if wrong := facts.archMismatch(p.Architecture); wrong != "" {
		add(s.sectionField(i, pool.BackendEC2, "image"), pool.SeverityError,
			fmt.Sprintf("image %s is for %s but the pool's architecture is %s", e.Image, wrong, p.Architecture),
			"use the image built for "+p.Architecture+" or change architecture:")
	}
}

// checkSlurm checks what the schema cannot in a Slurm pool's section.
func (s *source) checkSlurm(i int, p *pool.Pool, add addFunc) {
	sl := p.Slurm
	for j, o := range sl.ExtraOptions {
		name, _, _ := strings.Cut(o, "=")
		if _, ok := pool.SlurmExtraOptions[name]; ok {
			continue
		}
		allowed := make([]string, 0, len(pool.SlurmExtraOptions))
		for k := range pool.SlurmExtraOptions {
			allowed = append(allowed, k)
		}
		sort.Strings(allowed)
		fix := "allowed: " + strings.Join(allowed, ", ") + "; partition, account, qos, reservation, constraint, gres, cpus, memory and exclusive have keys of their own, and the time limit is maxLifetime"
		add(s.sectionField(i, pool.BackendSlurm, "extraOptions")+"/"+strconv.Itoa(j), pool.SeverityError,
			fmt.Sprintf("sbatch option %s is not one a pool may add", name), fix)
	}
	switch {
	case sl.RunAsShared:
		add(s.sectionField(i, pool.BackendSlurm, "runAs"), pool.SeverityWarning,
			fmt.Sprintf("pool %q runs every runner as skiff's own Unix user (runAs: shared): a job can read skiff's data directory and "+
				"the GitHub App's key where that user can, read the registration of every runner still queued and the environment of "+
				"every runner on its node (and so register a runner of its own that receives another repository's jobs and secrets), "+
				"cancel or rename skiff's other jobs, and leave processes that outlive it", p.Name),
			"give the pool Unix accounts of its own, none of them skiff's (runAs: [ci-run1, ci-run2], one live runner each), and the sudoers rule of docs/slurm.md#run-as-accounts; keep runAs: shared to clusters and repositories one team trusts")
	case len(sl.RunAs) == 0:
		add(sectionPtr(i, p), pool.SeverityError, fmt.Sprintf("pool %q names no runAs accounts", p.Name),
			"set slurm.runAs (in the pool or in defaults.slurm) to Unix accounts that are not skiff's, one per runner that may run at once "+
				"(runAs: [ci-run1, ci-run2]; see docs/slurm.md#run-as-accounts), or to shared to run every runner as skiff's own user, "+
				"which lets a job reach skiff's files and the other runners")
	}
	for j, a := range sl.RunAs {
		if a == "root" {
			add(s.sectionField(i, pool.BackendSlurm, "runAs")+"/"+strconv.Itoa(j), pool.SeverityError,
				fmt.Sprintf("pool %q runs its runners as root", p.Name),
				"name Unix accounts of the runners' own, none of them root or skiff's")
		}
	}
	if sl.RunnerDir == "" {
		add(sectionPtr(i, p), pool.SeverityError, fmt.Sprintf("pool %q has no runnerDir", p.Name),
			"set slurm.runnerDir (in the pool or in defaults.slurm): where the Actions runner is installed on the shared filesystem")
	}
	if sl.WorkDir == "" {
		add(sectionPtr(i, p), pool.SeverityError, fmt.Sprintf("pool %q has no workDir", p.Name),
			"set slurm.workDir (in the pool or in defaults.slurm): the root of the runners' work directories on the shared filesystem")
	}
}

// checkKubernetes checks what the schema cannot in a Kubernetes pool's section.
func (s *source) checkKubernetes(i int, p *pool.Pool, add addFunc) {
	k := p.Kubernetes
	if k.Namespace == "" {
		add(sectionPtr(i, p), pool.SeverityError, fmt.Sprintf("pool %q has no namespace", p.Name),
			"set kubernetes.namespace (in the pool or in defaults.kubernetes)")
	}
	if k.Image == "" {
		add(sectionPtr(i, p), pool.SeverityError, fmt.Sprintf("pool %q has no runner image", p.Name),
			"set kubernetes.image (in the pool or in defaults.kubernetes), e.g. the image built from skiff's runner recipe")
	}
	for _, r := range []struct{ key, req, lim string }{
		{"cpu", k.Requests.CPU, k.Limits.CPU}, {"memory", k.Requests.Memory, k.Limits.Memory},
		{"ephemeralStorage", k.Requests.EphemeralStorage, k.Limits.EphemeralStorage},
	} {
		rv, ok1 := pool.ParseQuantity(r.req)
		lv, ok2 := pool.ParseQuantity(r.lim)
		if ok1 && ok2 && rv > lv {
			add(s.sectionField(i, pool.BackendKubernetes, "limits")+"/"+r.key, pool.SeverityError,
				fmt.Sprintf("impossible bound: the %s request %s is above its limit %s", r.key, r.req, r.lim),
				"raise the limit to at least the request, or lower the request")
		}
	}
	for j, t := range k.Tolerations {
		ptr := s.sectionField(i, pool.BackendKubernetes, "tolerations") + "/" + strconv.Itoa(j)
		if t.Operator == "Exists" && t.Value != "" {
			add(ptr, pool.SeverityError, "a toleration with operator Exists has no value", "remove value, or use operator: Equal")
		}
		if t.Seconds != nil && t.Effect != "NoExecute" {
			add(ptr, pool.SeverityError, "tolerationSeconds applies only to effect NoExecute", "remove tolerationSeconds, or set effect: NoExecute")
		}
		if t.Key == "" && t.Operator != "Exists" {
			add(ptr, pool.SeverityError, "a toleration without a key must have operator Exists", "add key:, or set operator: Exists")
		}
	}
	sc := k.SecurityContext
	if sc.RunAsNonRoot && sc.RunAsUser != nil && *sc.RunAsUser == 0 {
		add(s.sectionField(i, pool.BackendKubernetes, "securityContext"), pool.SeverityError,
			"runAsUser 0 is root, and runAsNonRoot is true (the default)", "run as another user, or set runAsNonRoot: false")
	}
	if sc.Privileged {
		add(s.sectionField(i, pool.BackendKubernetes, "securityContext")+"/privileged", pool.SeverityWarning,
			fmt.Sprintf("pool %q runs privileged pods: a job can take over the node it runs on", p.Name),
			"keep privileged pods to trusted repositories (scope:) on nodes reserved for them (nodeSelector, tolerations)")
	}
	if k.AutomountServiceAccountToken {
		add(s.sectionField(i, pool.BackendKubernetes, "automountServiceAccountToken"), pool.SeverityWarning,
			fmt.Sprintf("pool %q mounts a service account token in its runners: every job can call the API server with it", p.Name),
			"give the pool a serviceAccountName bound to no more than the jobs need")
	}
	if k.APIServerAccess {
		add(s.sectionField(i, pool.BackendKubernetes, "apiServerAccess"), pool.SeverityWarning,
			fmt.Sprintf("pool %q lets its runners reach the API server: the runner NetworkPolicy then allows every job HTTPS (ports 443, 6443) to any address in the cluster", p.Name),
			"keep it to pools whose jobs deploy to the cluster, with a serviceAccountName bound to no more than they need")
	}
}

// checkCapabilities refuses settings that ask the pool's backend for what
// it cannot do (Declared).
func (s *source) checkCapabilities(i int, p *pool.Pool, add addFunc) {
	caps := p.Capabilities()
	dp := s.field(i, "dynamic")
	if b := p.Dynamic; b != nil && !caps.DynamicSizes {
		for _, x := range []struct {
			key string
			set bool
		}{{"maxCpu", b.MaxCPU > 0}, {"maxRamGiB", b.MaxRAMGiB > 0}, {"maxGpus", b.MaxGPUs > 0}, {"maxDiskGiB", b.MaxDiskGiB > 0}} {
			if x.set {
				add(dp+"/"+x.key, pool.SeverityError,
					fmt.Sprintf("pool %q runs on %s, which cannot size a runner: dynamic.%s cannot be honoured", p.Name, p.Backend, x.key),
					"remove it, or run the pool on a backend with dynamic sizes (ec2, slurm, kubernetes)")
			}
		}
	}
	if b := p.Dynamic; b != nil && b.AllowOnDemand && !caps.Spot {
		add(dp+"/allowOnDemand", pool.SeverityError,
			fmt.Sprintf("pool %q runs on %s, which has no spot capacity to leave", p.Name, p.Backend), "remove allowOnDemand")
	}
	if b := p.Dynamic; b != nil && len(b.Families) > 0 && p.Backend != pool.BackendEC2 {
		add(dp+"/families", pool.SeverityError,
			fmt.Sprintf("instance families are EC2's; pool %q runs on %s", p.Name, p.Backend), "remove dynamic.families")
	}
	if !caps.GPUs && (p.HasGPU() || p.Dynamic != nil && p.Dynamic.MaxGPUs > 0) {
		add(poolPtr(i), pool.SeverityError, fmt.Sprintf("pool %q asks for GPUs, which %s cannot give", p.Name, p.Backend),
			"run the pool on a backend with GPUs")
	}
	if s.written(i, "queueTimeout") != "" && !caps.OwnQueue {
		add(s.field(i, "queueTimeout"), pool.SeverityWarning,
			fmt.Sprintf("queueTimeout has no effect: pool %q runs on %s, which holds no runner in a queue of its own", p.Name, p.Backend),
			"remove it; bootTimeout bounds the runner's start")
	}
}

// checkPolicy warns about the settings that let untrusted code near a
// credential or open a pool to anyone on GitHub.
func (s *source) checkPolicy(i int, p *pool.Pool, add addFunc) {
	if len(p.Workflows) > 0 && !p.KeptGroup {
		add(s.field(i, "workflows"), pool.SeverityWarning,
			fmt.Sprintf("workflows has no effect: pool %q registers in the operator's runner group %q, which skiff does not change", p.Name, p.RunnerGroup),
			"set the workflows in the group's settings on GitHub, or remove runnerGroup so that skiff keeps a group for the pool")
	}
	if p.Jobs == pool.JobsListener && p.Dynamic != nil {
		add(s.field(i, "jobs"), pool.SeverityWarning,
			fmt.Sprintf("pool %q keeps the webhook: a runner scale set has static labels, and a job's dynamic label names sizes no scale set can list", p.Name),
			"remove dynamic: to take the pool's jobs from the listener, or remove jobs: listener")
	}
	if p.Jobs == pool.JobsListener && p.Registration == pool.RegistrationToken {
		add(s.field(i, "registration"), pool.SeverityError,
			fmt.Sprintf("pool %q takes its jobs from a runner scale set, whose runners register just in time in the scale set", p.Name),
			"remove registration: token")
	}
	if p.Registration == pool.RegistrationToken {
		add(s.field(i, "registration"), pool.SeverityWarning,
			fmt.Sprintf("pool %q registers runners with an organisation-wide registration token: any job on the pool can read it and register runners of its own until it expires", p.Name),
			"keep registration: jit (the default) unless the pool runs only trusted code and needs bursts beyond the JIT budget")
	}
	if p.Policy.AllowsPublic() && p.Policy.ForkPullRequests == pool.ForkAllow {
		add(s.field(i, "forkPullRequests"), pool.SeverityWarning,
			fmt.Sprintf("pool %q runs pull requests from forks of public repositories: anyone on GitHub can run code on its instances", p.Name),
			"use forkPullRequests: collaborators, or keep the pool's instances free of credentials and network access that matter")
	}
}

func checkRange(ptr, name string, r pool.Range, add addFunc) {
	if r.Max != 0 && r.Min > r.Max {
		add(ptr, pool.SeverityError, fmt.Sprintf("impossible bound: %s.min %d is above %s.max %d", name, r.Min, name, r.Max),
			"swap them or raise max")
	}
}

// checkFamily reports an unknown family, or one of the wrong architecture.
// what names the instance type when the family came from one.
func (s *source) checkFamily(ptr, family string, p *pool.Pool, add addFunc, what string) {
	if what == "" {
		what = "family " + family
	}
	fi, ok := ec2prices.Families[family]
	if !ok {
		fix := "check the spelling; skiff knows the EC2 families listed in pkg/provider/ec2/ec2prices/catalog.go"
		if near := pool.Nearest(family, ec2prices.SortedFamilies()); near != "" {
			fix = fmt.Sprintf("did you mean %q?", near)
		}
		add(ptr, pool.SeverityError, fmt.Sprintf("unknown instance family %q", family), fix)
		return
	}
	if fi.Arch != p.Architecture {
		add(ptr, pool.SeverityError, fmt.Sprintf("%s is %s but pool %q is %s", what, fi.Arch, p.Name, p.Architecture),
			fmt.Sprintf("set architecture: %s in a separate pool, or use %s types here", fi.Arch, p.Architecture))
	}
}

// checkBounds reports dynamic bounds that no job could ever satisfy.
func (s *source) checkBounds(i int, p *pool.Pool, add addFunc) {
	dp := poolPtr(i) + "/dynamic"
	b := p.Dynamic
	if p.EC2 == nil {
		return // the rest is about instance types; checkCapabilities covers other backends
	}
	for j, f := range b.Families {
		ptr := dp + "/families/" + strconv.Itoa(j)
		if _, ok := ec2prices.Families[f]; !ok {
			s.checkFamily(ptr, f, p, add, "")
			continue
		}
		if len(p.Families()) > 0 && !slices.Contains(p.Families(), f) {
			add(ptr, pool.SeverityError,
				fmt.Sprintf("impossible bound: family %s is allowed for family= but pool %q cannot launch it", f, p.Name),
				"add its instance types (or the family under requirements.families), or remove it here")
		}
	}
	if b.MaxGPUs > 0 && !p.HasGPU() {
		add(dp+"/maxGpus", pool.SeverityError,
			fmt.Sprintf("impossible bound: maxGpus is %d but pool %q launches no GPU instances", b.MaxGPUs, p.Name),
			"remove maxGpus, or add GPU instance types")
	}
	if b.MaxDiskGiB > 0 && b.MaxDiskGiB < p.EC2.DiskGiB {
		add(dp+"/maxDiskGiB", pool.SeverityError,
			fmt.Sprintf("impossible bound: maxDiskGiB %d is below the pool's diskGiB %d", b.MaxDiskGiB, p.EC2.DiskGiB),
			"raise maxDiskGiB to at least diskGiB")
	}
	minCPU, minRAM := smallestShape(p)
	if b.MaxCPU > 0 && minCPU > 0 && b.MaxCPU < minCPU {
		add(dp+"/maxCpu", pool.SeverityError,
			fmt.Sprintf("impossible bound: maxCpu %d is below the smallest instance of pool %q (%d vCPU)", b.MaxCPU, p.Name, minCPU),
			fmt.Sprintf("raise maxCpu to at least %d", minCPU))
	}
	if b.MaxRAMGiB > 0 && minRAM > 0 && b.MaxRAMGiB < minRAM {
		add(dp+"/maxRamGiB", pool.SeverityError,
			fmt.Sprintf("impossible bound: maxRamGiB %d is below the smallest instance of pool %q (%d GiB)", b.MaxRAMGiB, p.Name, minRAM),
			fmt.Sprintf("raise maxRamGiB to at least %d", minRAM))
	}
	if b.AllowOnDemand && p.EC2.Capacity == pool.CapacityOnDemand {
		add(dp+"/allowOnDemand", pool.SeverityWarning,
			fmt.Sprintf("allowOnDemand has no effect: pool %q is already on-demand", p.Name), "remove it")
	}
}

// smallestShape is the fewest vCPUs and GiB any launch of the pool can have
// (0 when unknown).
func smallestShape(p *pool.Pool) (cpu, ram int) {
	if p.EC2 == nil {
		return 0, 0
	}
	if r := p.EC2.Requirements; r != nil {
		return r.VCPU.Min, r.MemoryGiB.Min
	}
	for _, t := range p.EC2.InstanceTypes {
		it := ec2prices.Prices.Lookup(t)
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

// gpuImageWords mark an SSM path or AMI name as a GPU image.
var gpuImageWords = []string{"gpu", "nvidia", "deeplearning", "deep-learning", "cuda"}

// imageFacts is what an image's SSM path and name filter say about it.
type imageFacts struct {
	gpu      bool // names GPU drivers (gpu, nvidia, deeplearning, cuda)
	x86, arm bool // names an architecture
}

// imageFacts reads an image's path and name once per distinct image: most
// pools share the image of the defaults.
func (s *source) imageFacts(im pool.Image) imageFacts {
	key := [2]string{im.SSM, im.Name}
	if f, ok := s.images[key]; ok {
		return f
	}
	f := imageFacts{
		gpu: mentions(im, gpuImageWords...),
		x86: mentions(im, "x86_64", "amd64"),
		arm: mentions(im, "arm64", "aarch64"),
	}
	if s.images == nil {
		s.images = map[[2]string]imageFacts{}
	}
	s.images[key] = f
	return f
}

// archMismatch returns the architecture the image names when it is not
// arch, or "".
func (f imageFacts) archMismatch(arch string) string {
	switch {
	case arch == "x64" && f.arm && !f.x86:
		return "arm64"
	case arch == "arm64" && f.x86 && !f.arm:
		return "x64"
	}
	return ""
}

// mentions reports whether the image's SSM path or name filter contains one
// of the lower-case words, in any case.
func mentions(im pool.Image, words ...string) bool {
	for _, ref := range [2]string{im.SSM, im.Name} {
		if needsLower(ref) {
			ref = strings.ToLower(ref)
		}
		for _, w := range words {
			if strings.Contains(ref, w) {
				return true
			}
		}
	}
	return false
}

// needsLower reports whether strings.ToLower could change s.
func needsLower(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; 'A' <= c && c <= 'Z' || c >= 0x80 {
			return true
		}
	}
	return false
}

// scopesOverlap reports whether some repository may use both scopes.
func scopesOverlap(a, b pool.Scope) bool {
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
func (s *source) checkOverlaps(cfg *pool.Config) []pool.Diagnostic {
	var diags []pool.Diagnostic
	ls := newLabelSets(cfg.Pools)
	bySize := poolsBySize(cfg.Pools)
	common := make([]uint64, ls.words)
	var warned map[string]bool // by the common labels' bits
	// Only pools with equally many labels can tie: pair them within each run
	// of bySize (in file order, as the sort is stable).
	for x, i := range bySize {
		a := cfg.Pools[i]
		for _, j := range bySize[x+1:] {
			b := cfg.Pools[j]
			if len(a.Effective()) != len(b.Effective()) {
				break
			}
			switch ls.compare(common, i, j, a, b) {
			case overlapSame:
				diags = append(diags, s.diag(poolPtr(j)+"/labels", pool.SeverityError,
					fmt.Sprintf("pools %q and %q have the same labels [%s]: every job matching one would be ambiguous", a.Name, b.Name, strings.Join(slices.Sorted(maps.Keys(a.Effective())), ", ")),
					"add a label that tells them apart, or scope them to different repositories"))
			case overlapCommon:
				if ls.covered(common, cfg.Pools, bySize, a, b) {
					continue
				}
				key := bitsKey(common)
				if warned[key] {
					continue
				}
				if warned == nil {
					warned = map[string]bool{}
				}
				warned[key] = true
				labels := strings.Join(intersect(a.Effective(), b.Effective()), ", ")
				diags = append(diags, s.diag(poolPtr(j)+"/labels", pool.SeverityWarning,
					fmt.Sprintf("a job with runs-on: [%s] matches pools %q and %q equally well and would not be launched (ambiguous)", labels, a.Name, b.Name),
					"add a pool whose labels are just those (a default pool), or accept that such jobs are refused"))
			}
		}
	}
	return diags
}

// labelSets holds each pool's effective labels as a bitset over the labels
// the pools use, so that the pairwise checks do not allocate.
type labelSets struct {
	words  int
	sets   []uint64 // words per pool, pool after pool
	custom []uint64 // every label but the implied ones
}

func newLabelSets(pools []*pool.Pool) labelSets {
	ids := map[string]int{}
	custom := []uint64{}
	members := make([][]int, len(pools))
	for i, p := range pools {
		members[i] = make([]int, 0, len(p.Effective()))
		for l := range p.Effective() {
			id, ok := ids[l]
			if !ok {
				id = len(ids)
				ids[l] = id
				if id/64 >= len(custom) {
					custom = append(custom, 0)
				}
				if !isImplied(l) {
					custom[id/64] |= 1 << (id % 64)
				}
			}
			members[i] = append(members[i], id)
		}
	}
	ls := labelSets{words: len(custom), sets: make([]uint64, len(pools)*len(custom)), custom: custom}
	for i := range pools {
		for _, id := range members[i] {
			ls.set(i)[id/64] |= 1 << (id % 64)
		}
	}
	return ls
}

// set is pool i's labels.
func (ls labelSets) set(i int) []uint64 { return ls.sets[i*ls.words : (i+1)*ls.words] }

// poolsBySize is the pools' positions by ascending label count, then file
// order.
func poolsBySize(pools []*pool.Pool) []int {
	bySize := make([]int, len(pools))
	for i := range bySize {
		bySize[i] = i
	}
	sort.SliceStable(bySize, func(a, b int) bool { return len(pools[bySize[a]].Effective()) < len(pools[bySize[b]].Effective()) })
	return bySize
}

// overlap is how two pools with equally many labels overlap.
type overlap int

const (
	overlapNone   overlap = iota // no job is ambiguous between them
	overlapSame                  // the same labels, overlapping scopes
	overlapCommon                // common custom labels, overlapping scopes
)

// compare decides how pools a (at i) and b (at j), which have equally many
// labels, overlap, leaving their common labels in common.
func (ls labelSets) compare(common []uint64, i, j int, a, b *pool.Pool) overlap {
	size, hasCustom := 0, false
	for w := range common {
		common[w] = ls.set(i)[w] & ls.set(j)[w]
		size += bits.OnesCount64(common[w])
		hasCustom = hasCustom || common[w]&ls.custom[w] != 0
	}
	same := size == len(a.Effective())
	switch {
	case !same && !hasCustom || !scopesOverlap(a.Scope, b.Scope):
		return overlapNone
	case same:
		return overlapSame
	}
	return overlapCommon
}

// covered reports whether a pool with fewer labels than a and b carries all
// of their common labels and shares a repository with each: it then wins
// the job that asks for just those.
func (ls labelSets) covered(common []uint64, pools []*pool.Pool, bySize []int, a, b *pool.Pool) bool {
	for _, k := range bySize {
		c := pools[k]
		if len(c.Effective()) >= len(a.Effective()) {
			return false
		}
		if isSubset(common, ls.set(k)) && scopesOverlap(c.Scope, a.Scope) && scopesOverlap(c.Scope, b.Scope) {
			return true
		}
	}
	return false
}

// bitsKey renders a bitset as a map key.
func bitsKey(set []uint64) string {
	b := make([]byte, 0, 8*len(set))
	for _, w := range set {
		b = binary.LittleEndian.AppendUint64(b, w)
	}
	return string(b)
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

// isImplied reports whether a lower-case label is self-hosted, linux or an architecture.
func isImplied(label string) bool {
	switch label {
	case "self-hosted", "linux", "x64", "arm64":
		return true
	}
	return false
}
