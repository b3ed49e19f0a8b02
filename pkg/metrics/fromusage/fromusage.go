// Package fromusage converts what a runner's entrypoint measured of its
// container (package podusage: the message cmd/skiff-podhelper leaves in a
// Kubernetes Pod or a Podman/Docker container) into a metrics record's
// peaks. It is the one place both providers that run the helper turn its
// message into peaks; podusage itself stays free of metrics, so that the
// helper stays small.
package fromusage

import (
	"github.com/skiffci/skiff/pkg/metrics"
	"github.com/skiffci/skiff/pkg/provider/podusage"
)

// Peaks is a metrics record's peaks from a runner's usage: CPU time, peak
// memory in GiB (and as a percentage of memoryLimitBytes, the runner
// container's memory limit, where it has one: > 0), and each GPU's peak
// utilisation and memory. What the helper did not measure stays nil.
func Peaks(u podusage.Usage, memoryLimitBytes int64) *metrics.Peaks {
	pk := &metrics.Peaks{}
	if u.CPUSeconds > 0 {
		c := u.CPUSeconds
		pk.CPUSeconds = &c
	}
	if u.PeakMemoryBytes > 0 {
		gib := float64(u.PeakMemoryBytes) / (1 << 30)
		pk.MemoryPeakGiB = &gib
		if memoryLimitBytes > 0 {
			pct := min(float64(u.PeakMemoryBytes)/float64(memoryLimitBytes)*100, 100)
			pk.MemoryPeak = &pct
		}
	}
	for _, g := range u.GPUs {
		util, mem := float64(g.PeakUtilPct), float64(g.PeakMemoryMiB)
		pk.GPUs = append(pk.GPUs, metrics.GPUPeak{Index: g.Index, Utilization: &util, MemoryUsedMiB: &mem})
	}
	return pk
}
