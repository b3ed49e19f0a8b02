package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/pool/poolfile"
)

// runPlan implements "skiff plan -f pools.yaml --labels self-hosted,gpu [--repo owner/name]
// [--event pull_request] [--fork] [--visibility public] [--association NONE]".
func runPlan(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("plan", `-f pools.yaml --labels "self-hosted,skiff/gpu=1" [--repo owner/name] [--event pull_request --fork] [--visibility public]`, stderr)
	file := fs.String("f", "pools.yaml", "the pools file")
	labels := fs.String("labels", "", "the job's runs-on labels, comma-separated (required)")
	repo := fs.String("repo", "", "the job's repository, owner/name; checks pool scopes when given")
	event := fs.String("event", "", "the event that triggered the run (push, pull_request, ...); checks the pool's policy on who may run")
	fork := fs.Bool("fork", false, "the run's code comes from a fork (a pull request from a fork)")
	visibility := fs.String("visibility", "", "the repository's visibility: private (default when checking), internal or public")
	association := fs.String("association", "", "the pull request author's association (OWNER, MEMBER, COLLABORATOR, CONTRIBUTOR, FIRST_TIME_CONTRIBUTOR, NONE)")
	deployment := fs.String("deployment", "skiff", "the deployment (the stack's name, or its deployment context): names a baked image's SSM parameter")
	if ok, code := parseFlags(fs, args); !ok {
		return code
	}
	checkPolicy := *event != "" || *fork || *visibility != "" || *association != ""
	facts := pool.Facts{Visibility: pool.Visibility(*visibility), Trigger: &pool.Trigger{Event: *event, Fork: *fork, AuthorAssociation: *association}}
	switch facts.Visibility {
	case "":
		facts.Visibility = pool.VisibilityPrivate
	case pool.VisibilityPrivate, pool.VisibilityInternal, pool.VisibilityPublic:
	default:
		fmt.Fprintf(stderr, "skiff plan: --visibility %q is not private, internal or public\n", *visibility)
		return exitUsage
	}
	if facts.Trigger.Event == "" {
		facts.Trigger.Event = "push"
		if *fork {
			facts.Trigger.Event = "pull_request"
		}
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
	cfg, err := poolfile.Load(*file)
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
	if checkPolicy {
		if err := cfg.Pool(spec.Pool).Admit(facts); err != nil {
			fmt.Fprintf(stderr, "no launch (%s): %v\n", pool.Reason(err), err)
			if hint := hintFor(err, *repo); hint != "" {
				fmt.Fprintf(stderr, "    fix: %s\n", hint)
			}
			return exitFailed
		}
	}
	if err := writePlanFor(stdout, cfg, spec, *deployment); err != nil {
		fmt.Fprintf(stderr, "skiff plan: %v\n", err)
		return exitFailed
	}
	if checkPolicy {
		fmt.Fprintf(stdout, "\ndecision: launch (%s repository, %s)\n", facts.Visibility, triggerText(facts.Trigger))
	}
	return exitOK
}

// triggerText describes a run's trigger for the plan's decision line.
func triggerText(t *pool.Trigger) string {
	s := t.Event + " run"
	if t.Fork {
		s += " from a fork"
		if t.AuthorAssociation != "" {
			s += " by a " + strings.ToLower(t.AuthorAssociation)
		}
	}
	return s
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

// backendRefused reports whether a resolution failed on what the pool's
// backend cannot do rather than on a bound the operator could raise.
func backendRefused(err error) bool {
	var re *pool.ResolveError
	return errors.As(err, &re) && (strings.Contains(re.Bound, " runs on ") || strings.Contains(re.Bound, "families are EC2's"))
}

func hintFor(err error, repo string) string {
	switch {
	case errors.Is(err, pool.ErrNoPool):
		return "every label of the job (except skiff/...) must be a label of one pool, or self-hosted, linux, x64/arm64"
	case errors.Is(err, pool.ErrAmbiguous) && repo == "":
		return "add a label that tells the pools apart, pin one with skiff/pool=NAME, or pass --repo if the pools are scoped"
	case errors.Is(err, pool.ErrAmbiguous):
		return "add a label that tells the pools apart, or pin one with skiff/pool=NAME"
	case errors.Is(err, pool.ErrOutOfBounds) && backendRefused(err):
		return "the pool's backend cannot do this: drop the key from the job's skiff/ label, or send the job to a pool whose backend can (docs/pools.md#backends)"
	case errors.Is(err, pool.ErrOutOfBounds):
		return "ask for less, or raise the pool's dynamic: bound in the pools file"
	case errors.Is(err, pool.ErrUnknownKey), errors.Is(err, pool.ErrMalformed):
		return "see docs/pools.md for the skiff/ label grammar"
	case errors.Is(err, pool.ErrRepositoryNotAllowed):
		return "add the repository (or its owner) to the pool's scope"
	case errors.Is(err, pool.ErrPublicRepository):
		return "public repositories run only on a pool with visibility: [..., public]; see docs/pools.md#who-may-run before adding it"
	case errors.Is(err, pool.ErrForkPullRequest):
		return "pull requests from forks run only on a pool with forkPullRequests: allow or collaborators; see docs/pools.md#who-may-run"
	}
	return ""
}
