package metrics

import (
	"context"
	"time"

	"github.com/skiffci/skiff/pkg/provider/kubernetes/podusage"
)

// UsagePeaks is a metrics record's peaks from what a runner's container
// measured of itself (podusage): CPU time, peak memory (in GiB, and as a
// percentage of memLimit, the container's memory limit in bytes, where it
// is above 0) and each GPU's peak utilisation and memory.
func UsagePeaks(u podusage.Usage, memLimit int64) *Peaks {
	pk := &Peaks{}
	if u.CPUSeconds > 0 {
		c := u.CPUSeconds
		pk.CPUSeconds = &c
	}
	if u.PeakMemoryBytes > 0 {
		gib := float64(u.PeakMemoryBytes) / (1 << 30)
		pk.MemoryPeakGiB = &gib
		if memLimit > 0 {
			pct := min(float64(u.PeakMemoryBytes)/float64(memLimit)*100, 100)
			pk.MemoryPeak = &pct
		}
	}
	for _, g := range u.GPUs {
		util, mem := float64(g.PeakUtilPct), float64(g.PeakMemoryMiB)
		pk.GPUs = append(pk.GPUs, GPUPeak{Index: g.Index, Utilization: &util, MemoryUsedMiB: &mem})
	}
	return pk
}

// PeakReader reads the resource peaks of many finished jobs at once: the
// CloudWatch agent's (package cwpeaks), a provider's own measurements, or an
// accounting's. An error leaves the windows it could not read in Pending.
type PeakReader interface {
	Read(ctx context.Context, windows []PeakWindow) (PeakResult, error)
}

// PeakWindow is one finished job's window on one instance.
type PeakWindow struct {
	Key          Key
	InstanceID   string
	Pool         string
	InstanceType string
	Start, End   time.Time
}

// PeakResult is what a PeakReader found.
type PeakResult struct {
	// Peaks holds the peaks of each window read; a nil value means the
	// agent sent nothing for it (the Peaks contract).
	Peaks map[Key]*Peaks
	// Pending are the windows not read: within the metric lag, or in a call that
	// failed or came back partial. Read them again later.
	Pending []PeakWindow
	// Calls is how many calls the reader made (GetMetricData calls in
	// CloudWatch).
	Calls int
}
