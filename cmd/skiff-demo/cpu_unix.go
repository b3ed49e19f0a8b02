//go:build unix

package main

import (
	"syscall"
	"time"
)

// childrenCPU is the CPU time (user and system) of the child processes
// this process has waited for: in the demo, the runners'.
func childrenCPU() (time.Duration, bool) { return rusageCPU(syscall.RUSAGE_CHILDREN) }

// selfCPU is this process's own CPU time (user and system).
func selfCPU() (time.Duration, bool) { return rusageCPU(syscall.RUSAGE_SELF) }

func rusageCPU(who int) (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
