package scaledown

import (
	"context"

	"github.com/skiffci/skiff/pkg/metrics"
	"github.com/skiffci/skiff/pkg/metrics/cwpeaks"
)

// UsageSource is a provider that measures its runners itself, instead of
// an agent reporting to CloudWatch: local processes (the process
// provider's cgroup, /proc and nvidia-smi samples); later Slurm's sacct
// and Kubernetes' termination messages.
type UsageSource interface {
	// Peaks returns what an ended runner used; false when it was not
	// measured (still running, unknown, or started by an earlier process).
	Peaks(instanceID string) (*metrics.Peaks, bool)
}

// PendingUsage is a UsageSource that can tell a runner whose usage is not
// there yet but will be (the Kubernetes provider: a Pod whose job has
// completed but whose runner has not yet exited and left its termination
// message). Its records wait for the next pass, within the writer's Wait.
type PendingUsage interface {
	UsagePending(instanceID string) bool
}

// ProviderPeaks is the PeakReader of a provider that measures its runners:
// a runner's peaks are there as soon as it has ended, so nothing is
// pending unless the source is a PendingUsage that says so; a runner it
// did not measure gets no peaks (its record names the agent missing).
type ProviderPeaks struct{ Source UsageSource }

var _ PeakReader = ProviderPeaks{}

// Read implements PeakReader.
func (p ProviderPeaks) Read(_ context.Context, windows []cwpeaks.Window) (cwpeaks.Result, error) {
	res := cwpeaks.Result{Peaks: map[metrics.Key]*metrics.Peaks{}}
	pending, _ := p.Source.(PendingUsage)
	for _, w := range windows {
		if pk, ok := p.Source.Peaks(w.InstanceID); ok {
			res.Peaks[w.Key] = pk
		} else if pending != nil && pending.UsagePending(w.InstanceID) {
			res.Pending = append(res.Pending, w)
		}
	}
	return res, nil
}
