//go:build !linux

package process

import (
	"syscall"
	"time"
)

// Elsewhere than Linux there is no /proc and no cgroup: a runner's usage is
// its rusage at exit (CPU time and the largest resident set), and the host
// is its CPU count and GPUs.

type procTable struct{}

func scanProcs() procTable                                  { return procTable{} }
func (procTable) group(int) []int                           { return nil }
func (procTable) tree([]int) (float64, uint64)              { return 0, 0 }
func cgroupParent(string) string                            { return "" }
func newCgroup(string, string) (string, int, bool)          { return "", -1, false }
func startInCgroup(*syscall.SysProcAttr, int)               {}
func closeFD(int)                                           {}
func cgroupPids(string) []int                               { return nil }
func readCgroup(string) cgroupTotals                        { return cgroupTotals{} }
func removeCgroup(string) bool                              { return true }
func adoptOrphans() bool                                    { return false }
func waitOrphan(int, time.Duration) (*syscall.Rusage, bool) { return nil, false }

// ProcessCPU is unknown elsewhere than Linux (no /proc).
func ProcessCPU(int) (time.Duration, bool) { return 0, false }
func describeHost(smi string) Host {
	h := Host{CPUs: numCPU()}
	h.GPUModel, h.GPUs = hostGPUs(smi)
	return h
}
