package slurm

import (
	"strings"

	"github.com/skiffci/skiff/pkg/provider"
)

// script is the runner's batch script. It holds the path of the JIT file,
// never its content: Slurm keeps the script, and scontrol shows it. The
// script reads the file into the runner's environment and deletes it
// before the runner starts, runs the runner in a fresh work directory, and
// removes the directory and (should the runner never have started) the
// file when the runner ends or the job is cancelled.
//
// A job of a run-as account (account != "") also ends every other process
// and job of the account's, at its start and at its end: an account has one
// live runner at a time, so whatever else runs as it was left behind by an
// earlier runner (a process that left the job's process tree, a job the
// runner submitted) and would otherwise outlive it and reach the next
// runner's registration. kill -KILL -1 signals every process the account
// may signal but the shell itself.
func (p *Provider) script(pn plan, name, jit, account string) string {
	cmd, root := pn.Command, pn.WorkDir
	var b strings.Builder
	w := func(lines ...string) {
		for _, l := range lines {
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	w("#!/bin/sh",
		"# skiff runner "+name+" (pool "+pn.Pool+")",
		"umask 077",
		"jit="+quote(jit),
		"work=")
	if account != "" {
		w("sweep() {",
			"  squeue --noheader --user="+quote(account)+" --format=%i 2>/dev/null | grep -vx \"$SLURM_JOB_ID\" | xargs -r scancel 2>/dev/null",
			"  kill -KILL -1 2>/dev/null",
			"}")
	} else {
		w("sweep() { :; }")
	}
	w("cleanup() { rm -f \"$jit\"; [ -n \"$work\" ] && rm -rf \"$work\"; sweep; }",
		"trap cleanup EXIT",
		"trap 'exit 143' TERM INT HUP",
		"mkdir -p "+quote(root)+" || exit 1",
		"work=$(mktemp -d "+quote(root+"/"+name+".XXXXXX")+") || exit 1",
		"mkdir \"$work/tmp\" || exit 1",
		// The configuration goes from the file to the environment of the
		// runner only, and the file is gone before the runner starts.
		EnvJITConfig+"=$(cat \"$jit\") || exit 1",
		"rm -f \"$jit\"",
		"export "+EnvJITConfig,
		"export PATH="+quote(p.o.Path)+" HOME=\"$work\" TMPDIR=\"$work/tmp\" SKIFF_INSTANCE_ID=\"$SLURM_JOB_ID\"",
		// Runner 2.333.0 and later exit 7 when GitHub refuses their version.
		"export "+provider.EnvDeprecatedExitCode+"=1")
	for _, kv := range p.o.Env {
		k, v, _ := strings.Cut(kv, "=")
		w("export " + k + "=" + quote(v))
	}
	if account != "" {
		w("sweep")
	}
	quoted := make([]string, len(cmd))
	for i, c := range cmd {
		quoted[i] = quote(c)
	}
	w("cd \"$work\" || exit 1",
		// In the background, so that a cancellation's SIGTERM runs the
		// trap at once; the runner gets the signal from Slurm itself.
		strings.Join(quoted, " ")+" &",
		"wait $!")
	return b.String()
}

// quote is s in single quotes for the shell.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
