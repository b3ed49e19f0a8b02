package writer

import (
	"context"
	"fmt"

	"github.com/skiffci/skiff/pkg/metrics"
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

var _ metrics.PeakReader = ProviderPeaks{}

// Read implements PeakReader.
func (p ProviderPeaks) Read(_ context.Context, windows []metrics.PeakWindow) (metrics.PeakResult, error) {
	res := metrics.PeakResult{Peaks: map[metrics.Key]*metrics.Peaks{}}
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

// AccountedSource is a provider whose runners' usage its backend's
// accounting keeps, read for many runners at once (Slurm's sacct).
type AccountedSource interface {
	// Accounted returns the usage of the ended runners the accounting
	// knows, keyed by instance id; a runner it does not know yet is
	// absent (read again later), one it never will is present with nil
	// peaks. An error means no answer this time.
	Accounted(ctx context.Context, instanceIDs []string) (map[string]*metrics.Peaks, error)
}

// AccountedPeaks is the PeakReader of an AccountedSource: one read for
// all the pass's windows; a runner the accounting does not know yet is
// pending, and its record waits (at most the writer's Wait).
type AccountedPeaks struct{ Source AccountedSource }

var _ metrics.PeakReader = AccountedPeaks{}

// Read implements PeakReader.
func (a AccountedPeaks) Read(ctx context.Context, windows []metrics.PeakWindow) (metrics.PeakResult, error) {
	ids := make([]string, 0, len(windows))
	seen := map[string]bool{}
	for _, w := range windows {
		if !seen[w.InstanceID] {
			seen[w.InstanceID] = true
			ids = append(ids, w.InstanceID)
		}
	}
	got, err := a.Source.Accounted(ctx, ids)
	if err != nil {
		return metrics.PeakResult{Pending: windows, Calls: 1}, fmt.Errorf("reading the accounting: %w", err)
	}
	res := metrics.PeakResult{Peaks: map[metrics.Key]*metrics.Peaks{}, Calls: 1}
	for _, w := range windows {
		pk, ok := got[w.InstanceID]
		if !ok {
			res.Pending = append(res.Pending, w)
			continue
		}
		res.Peaks[w.Key] = pk
	}
	return res, nil
}
