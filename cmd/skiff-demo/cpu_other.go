//go:build !unix

package main

import "time"

// childrenCPU is unknown off Unix.
func childrenCPU() (time.Duration, bool) { return 0, false }

// selfCPU is unknown off Unix.
func selfCPU() (time.Duration, bool) { return 0, false }
