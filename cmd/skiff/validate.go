package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/pool/poolfile"
	"github.com/skiffci/skiff/pkg/provider/process"
)

// runValidate implements "skiff validate -f pools.yaml".
func runValidate(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("validate", "-f pools.yaml", stderr)
	file := fs.String("f", "pools.yaml", "the pools file to check")
	strict := fs.Bool("strict", false, "fail on warnings too")
	releases := fs.String("runner-releases", "", "a saved page of GitHub's runner releases (curl -s https://api.github.com/repos/actions/runner/releases): warn about runner pins near the end of GitHub's window")
	if ok, code := parseFlags(fs, args); !ok {
		return code
	}
	cfg, err := poolfile.Load(*file)
	if err != nil {
		return reportLoadError(err, stderr)
	}
	printDiagnostics(stderr, cfg.Warnings)
	host := sandboxWarnings(cfg, process.CheckSandbox)
	if *releases != "" {
		rs, err := loadReleases(*releases)
		if err != nil {
			fmt.Fprintln(stderr, "skiff validate:", err)
			return exitUsage
		}
		host = append(host, runnerWarnings(cfg, rs, time.Now())...)
	}
	for _, w := range host {
		fmt.Fprintf(stderr, "%s: warning: %s\n", *file, w)
	}
	printForkApproval(stderr, *file, cfg)
	fmt.Fprintf(stdout, "%s: ok: %d pool(s), %d warning(s)\n", *file, len(cfg.Pools), len(cfg.Warnings)+len(host))
	writeBackends(stdout, cfg)
	writeGroups(stdout, cfg)
	if *strict && len(cfg.Warnings)+len(host) > 0 {
		return exitFailed
	}
	return exitOK
}

// sandboxWarnings says, for each process pool that needs the sandbox,
// that this machine cannot give one (check fails), and what that means.
func sandboxWarnings(cfg *pool.Config, check func(bwrap string) error) []string {
	var need []string
	for _, p := range cfg.Pools {
		if p.Backend == pool.BackendProcess && !p.Process.Unsandboxed() {
			need = append(need, p.Name)
		}
	}
	if len(need) == 0 {
		return nil
	}
	err := check("")
	if err == nil {
		return nil
	}
	var out []string
	for _, name := range need {
		out = append(out, fmt.Sprintf("pool %q: this machine cannot sandbox its runners (%v), so skiff local here refuses to launch them. "+
			"Install bubblewrap (apt-get install bubblewrap); or, to run them unsandboxed, write process: {sandbox: none} in the pool, "+
			"which lets each job read skiff's data directory (with the GitHub App's key) and the other runners' files and JIT configurations, "+
			"signal the other runners, and leave processes behind (docs/local.md#the-sandbox)", name, err))
	}
	return out
}

// writeBackends lists, for a file whose pools name backends, each backend's
// pools and what it can do; a file of EC2 pools in the older form (no
// sections) gets nothing more.
func writeBackends(w io.Writer, cfg *pool.Config) {
	sectioned := false
	byBackend := map[pool.Backend][]string{}
	for _, p := range cfg.Pools {
		byBackend[p.Backend] = append(byBackend[p.Backend], p.Name)
		sectioned = sectioned || p.Sectioned()
	}
	if !sectioned {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "backend\tpools\tcan do (docs/pools.md#backends)")
	for _, b := range pool.Backends {
		names := byBackend[b]
		if len(names) == 0 {
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", b, strings.Join(names, ", "), capabilitiesText(pool.Declared[b]))
	}
	_ = tw.Flush()
}

// writeGroups lists each pool's runner group and what GitHub admits to it.
func writeGroups(w io.Writer, cfg *pool.Config) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "pool\trunner group (docs/pools.md#who-may-run)")
	for _, p := range cfg.Pools {
		fmt.Fprintf(tw, "%s\t%s\n", p.Name, groupText(p.RunnerGroup, p.KeptGroup, p.Policy, p.Workflows))
	}
	_ = tw.Flush()
}

// capabilitiesText describes a backend's capabilities in one line.
func capabilitiesText(c pool.Capabilities) string {
	var can []string
	for _, x := range []struct {
		on   bool
		what string
	}{{c.Spot, "spot"}, {c.DynamicSizes, "dynamic sizes"}, {c.GPUs, "GPUs"}, {c.ReplayByToken, "replay by token"}, {c.OwnQueue, "a queue of its own (queueTimeout)"}} {
		if x.on {
			can = append(can, x.what)
		}
	}
	usage := "no per-job usage"
	if len(c.UsageSources) > 0 {
		usage = "usage from " + strings.Join(c.UsageSources, ", ")
	}
	return strings.Join(can, ", ") + "; " + usage
}

// reportLoadError prints why a pools file did not load and returns the exit code.
func reportLoadError(err error, stderr io.Writer) int {
	var verr *poolfile.ValidationError
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

// forkApprovalSetting is GitHub's organisation (or repository) setting that
// keeps a fork's pull request from running before a maintainer approves
// it, and the option that covers every fork author.
const (
	forkApprovalSetting = "Approval for running fork pull request workflows from contributors"
	forkApprovalOption  = "Require approval for all external contributors"
)

// printForkApproval warns about each pool that admits public repositories
// and refuses some forks (pool.Policy.NeedsForkApproval): skiff refuses
// the forks' jobs, but GitHub may still give one to the pool's runners,
// which skiff detects only after the fact. The warning depends on a GitHub
// setting skiff cannot read, so -strict does not fail on it.
func printForkApproval(w io.Writer, file string, cfg *pool.Config) {
	for _, p := range cfg.Pools {
		if !p.Policy.NeedsForkApproval() {
			continue
		}
		fmt.Fprintf(w, "%s: warning: pool %q admits public repositories and refuses pull requests from forks (forkPullRequests: %s), "+
			"which no runner group can express: GitHub may give a refused fork's job to a runner skiff launched for an admitted job, "+
			"and skiff only detects it (a security event, alarmed)\n", file, p.Name, forkPolicy(p.Policy))
		fmt.Fprintf(w, "    fix: in the organisation's Actions settings, set %q to %q (docs/pools.md, \"Who may run\"); "+
			"skiff cannot read the setting, so -strict does not fail on this warning\n", forkApprovalSetting, forkApprovalOption)
	}
}

// forkPolicy is the pool's fork policy as its file would say it.
func forkPolicy(p pool.Policy) pool.ForkPolicy {
	if p.ForkPullRequests == "" {
		return pool.DefaultForkPullRequests
	}
	return p.ForkPullRequests
}
