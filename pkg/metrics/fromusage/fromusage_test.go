package fromusage_test

import (
	"testing"

	"github.com/skiffci/skiff/pkg/metrics/fromusage"
	"github.com/skiffci/skiff/pkg/provider/podusage"
)

// TestPeaks: CPU seconds, peak memory in GiB and in % of the limit (none
// without one, at most 100 % for a peak the kernel let past the limit),
// each GPU's peaks, and nothing for what was not measured.
func TestPeaks(t *testing.T) {
	t.Parallel()
	u := podusage.Usage{V: podusage.Version, PeakMemoryBytes: 1 << 30, CPUSeconds: 12.5,
		GPUs: []podusage.GPU{{Index: 1, PeakMemoryMiB: 2048, PeakUtilPct: 87}}}
	got := fromusage.Peaks(u, 4<<30)
	if got.CPUSeconds == nil || *got.CPUSeconds != 12.5 || got.MemoryPeakGiB == nil || *got.MemoryPeakGiB != 1 ||
		got.MemoryPeak == nil || *got.MemoryPeak != 25 {
		t.Errorf("peaks %+v: want 12.5 CPU seconds, 1 GiB, 25%% of a 4 GiB limit", got)
	}
	if len(got.GPUs) != 1 || got.GPUs[0].Index != 1 || *got.GPUs[0].Utilization != 87 || *got.GPUs[0].MemoryUsedMiB != 2048 {
		t.Errorf("GPU peaks %+v", got.GPUs)
	}
	if got := fromusage.Peaks(u, 0); got.MemoryPeak != nil || got.MemoryPeakGiB == nil {
		t.Errorf("no limit: memory %% %v, GiB %v; want none, and the GiB still", got.MemoryPeak, got.MemoryPeakGiB)
	}
	if got := fromusage.Peaks(u, 512<<20); got.MemoryPeak == nil || *got.MemoryPeak != 100 {
		t.Errorf("a peak above the limit: %v %%, want 100", got.MemoryPeak)
	}
	if got := fromusage.Peaks(podusage.Usage{V: podusage.Version}, 4<<30); got.CPUSeconds != nil || got.MemoryPeakGiB != nil ||
		got.MemoryPeak != nil || got.GPUs != nil {
		t.Errorf("nothing measured gave peaks %+v", got)
	}
}
