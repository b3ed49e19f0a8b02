// Command skiff-demo runs the whole pipeline on this machine (what `make
// demo` runs): skiff local against the GitHub simulator over HTTP, stand-in
// runners, a burst of signed webhooks, progress, a summary and skiff's
// invariants checked. It is a harness of its own, so that the operator's
// skiff links no simulator.
package main

import "os"

func main() { os.Exit(runDemo(os.Args[1:], os.Stdout, os.Stderr)) }
