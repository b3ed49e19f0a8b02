//go:build !go1.27

package gotoolchain

// This file compiles only with a Go before 1.27, whose standard library has
// known vulnerabilities reachable from skiff: the build stops here, naming
// the Go to use.
var _ = skiff_needs_Go_1_27_3_or_later__install_it_or_set_GOTOOLCHAIN_go1_27_3
