//go:build !linux

package testenv

import "syscall"

// daemonAttr: without a parent-death signal, Main stops the servers.
func daemonAttr() *syscall.SysProcAttr { return nil }
