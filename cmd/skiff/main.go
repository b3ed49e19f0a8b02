// Command skiff is the operator CLI: it checks pools files and shows what a
// job's labels would launch. Run "skiff help" for the subcommands.
package main

import (
	"io"
	"os"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// run executes one subcommand and returns the process exit code:
// exitOK, exitFailed (the check or resolution failed) or exitUsage.
func run(args []string, stdout, stderr io.Writer) int {
	return dispatch(commands(), args, stdout, stderr)
}
