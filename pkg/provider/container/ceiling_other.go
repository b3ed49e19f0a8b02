//go:build !linux

package container

import "runtime"

// HostCeiling is this host as a Ceiling: its CPUs (its memory is not read
// here: no bound).
func HostCeiling() Ceiling { return Ceiling{NanoCPUs: int64(runtime.NumCPU()) * 1e9} }
