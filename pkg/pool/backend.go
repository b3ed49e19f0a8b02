package pool

import (
	"fmt"
	"strconv"
	"strings"
)

// Backend names where a pool's runners run: the section a pool carries.
type Backend string

// The backends a pool can name. A pool without a section is an EC2 pool
// (the older form, with the EC2 settings at the pool's top).
const (
	BackendEC2        Backend = "ec2"
	BackendSlurm      Backend = "slurm"
	BackendKubernetes Backend = "kubernetes"
	BackendProcess    Backend = "process"
	BackendContainer  Backend = "container"
)

// Backends lists the backends in the order the pools file documents them.
var Backends = []Backend{BackendEC2, BackendSlurm, BackendKubernetes, BackendProcess, BackendContainer}

// Capabilities are what a backend's provider can do for a pool. A provider
// states its own (provider.Provider.Capabilities); validate and plan check a
// pool against its backend's entry in Declared, since they run without one.
type Capabilities struct {
	// Spot: the backend has interruptible, cheaper capacity (spot= and
	// dynamic.allowOnDemand mean something).
	Spot bool
	// DynamicSizes: the backend sizes a runner from cpu=, ram=, gpu= and
	// disk= (dynamic.max* bounds mean something).
	DynamicSizes bool
	// GPUs: the backend can give a runner GPUs.
	GPUs bool
	// ReplayByToken: launching a plan again after a crash finds the runners
	// the first launch started instead of starting more.
	ReplayByToken bool
	// OwnQueue: the backend may hold a launched runner pending in a queue
	// of its own (a Slurm partition, an unschedulable Pod); such a runner is
	// listed pending with the backend's reason, bounded by queueTimeout.
	OwnQueue bool
	// UsageSources name where per-job usage records get their peaks
	// (cloudwatch, cgroup, sacct, ...); empty when the backend measures none.
	UsageSources []string
}

// Declared are the capabilities each backend's provider states. The
// conformance suite (provider/providertest) checks that a provider's own
// statement matches its backend's entry.
var Declared = map[Backend]Capabilities{
	BackendEC2: {Spot: true, DynamicSizes: true, GPUs: true, ReplayByToken: true,
		UsageSources: []string{"cloudwatch"}},
	BackendSlurm: {DynamicSizes: true, GPUs: true, ReplayByToken: true, OwnQueue: true,
		UsageSources: []string{"sacct"}},
	BackendKubernetes: {DynamicSizes: true, GPUs: true, ReplayByToken: true, OwnQueue: true,
		UsageSources: []string{"termination-message"}},
	// The process provider runs on the host as it is: it cannot size a
	// runner, and the GPUs a job sees are the host's. It measures each
	// runner's process tree through a cgroup v2 group where it can make
	// one, else by sampling /proc, and the GPUs through nvidia-smi.
	BackendProcess: {GPUs: true, ReplayByToken: true,
		UsageSources: []string{"cgroup", "procfs", "nvidia-smi"}},
	// The container provider sizes a runner as limits of its container and
	// gives it GPUs as CDI devices or device requests; the same plan finds
	// the containers its token named. The runner image's entrypoint reads
	// the container's cgroup (and nvidia-smi) when the runner exits.
	BackendContainer: {DynamicSizes: true, GPUs: true, ReplayByToken: true,
		UsageSources: []string{"cgroup", "nvidia-smi"}},
}

// Sizes are a runner's neutral sizes, resolved from the dynamic label
// within the pool's bounds: the smallest value of each key the label
// admits, 0 where the label asks nothing (the backend's section applies).
// Each backend maps them its own way: EC2 by instance types, Slurm to
// --cpus-per-task, --mem, --gres and --tmp, Kubernetes to requests and
// limits.
type Sizes struct {
	VCPU      int
	MemoryGiB int
	GPUs      int
	DiskGiB   int
}

// Zero reports whether no size was asked for.
func (s Sizes) Zero() bool { return s == Sizes{} }

