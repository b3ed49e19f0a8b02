package testenv

import "syscall"

// daemonAttr makes a test server die with the test binary.
func daemonAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
