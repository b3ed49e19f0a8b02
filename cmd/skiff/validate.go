package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/skiffci/skiff/pkg/pool"
)

// runValidate implements "skiff validate -f pools.yaml".
func runValidate(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("validate", "-f pools.yaml", stderr)
	file := fs.String("f", "pools.yaml", "the pools file to check")
	strict := fs.Bool("strict", false, "fail on warnings too")
	if ok, code := parseFlags(fs, args); !ok {
		return code
	}
	cfg, err := pool.Load(*file)
	if err != nil {
		return reportLoadError(err, stderr)
	}
	printDiagnostics(stderr, cfg.Warnings)
	fmt.Fprintf(stdout, "%s: ok: %d pool(s), %d warning(s)\n", *file, len(cfg.Pools), len(cfg.Warnings))
	if *strict && len(cfg.Warnings) > 0 {
		return exitFailed
	}
	return exitOK
}

// reportLoadError prints why a pools file did not load and returns the exit code.
func reportLoadError(err error, stderr io.Writer) int {
	var verr *pool.ValidationError
	if errors.As(err, &verr) {
		printDiagnostics(stderr, verr.Diagnostics)
		errs := 0
		for _, d := range verr.Diagnostics {
			if d.Severity == pool.SeverityError {
				errs++
			}
		}
		fmt.Fprintf(stderr, "%d error(s)\n", errs)
		return exitFailed
	}
	fmt.Fprintf(stderr, "skiff: %v\n", err)
	return exitFailed
}

func printDiagnostics(w io.Writer, diags []pool.Diagnostic) {
	for _, d := range diags {
		fmt.Fprintf(w, "%s:%d:%d: %s: ", d.File, d.Line, d.Column, d.Severity)
		if d.Path != "" {
			fmt.Fprintf(w, "%s: ", d.Path)
		}
		fmt.Fprintln(w, d.Message)
		if d.Fix != "" {
			fmt.Fprintf(w, "    fix: %s\n", d.Fix)
		}
	}
}
