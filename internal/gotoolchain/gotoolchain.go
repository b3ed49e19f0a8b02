// Package gotoolchain refuses to compile skiff with a Go older than the
// patched one. Every binary imports it (pkg/names imports it for the
// services, the CLI and the CDK app; the pod helper and the stand-in
// import it themselves).
//
// Two checks, because either alone has a gap:
//
//   - go.mod's `go 1.27.3` line: the go command (1.21 and later) refuses to
//     build the module with an older toolchain, patch level included. With
//     GOTOOLCHAIN=local it stops with "go.mod requires go >= 1.27.3 (running
//     go 1.26.8; GOTOOLCHAIN=local)"; with the default GOTOOLCHAIN=auto it
//     fetches go1.27.3 from the module proxy and builds with that.
//   - old.go, compiled only by a Go before 1.27 (`//go:build !go1.27`), names
//     an undefined identifier that says which Go to use. It catches what the
//     go line cannot: a go command from before 1.21 (which treats the line as
//     advisory) or a go.mod whose line was lowered. Build tags know release
//     lines, not patch levels, so go1.27.0 to go1.27.2 are the go line's.
//
// TestToolchain in this package checks both with the machine's own Go.
package gotoolchain

// Required is the oldest Go skiff builds with: the first release of its line
// with fixes for the standard library's known vulnerabilities reachable from
// skiff (net/http, crypto/tls, crypto/x509). go.mod's go line says the same.
const Required = "go1.27.3"
