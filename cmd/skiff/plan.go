package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/skiffci/skiff/pkg/pool"
)

// runPlan implements "skiff plan -f pools.yaml --labels self-hosted,gpu [--repo owner/name]".
func runPlan(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("plan", `-f pools.yaml --labels "self-hosted,skiff/gpu=1" [--repo owner/name]`, stderr)
	file := fs.String("f", "pools.yaml", "the pools file")
	labels := fs.String("labels", "", "the job's runs-on labels, comma-separated (required)")
	repo := fs.String("repo", "", "the job's repository, owner/name; checks pool scopes when given")
	if ok, code := parseFlags(fs, args); !ok {
		return code
	}
	list := splitLabels(*labels)
	if len(list) == 0 {
		fmt.Fprintln(stderr, "skiff plan: --labels is required, e.g. --labels \"self-hosted,linux,x64\"")
		fs.Usage()
		return exitUsage
	}
	if *repo != "" && strings.Count(*repo, "/") != 1 {
		fmt.Fprintf(stderr, "skiff plan: --repo %q is not owner/name\n", *repo)
		return exitUsage
	}
	cfg, err := pool.Load(*file)
	if err != nil {
		return reportLoadError(err, stderr)
	}
	var spec pool.Spec
	if *repo != "" {
		spec, err = cfg.ResolveRepo(list, *repo)
	} else {
		spec, err = cfg.Resolve(list)
	}
	if err != nil {
		fmt.Fprintf(stderr, "no launch (%s): %v\n", pool.Reason(err), err)
		if hint := hintFor(err, *repo); hint != "" {
			fmt.Fprintf(stderr, "    fix: %s\n", hint)
		}
		return exitFailed
	}
	if err := pool.WritePlan(stdout, cfg, spec); err != nil {
		fmt.Fprintf(stderr, "skiff plan: %v\n", err)
		return exitFailed
	}
	return exitOK
}

// splitLabels accepts "a,b", "a, b" and "[a, b]".
func splitLabels(s string) []string {
	s = strings.TrimSpace(s)
	s = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	var out []string
	for _, l := range strings.Split(s, ",") {
		if l = strings.Trim(strings.TrimSpace(l), `"'`); l != "" {
			out = append(out, l)
		}
	}
	return out
}

func hintFor(err error, repo string) string {
	switch {
	case errors.Is(err, pool.ErrNoPool):
		return "every label of the job (except skiff/...) must be a label of one pool, or self-hosted, linux, x64/arm64"
	case errors.Is(err, pool.ErrAmbiguous) && repo == "":
		return "add a label that tells the pools apart, pin one with skiff/pool=NAME, or pass --repo if the pools are scoped"
	case errors.Is(err, pool.ErrAmbiguous):
		return "add a label that tells the pools apart, or pin one with skiff/pool=NAME"
	case errors.Is(err, pool.ErrOutOfBounds):
		return "ask for less, or raise the pool's dynamic: bound in the pools file"
	case errors.Is(err, pool.ErrUnknownKey), errors.Is(err, pool.ErrMalformed):
		return "see docs/pools.md for the skiff/ label grammar"
	case errors.Is(err, pool.ErrRepositoryNotAllowed):
		return "add the repository (or its owner) to the pool's scope"
	}
	return ""
}
