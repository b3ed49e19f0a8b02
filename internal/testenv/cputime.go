package testenv

import (
	"syscall"
	"time"
)

// CPUTime is this process's CPU time so far, user and system: what the
// benchmarks report per operation (cpu-s/op, cpu-µs/event). It panics if
// the kernel will not say, which getrusage(RUSAGE_SELF) never does but for
// a bad argument.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic("getrusage: " + err.Error())
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
