package container

import (
	"runtime"
	"syscall"
)

// HostCeiling is this host as a Ceiling: its CPUs and its memory (no GPU
// bound), what skiff local's container pools will not overcommit.
func HostCeiling() Ceiling {
	c := Ceiling{NanoCPUs: int64(runtime.NumCPU()) * 1e9}
	var si syscall.Sysinfo_t
	if syscall.Sysinfo(&si) == nil {
		c.MemoryBytes = int64(si.Totalram) * int64(si.Unit)
	}
	return c
}