// String renders the sizes for logs and plan output, e.g. "8 vCPU, 32 GiB, 1 GPU".
func (s Sizes) String() string {
	var parts []string
	if s.VCPU > 0 {
		parts = append(parts, fmt.Sprintf("%d vCPU", s.VCPU))
	}
	if s.MemoryGiB > 0 {
		parts = append(parts, fmt.Sprintf("%d GiB memory", s.MemoryGiB))
	}
	if s.GPUs > 0 {
		parts = append(parts, fmt.Sprintf("%d GPU", s.GPUs))
	}
	if s.DiskGiB > 0 {
		parts = append(parts, fmt.Sprintf("%d GiB disk", s.DiskGiB))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// EC2 is a pool's ec2: section (or the EC2 settings at the pool's top, the
// older form), with the file's defaults applied: what only EC2 understands.
type EC2 struct {
	InstanceTypes []string
	Requirements  *Requirements
	Image         Image
	DiskGiB       int
	Subnets       []string
	Capacity      Capacity
	Tags          map[string]string
}

// EC2Keys are the EC2 settings a pool may write at its top (the older
// form) or under ec2:. The defaults block takes all but the instance choice.
var EC2Keys = []string{"instanceTypes", "requirements", "image", "diskGiB", "subnets", "capacity", "tags"}

// Slurm is a pool's slurm: section: one batch job per runner, submitted
// from the login node skiff runs on.
type Slurm struct {
	Partition   string
	Account     string
	QOS         string
	Reservation string
	// Constraint is a node feature expression (--constraint).
	Constraint string
	// Gres are the generic resources per job, e.g. gpu:1 or gpu:a100:2.
	Gres string
	// CPUsPerTask is --cpus-per-task when the job asks for no cpu=.
	CPUsPerTask int
	// MemoryMiB is --mem when the job asks for no ram= (from memory: 32G).
	MemoryMiB int
	// Exclusive asks for whole nodes (--exclusive).
	Exclusive bool
	// RunnerDir is where the Actions runner is installed on the shared filesystem.
	RunnerDir string
	// WorkDir is the root of the runners' work directories on the shared filesystem.
	WorkDir string
	// ExtraOptions are further sbatch options from SlurmExtraOptions.
	ExtraOptions []string
	// RunAs are the Unix accounts the runners run as (runAs: [a, b]), one
	// live runner per account; empty with RunAsShared, or when the pool
	// names neither (which validation refuses).
	RunAs []string
	// RunAsShared is runAs: shared: every runner runs as skiff's own user.
	RunAsShared bool
}

// RunAsSharedValue is the runAs value of a pool whose runners all run as
// skiff's own user.
const RunAsSharedValue = "shared"

// SlurmExtraOptions is the allow-list of sbatch options a pool may add in
// extraOptions: none of them changes who the job runs as, what it runs,
// where its output or environment goes, or a setting skiff owns (partition,
// time limit, job name). Each says what it is for.
var SlurmExtraOptions = map[string]string{
	"--comment":          "a note for the accounting",
	"--nice":             "a lower priority",
	"--licenses":         "licenses the job needs",
	"--clusters":         "the cluster of a multi-cluster site",
	"--gpu-bind":         "GPU binding",
	"--cpu-bind":         "CPU binding",
	"--mem-bind":         "memory binding",
	"--hint":             "task layout hints",
	"--threads-per-core": "threads per core",
	"--prefer":           "preferred node features",
	"--network":          "network resources",
}

// SlurmRequest is what a Slurm provider submits for one runner: the
// section's settings with the runner's sizes applied.
type SlurmRequest struct {
	Partition, Account, QOS, Reservation, Constraint string
	CPUsPerTask                                      int
	MemoryMiB                                        int
	Gres                                             string
	TmpGiB                                           int
	// TimeLimitMinutes is the pool's lifetime, rounded up to a minute.
	TimeLimitMinutes int
	Exclusive        bool
	Extra            []string
}

// Request maps the section and a runner's sizes to its batch request: a
// size the job asked for replaces the section's value; gpu= keeps the
// section's GPU type (gpu:a100:1 with gpu=2 is gpu:a100:2).
func (s *Slurm) Request(sh Shared) SlurmRequest {
	r := SlurmRequest{Partition: s.Partition, Account: s.Account, QOS: s.QOS, Reservation: s.Reservation,
		Constraint: s.Constraint, CPUsPerTask: s.CPUsPerTask, MemoryMiB: s.MemoryMiB, Gres: s.Gres,
		Exclusive: s.Exclusive, Extra: s.ExtraOptions,
		TimeLimitMinutes: int((sh.MaxLifetime + 59e9) / 60e9)}
	if sh.Sizes.VCPU > 0 {
		r.CPUsPerTask = sh.Sizes.VCPU
	}
	if sh.Sizes.MemoryGiB > 0 {
		r.MemoryMiB = sh.Sizes.MemoryGiB * 1024
	}
	if sh.Sizes.GPUs > 0 {
		r.Gres = withGPUCount(s.Gres, sh.Sizes.GPUs)
	}
	r.TmpGiB = sh.Sizes.DiskGiB
	return r
}

// Args renders the request as sbatch options, in a fixed order.
func (r SlurmRequest) Args() []string {
	var out []string
	opt := func(name, v string) {
		if v != "" {
			out = append(out, name+"="+v)
		}
	}
	opt("--partition", r.Partition)
	opt("--account", r.Account)
	opt("--qos", r.QOS)
	opt("--reservation", r.Reservation)
	opt("--constraint", r.Constraint)
	if r.CPUsPerTask > 0 {
		opt("--cpus-per-task", strconv.Itoa(r.CPUsPerTask))
	}
	if r.MemoryMiB > 0 {
		opt("--mem", slurmMemory(r.MemoryMiB))
	}
	opt("--gres", r.Gres)
	if r.TmpGiB > 0 {
		opt("--tmp", strconv.Itoa(r.TmpGiB)+"G")
	}
	if r.TimeLimitMinutes > 0 {
		opt("--time", strconv.Itoa(r.TimeLimitMinutes))
	}
	if r.Exclusive {
		out = append(out, "--exclusive")
	}
	return append(out, r.Extra...)
}

// slurmMemory renders MiB with the largest whole unit: 32768 is 32G.
func slurmMemory(mib int) string {
	switch {
	case mib%(1024*1024) == 0:
		return strconv.Itoa(mib/(1024*1024)) + "T"
	case mib%1024 == 0:
		return strconv.Itoa(mib/1024) + "G"
	}
	return strconv.Itoa(mib) + "M"
}

// withGPUCount sets the count of the gpu entry of a gres list, or adds
// gpu:N when it has none.
func withGPUCount(gres string, n int) string {
	if gres == "" {
		return "gpu:" + strconv.Itoa(n)
	}
	parts := strings.Split(gres, ",")
	for i, p := range parts {
		if name, _, _ := strings.Cut(p, ":"); name == "gpu" {
			j := strings.LastIndexByte(p, ':')
			parts[i] = p[:j+1] + strconv.Itoa(n)
			return strings.Join(parts, ",")
		}
	}
	return gres + ",gpu:" + strconv.Itoa(n)
}

// slurmGPUs is the number of GPUs a gres list asks for.
func slurmGPUs(gres string) int {
	n := 0
	for _, p := range strings.Split(gres, ",") {
		if name, _, _ := strings.Cut(p, ":"); name == "gpu" {
			c, _ := strconv.Atoi(p[strings.LastIndexByte(p, ':')+1:])
			n += c
		}
	}
	return n
}

// parseSlurmMemory reads memory: 512M, 32G or 2T into MiB.
func parseSlurmMemory(s string) (int, bool) {
	if len(s) < 2 {
		return 0, false
	}
	n, err := strconv.Atoi(s[:len(s)-1])
	if err != nil || n <= 0 {
		return 0, false
	}
	switch s[len(s)-1] {
	case 'M':
		return n, true
	case 'G':
		return n * 1024, true
	case 'T':
		return n * 1024 * 1024, true
	}
	return 0, false
}

// Kubernetes is a pool's kubernetes: section: one Pod per runner.
type Kubernetes struct {
	Namespace string
	// Image is the runner's container image.
	Image string
	// Requests and Limits are the runner container's resources as
	// Kubernetes quantities ("2", "500m", "8Gi").
	Requests, Limits Resources
	// GPU is the extended resource the runner's GPUs come as (nil: none
	// unless the job asks for gpu=, then DefaultGPUResource).
	GPU                *KubernetesGPU
	NodeSelector       map[string]string
	Tolerations        []Toleration
	RuntimeClassName   string
	PriorityClassName  string
	ServiceAccountName string
	// AutomountServiceAccountToken mounts the service account's token in
	// the Pod; off unless the pool asks.
	AutomountServiceAccountToken bool
	// APIServerAccess labels the runner Pods so that infra/kubernetes'
	// NetworkPolicy lets them reach the API server (HTTPS, ports 443 and
	// 6443); off unless the pool asks.
	APIServerAccess bool
	SecurityContext SecurityContext
}

// DefaultGPUResource is the extended resource of NVIDIA's device plugin.
const DefaultGPUResource = "nvidia.com/gpu"

// Resources are a container's cpu, memory and ephemeral-storage quantities.
type Resources struct {
	CPU              string
	Memory           string
	EphemeralStorage string
}

// KubernetesGPU names the GPUs' extended resource and how many per runner.
type KubernetesGPU struct {
	Resource string
	Count    int
}

// Toleration is one Pod toleration.
type Toleration struct {
	Key, Operator, Value, Effect string
	// Seconds is tolerationSeconds (NoExecute only); nil when unset.
	Seconds *int64
}

// SecurityContext is the runner container's security context. The zero
// value is not the default: Decode sets RunAsNonRoot unless the pool says
// otherwise.
type SecurityContext struct {
	RunAsUser, RunAsGroup, FSGroup *int64
	RunAsNonRoot                   bool
	Privileged                     bool
}

// KubernetesResources maps the section and a runner's sizes to the runner
// container's requests and limits (resource name → quantity): a size the
// job asked for sets the request, and raises the section's limit to it
// where the section has one; GPUs are requested and limited alike, as
// Kubernetes requires of extended resources.
func (k *Kubernetes) KubernetesResources(s Sizes) (requests, limits map[string]string) {
	requests, limits = map[string]string{}, map[string]string{}
	put := func(m map[string]string, name, v string) {
		if v != "" {
			m[name] = v
		}
	}
	put(requests, "cpu", k.Requests.CPU)
	put(requests, "memory", k.Requests.Memory)
	put(requests, "ephemeral-storage", k.Requests.EphemeralStorage)
	put(limits, "cpu", k.Limits.CPU)
	put(limits, "memory", k.Limits.Memory)
	put(limits, "ephemeral-storage", k.Limits.EphemeralStorage)
	sized := func(name, q string, base float64) {
		requests[name] = q
		if l, ok := limits[name]; ok {
			if lv, ok := ParseQuantity(l); ok && lv < base {
				limits[name] = q
			}
		}
	}
	if s.VCPU > 0 {
		sized("cpu", strconv.Itoa(s.VCPU), float64(s.VCPU))
	}
	if s.MemoryGiB > 0 {
		sized("memory", strconv.Itoa(s.MemoryGiB)+"Gi", float64(s.MemoryGiB)*(1<<30))
	}
	if s.DiskGiB > 0 {
		sized("ephemeral-storage", strconv.Itoa(s.DiskGiB)+"Gi", float64(s.DiskGiB)*(1<<30))
	}
	gpus, res := 0, DefaultGPUResource
	if k.GPU != nil {
		gpus, res = k.GPU.Count, k.GPU.Resource
	}
	if s.GPUs > 0 {
		gpus = s.GPUs
	}
	if gpus > 0 {
		requests[res] = strconv.Itoa(gpus)
		limits[res] = strconv.Itoa(gpus)
	}
	return requests, limits
}

// quantitySuffixes are Kubernetes' quantity suffixes and their factors.
var quantitySuffixes = map[string]float64{
	"": 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
	"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Pi": 1 << 50, "Ei": 1 << 60,
}

// ParseQuantity reads a Kubernetes quantity ("500m", "2", "1.5", "8Gi",
// "1G") into its value in base units. Exponent forms (1e3) are refused by
// the schema and here.
func ParseQuantity(q string) (float64, bool) {
	i := 0
	for i < len(q) && (q[i] >= '0' && q[i] <= '9' || q[i] == '.') {
		i++
	}
	if i == 0 {
		return 0, false
	}
	f, ok := quantitySuffixes[q[i:]]
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseFloat(q[:i], 64)
	if err != nil {
		return 0, false
	}
	return n * f, true
}

// Process is a pool's process: section: the pool runs only in local mode,
// each runner a process on the machine skiff local runs on.
type Process struct {
	// Sandbox is how each runner is contained: SandboxBwrap (the default,
	// also when empty) or SandboxNone, which an operator must write.
	Sandbox string
}

// The values of process.sandbox.
const (
	// SandboxBwrap runs each runner in a bubblewrap sandbox of its own:
	// its own mount view, processes, /tmp and session; a read-only system.
	SandboxBwrap = "bwrap"
	// SandboxNone runs each runner as a plain process of skiff's own
	// account, in skiff's view of the machine.
	SandboxNone = "none"
)

// Unsandboxed reports whether the pool's runners run without a sandbox
// (process.sandbox: none). Only a process pool can say so: the process
// provider sandboxes the runners of every other pool it runs.
func (p *Process) Unsandboxed() bool { return p != nil && p.Sandbox == SandboxNone }

// backendOf returns the section a pool map names, or "" for none.
func backendOf(m map[string]any) (Backend, int) {
	var b Backend
	n := 0
	for _, k := range Backends {
		if _, ok := m[string(k)]; ok {
			b = k
			n++
		}
	}
	return b, n
}
