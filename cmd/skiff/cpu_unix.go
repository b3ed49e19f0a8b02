//go:build unix

package main

import (
	"syscall"
	"time"
)

// childrenCPU is the CPU time (user and system) of the child processes
// this process has waited for: in the demo, the runners'.
func childrenCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
