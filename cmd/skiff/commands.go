package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// Exit codes of every subcommand.
const (
	exitOK     = 0 // success
	exitFailed = 1 // the input was read but failed: invalid file, unresolvable labels
	exitUsage  = 2 // bad flags or arguments
)

// command is one subcommand. Each parses its own flag.FlagSet.
type command struct {
	name    string
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

// commands lists the subcommands in the order help prints them. Later
// subcommands (local, status, metrics) are added here.
func commands() []command {
	return []command{
		{"validate", "check a pools file: schema, then semantic checks", runValidate},
		{"plan", "show what a job's runs-on labels would launch, with an hourly price estimate", runPlan},
		{"app-manifest", "print the GitHub App manifest for a deployed webhook URL", runAppManifest},
		{"setup", "create the GitHub App for local mode from a page on 127.0.0.1 (key in the data directory)", runSetup},
		{"metrics", "report what jobs used (opt-in metrics records): usage, cost, right-sizing", runMetrics},
		{"local", "run the whole pipeline on this machine: webhook, queue, scale-up, runners as local processes", runLocal},
		{"status", "runners by pool and state, queue depth, dead letters, oldest queued job (AWS)", runStatus},
	}
}

func dispatch(cmds []command, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(cmds, stderr)
		return exitUsage
	}
	name := args[0]
	switch name {
	case "help", "-h", "-help", "--help":
		usage(cmds, stdout)
		return exitOK
	}
	for _, c := range cmds {
		if c.name == name {
			return c.run(args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "skiff: unknown command %q\n\n", name)
	usage(cmds, stderr)
	return exitUsage
}

func usage(cmds []command, w io.Writer) {
	fmt.Fprintln(w, "usage: skiff <command> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commands:")
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-13s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, `Run "skiff <command> -h" for a command's flags.`)
}

// newFlags returns a FlagSet for a subcommand that reports errors instead of exiting.
func newFlags(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("skiff "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: skiff %s %s\n\nflags:\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args; the second result is the exit code to return when
// parsing did not succeed (help was asked for, or the flags were wrong).
func parseFlags(fs *flag.FlagSet, args []string) (bool, int) {
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return false, exitOK
	case err != nil:
		return false, exitUsage
	case fs.NArg() > 0:
		fmt.Fprintf(fs.Output(), "%s: unexpected argument %q\n", fs.Name(), strings.Join(fs.Args(), " "))
		fs.Usage()
		return false, exitUsage
	}
	return true, exitOK
}
