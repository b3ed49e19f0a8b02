package pool

import (
	"fmt"
	"strconv"
	"strings"
)

// Container is a pool's container: section: one container per runner on
// a Docker or Podman engine of the machine skiff runs on.
type Container struct {
	// Image is the runner image (built from infra/kubernetes/runner).
	Image string
	// CPU is the runner's CPU limit in CPUs ("2", "0.5"); "" for none.
	CPU string
	// Memory is the runner's memory limit as a quantity ("8Gi", "512Mi");
	// "" for none.
	Memory string
	// Pids caps the runner's processes; 0 takes DefaultContainerPids.
	Pids int
	// DiskGiB caps the runner's writable layer where the engine's storage
	// driver can (overlay on xfs with quotas); 0 for none.
	DiskGiB int
	// GPUs is "" (none unless the job asks for gpu=), "all", or a count.
	GPUs string
	// GPUMode is how GPUs are given: ContainerGPUCDI (CDI devices
	// nvidia.com/gpu=N, Podman and Docker 25+) or ContainerGPURequest (the
	// engine's device requests, Docker with NVIDIA's toolkit).
	GPUMode string
	// Network is ContainerNetworkRunner (the default: a network of the
	// runner's own) or ContainerNetworkHost (the host's; validate warns).
	Network string
	// Mounts are host paths mounted read-only into every runner.
	Mounts []ContainerMount
	// Pull is when the image is pulled: ContainerPullMissing (default),
	// ContainerPullAlways or ContainerPullNever.
	Pull string
	// User is the user the runner runs as (uid or uid:gid); "" for the
	// image's own.
	User string
}

// ContainerMount is one read-only mount of a host path.
type ContainerMount struct {
	Source, Target string
}

// The values of the container: section's enumerations, and its defaults.
const (
	ContainerGPUCDI        = "cdi"
	ContainerGPURequest    = "request"
	ContainerNetworkRunner = "runner"
	ContainerNetworkHost   = "host"
	ContainerPullMissing   = "missing"
	ContainerPullAlways    = "always"
	ContainerPullNever     = "never"
	// DefaultContainerPids bounds a runner's processes: a fork bomb in a
	// job stops there, while a parallel build (make -j, a test runner's
	// workers) stays well under it.
	DefaultContainerPids = 4096
)

// decodeContainer reads a container: section.
func decodeContainer(v map[string]any) *Container {
	c := &Container{Image: str(v["image"]), CPU: quantityString(v["cpu"]), Memory: str(v["memory"]), Pids: num(v["pids"]),
		DiskGiB: num(v["diskGiB"]), GPUs: quantityString(v["gpus"]), GPUMode: str(v["gpuMode"]), Network: str(v["network"]),
		Pull: str(v["pull"]), User: quantityString(v["user"])}
	if c.GPUMode == "" {
		c.GPUMode = ContainerGPUCDI
	}
	if c.Network == "" {
		c.Network = ContainerNetworkRunner
	}
	if c.Pull == "" {
		c.Pull = ContainerPullMissing
	}
	if c.Pids == 0 {
		c.Pids = DefaultContainerPids
	}
	if ms, ok := v["mounts"].([]any); ok {
		for _, m := range ms {
			if mm, ok := m.(map[string]any); ok {
				c.Mounts = append(c.Mounts, ContainerMount{Source: str(mm["source"]), Target: str(mm["target"])})
			}
		}
	}
	return c
}

// quantityString reads a YAML scalar written as a number or a string.
func quantityString(v any) string {
	switch x := v.(type) {
	case int64:
		return strconv.FormatInt(x, 10)
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	}
	return str(v)
}

// ContainerLimits are a runner container's limits: NanoCPUs (CPUs × 1e9),
// memory in bytes, pids, disk in GiB and GPUs ("all", a count, or "").
type ContainerLimits struct {
	NanoCPUs    int64
	MemoryBytes int64
	Pids        int64
	DiskGiB     int
	GPUs        string
}

// Limits maps the section and a runner's sizes to the container's limits
// as Kubernetes' limits are mapped (KubernetesResources): a size the job
// asked for raises the section's limit to it, and sets it where the
// section has none. A quantity that does not parse is an error naming it.
func (c *Container) Limits(s Sizes) (ContainerLimits, error) {
	l := ContainerLimits{Pids: int64(c.Pids), DiskGiB: c.DiskGiB, GPUs: c.GPUs}
	if c.CPU != "" {
		v, ok := ParseQuantity(c.CPU)
		if !ok || v <= 0 {
			return l, fmt.Errorf("cpu %q is not a number of CPUs", c.CPU)
		}
		l.NanoCPUs = int64(v * 1e9)
	}
	if c.Memory != "" {
		v, ok := ParseQuantity(c.Memory)
		if !ok || v <= 0 {
			return l, fmt.Errorf("memory %q is not a quantity such as 8Gi", c.Memory)
		}
		l.MemoryBytes = int64(v)
	}
	if n := int64(s.VCPU) * 1e9; n > l.NanoCPUs {
		l.NanoCPUs = n
	}
	if m := int64(s.MemoryGiB) << 30; m > l.MemoryBytes {
		l.MemoryBytes = m
	}
	if s.DiskGiB > l.DiskGiB {
		l.DiskGiB = s.DiskGiB
	}
	if s.GPUs > 0 {
		l.GPUs = strconv.Itoa(s.GPUs)
	}
	return l, nil
}

// String renders the limits for plan output, e.g.
// "--cpus=2 --memory=8Gi --pids-limit=4096 --gpus=1".
func (l ContainerLimits) String() string {
	var parts []string
	if l.NanoCPUs > 0 {
		parts = append(parts, "--cpus="+strconv.FormatFloat(float64(l.NanoCPUs)/1e9, 'f', -1, 64))
	}
	if l.MemoryBytes > 0 {
		parts = append(parts, "--memory="+bytesText(l.MemoryBytes))
	}
	if l.Pids > 0 {
		parts = append(parts, "--pids-limit="+strconv.FormatInt(l.Pids, 10))
	}
	if l.DiskGiB > 0 {
		parts = append(parts, fmt.Sprintf("--storage-opt size=%dG", l.DiskGiB))
	}
	if l.GPUs != "" {
		parts = append(parts, "--gpus="+l.GPUs)
	}
	return strings.Join(parts, " ")
}

// bytesText renders a byte count in the largest binary unit that divides it.
func bytesText(b int64) string {
	for _, u := range []struct {
		suffix string
		size   int64
	}{{"Gi", 1 << 30}, {"Mi", 1 << 20}, {"Ki", 1 << 10}} {
		if b%u.size == 0 {
			return strconv.FormatInt(b/u.size, 10) + u.suffix
		}
	}
	return strconv.FormatInt(b, 10)
}
