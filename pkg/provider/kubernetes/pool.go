package kubernetes

import (
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Pool is one pool's Kubernetes settings: what its runner Pods look like.
// Its fields mirror the pools file's kubernetes: section.
type Pool struct {
	// Namespace is where the pool's Pods and Secrets live (default "default").
	Namespace string
	// Image is the runner's container image (required): the runner and
	// cmd/skiff-podhelper as its entrypoint (see infra/kubernetes/runner).
	Image string
	// Command, when set, replaces the image's entrypoint.
	Command []string
	// Requests and Limits are the runner container's resources as
	// Kubernetes quantities ("2", "500m", "8Gi").
	Requests, Limits Resources
	// GPU is the extended resource the runner's GPUs come as; nil is none
	// unless the job asks for GPUs, then DefaultGPUResource.
	GPU                *GPU
	NodeSelector       map[string]string
	Tolerations        []Toleration
	RuntimeClassName   string
	PriorityClassName  string
	ServiceAccountName string
	// AutomountServiceAccountToken mounts the service account's token in
	// the Pod; off unless the pool asks (a job could otherwise act as it).
	AutomountServiceAccountToken bool
	SecurityContext              SecurityContext
	// Env are extra variables of the runner container.
	Env map[string]string
}

// DefaultGPUResource is the extended resource of NVIDIA's device plugin.
const DefaultGPUResource = "nvidia.com/gpu"

// DefaultUser is the user and group a non-root runner runs as when the
// pool names none: uid 1001 is the "runner" user of GitHub's runner image
// (ghcr.io/actions/actions-runner), which the runner recipe builds on.
const DefaultUser = 1001

// Resources are a container's cpu, memory and ephemeral-storage quantities.
type Resources struct {
	CPU              string
	Memory           string
	EphemeralStorage string
}

// GPU names the GPUs' extended resource and how many each runner gets.
type GPU struct {
	Resource string
	Count    int
}

// Toleration is one Pod toleration.
type Toleration struct {
	Key, Operator, Value, Effect string
	// Seconds is tolerationSeconds (NoExecute only); nil when unset.
	Seconds *int64
}

// SecurityContext is the runner's security context. A runner runs as a
// non-root user (DefaultUser unless RunAsUser says) with no privilege
// escalation and every capability dropped, unless the pool is Privileged
// (Docker in Docker, say) or names user 0.
type SecurityContext struct {
	RunAsUser, RunAsGroup, FSGroup *int64
	// RunAsNonRoot asks the kubelet to refuse a root user even when the
	// pool is privileged.
	RunAsNonRoot bool
	Privileged   bool
}

// nonRoot reports whether the runner must not run as root.
func (s SecurityContext) nonRoot() bool {
	return s.RunAsNonRoot || !s.Privileged && (s.RunAsUser == nil || *s.RunAsUser != 0)
}

// Sizes are a runner's neutral sizes from its job's dynamic label, 0 where
// the label asks nothing (the pool's settings apply).
type Sizes struct {
	VCPU      int
	MemoryGiB int
	GPUs      int
	DiskGiB   int
}

// Resources maps the pool's settings and a runner's sizes to the runner
// container's requests and limits. A size the job asked for sets its
// request, and raises the pool's limit to it where the limit is lower;
// GPUs are requested and limited alike, as Kubernetes requires of
// extended resources. A quantity that does not parse is an error naming it.
func (p Pool) Resources(s Sizes) (corev1.ResourceRequirements, error) {
	req, lim := corev1.ResourceList{}, corev1.ResourceList{}
	put := func(m corev1.ResourceList, name corev1.ResourceName, what, v string) error {
		if v == "" {
			return nil
		}
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return fmt.Errorf("%s %s %q: %w", what, name, v, err)
		}
		m[name] = q
		return nil
	}
	for _, e := range []struct {
		name     corev1.ResourceName
		req, lim string
	}{
		{corev1.ResourceCPU, p.Requests.CPU, p.Limits.CPU},
		{corev1.ResourceMemory, p.Requests.Memory, p.Limits.Memory},
		{corev1.ResourceEphemeralStorage, p.Requests.EphemeralStorage, p.Limits.EphemeralStorage},
	} {
		if err := put(req, e.name, "request", e.req); err != nil {
			return corev1.ResourceRequirements{}, err
		}
		if err := put(lim, e.name, "limit", e.lim); err != nil {
			return corev1.ResourceRequirements{}, err
		}
	}
	sized := func(name corev1.ResourceName, q resource.Quantity) {
		req[name] = q
		if l, ok := lim[name]; ok && l.Cmp(q) < 0 {
			lim[name] = q
		}
	}
	if s.VCPU > 0 {
		sized(corev1.ResourceCPU, *resource.NewQuantity(int64(s.VCPU), resource.DecimalSI))
	}
	if s.MemoryGiB > 0 {
		sized(corev1.ResourceMemory, *resource.NewQuantity(int64(s.MemoryGiB)<<30, resource.BinarySI))
	}
	if s.DiskGiB > 0 {
		sized(corev1.ResourceEphemeralStorage, *resource.NewQuantity(int64(s.DiskGiB)<<30, resource.BinarySI))
	}
	gpus, name := 0, DefaultGPUResource
	if p.GPU != nil {
		gpus = p.GPU.Count
		if p.GPU.Resource != "" {
			name = p.GPU.Resource
		}
	}
	if s.GPUs > 0 {
		gpus = s.GPUs
	}
	if gpus > 0 {
		q := resource.MustParse(strconv.Itoa(gpus))
		req[corev1.ResourceName(name)], lim[corev1.ResourceName(name)] = q, q
	}
	out := corev1.ResourceRequirements{}
	if len(req) > 0 {
		out.Requests = req
	}
	if len(lim) > 0 {
		out.Limits = lim
	}
	return out, nil
}
