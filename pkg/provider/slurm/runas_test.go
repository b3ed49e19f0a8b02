package slurm_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/provider/providertest"
	"github.com/skiffci/skiff/pkg/provider/slurm"
)

// runAsAccounts creates n Unix accounts for runners (no home, no login
// shell) and removes them when t ends; an account left by an earlier run is
// reused. Without root or sudo it skips t.
func runAsAccounts(t *testing.T, prefix string, n int) []*user.User {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the run-as tests create Unix accounts (useradd) and run as them: run them as root")
	}
	if _, err := exec.LookPath("sudo"); err != nil {
		testenv.Missing(t, "sudo", "apt-get install -y sudo")
		return nil
	}
	var out []*user.User
	for i := 1; i <= n; i++ {
		name := prefix + strconv.Itoa(i)
		if _, err := user.Lookup(name); err != nil {
			if b, err := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name).CombinedOutput(); err != nil {
				t.Fatalf("creating account %s: %v\n%s", name, err, b)
			}
		}
		t.Cleanup(func() {
			// Nothing of the account's may be left for userdel to refuse.
			_ = exec.Command("pkill", "-KILL", "-u", name).Run()
			_ = exec.Command("userdel", name).Run()
		})
		u, err := user.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, u)
	}
	return out
}

// ownDir makes dir owned by u, mode 0700 (the operator's one-time setup of
// a run-as account's registration directory).
func ownDir(t *testing.T, dir string, u *user.User) {
	t.Helper()
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
}

// hostileRunner is the runner command of the hostile job. It reads its
// targets from $TARGETS, tries each thing a job must not do, and writes one
// line per attempt to $OUT/result: the attempt's name, then "denied" or
// "ALLOWED" with what it got. It then forges its own job's comment and name
// (which Slurm allows: what must fail is skiff believing them), and leaves
// a process and a job of its own behind.
const hostileRunner = `#!/bin/sh
. "$TARGETS"
r="$OUT/result.tmp"
: > "$r"
try() {
	name=$1; shift
	if got=$("$@" 2>&1); then
		printf '%s ALLOWED %s\n' "$name" "$(printf '%s' "$got" | tr -c '[:print:]' ' ' | cut -c1-300)" >> "$r"
	else
		printf '%s denied\n' "$name" >> "$r"
	fi
}
try read-pending-registration cat "$PENDING_JIT"
try list-registration-directory ls -a "$JITDIR"
try read-running-environ cat "/proc/$VICTIM_PID/environ"
try scan-proc-environ sh -c 'grep -ls -e "$1" -e "$2" /proc/[0-9]*/environ | grep .' scan "$VCANARY" "$PCANARY"
try list-skiff-records ls -a "$STATEDIR"
try read-skiff-record cat "$STATEDIR"/*.json
try read-app-key cat "$APPKEY"
try signal-running-runner kill -TERM "$VICTIM_PID"
try cancel-running-runner scancel "$VICTIM_JOB"
try cancel-pending-runner scancel "$PENDING_JOB"
try rewrite-other-comment scontrol update JobId="$VICTIM_JOB" Comment=forged
# Its own job's fields: a newline and the listing's separator, and tags of
# another pool and repository.
nl='
'
scontrol update JobId="$SLURM_JOB_ID" Comment="skiff%3Apool=victims&skiff%3Arepository=acme%2Fsecret${nl}$VICTIM_JOB|$VICTIM_USER|COMPLETED|debug|n|2026-01-01T00:00:00|N/A|None" > "$OUT/forge.log" 2>&1
scontrol update JobId="$SLURM_JOB_ID" JobName="$VICTIM_NAME" >> "$OUT/forge.log" 2>&1
scontrol update JobId="$SLURM_JOB_ID" JobName="$VICTIM_NAME${nl}$VICTIM_JOB|$VICTIM_USER|COMPLETED|debug|n|2026-01-01T00:00:00|N/A|None" >> "$OUT/forge.log" 2>&1
# Something to outlive the runner: a process out of the job's process tree,
# and a batch job of its own.
setsid sh -c 'exec sleep 7777' < /dev/null > /dev/null 2>&1 &
sbatch --quiet --output=/dev/null --chdir=/ --wrap 'sleep 7778' >> "$OUT/forge.log" 2>&1
mv "$r" "$OUT/result"
# It ends when the test says so: until then its account is taken.
while [ ! -e "$OUT/end" ]; do sleep 0.1; done
`

// hostileAttempts are the attempts hostileRunner reports, each of which
// must be denied.
var hostileAttempts = []string{"read-pending-registration", "list-registration-directory", "read-running-environ", "scan-proc-environ",
	"list-skiff-records", "read-skiff-record", "read-app-key", "signal-running-runner", "cancel-running-runner", "cancel-pending-runner",
	"rewrite-other-comment"}

// runAsWorld is TestHostileJob's provider over the cluster c, its pools
// run as accts: the shared directories (dir), skiff's data directory with
// the App's key, and the two runner installs, hostile and victim.
type runAsWorld struct {
	p                                     *slurm.Provider
	o                                     slurm.Options
	e                                     env
	logs                                  *testenv.SyncBuffer
	dir, jitDir, data, work, out, targets string
	appKey                                string
	runAs                                 []string
}

func newRunAsWorld(t *testing.T, c cluster, accts []*user.User) *runAsWorld {
	t.Helper()
	var runAs []string
	for _, u := range accts {
		runAs = append(runAs, u.Username)
	}
	dir := filepath.Join(c.shared, "runas")
	jitDir, data, work, out := filepath.Join(dir, "jit"), filepath.Join(dir, "data"), filepath.Join(dir, "work"), filepath.Join(dir, "out")
	for _, d := range []string{dir, jitDir, data} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{dir, jitDir} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	// The work root: every account makes its own directory there, and
	// none removes another's (sticky); so does the hostile runner's report.
	for _, d := range []string{work, out} {
		if err := os.Mkdir(d, 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, 0o1777); err != nil {
			t.Fatal(err)
		}
	}
	for _, u := range accts {
		ownDir(t, filepath.Join(jitDir, u.Username), u)
	}
	// skiff's data directory: its records and the App's key.
	appKey := filepath.Join(data, "app.pem")
	if err := os.WriteFile(appKey, []byte("APPKEY-CANARY"), 0o600); err != nil {
		t.Fatal(err)
	}
	runners := map[string]string{"hostile": hostileRunner, "victim": "#!/bin/sh\nexec sleep 3600\n"}
	for name, script := range runners {
		d := filepath.Join(dir, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		testenv.WriteExecutable(t, filepath.Join(d, slurm.RunScript), []byte(script))
	}
	targets := filepath.Join(dir, "targets")
	logs := &testenv.SyncBuffer{}
	o := slurm.Options{
		Commander:  slurm.Exec{Env: []string{"SLURM_CONF=" + c.Conf}},
		Sudo:       []string{"sudo", "-n", "--preserve-env=SLURM_CONF", "-u"},
		NamePrefix: "skiffh.",
		Cluster:    "skifftest",
		JITDir:     jitDir,
		StateDir:   filepath.Join(data, "slurm"),
		Env:        []string{"SLURM_CONF=" + c.Conf, "OUT=" + out, "TARGETS=" + targets},
		Logger:     slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	p, err := slurm.New(o)
	if err != nil {
		t.Fatal(err)
	}
	providertest.TerminateAtCleanup(t, p, provider.Filter{AliveOnly: true})
	return &runAsWorld{p: p, o: o, e: env{p: p, o: o}, logs: logs, dir: dir, jitDir: jitDir, data: data, work: work, out: out,
		targets: targets, appKey: appKey, runAs: runAs}
}

// section is a pool's slurm section running runner (an install of dir) on
// partition, as any of the accounts: each launch takes a free one.
func (w *runAsWorld) section(runner, partition string) *pool.Slurm {
	return &pool.Slurm{RunnerDir: filepath.Join(w.dir, runner), WorkDir: w.work, Partition: partition, RunAs: w.runAs}
}

// launch launches one runner of poolName with s, its registration canary.
func (w *runAsWorld) launch(t *testing.T, poolName string, s *pool.Slurm, token, canary string) (provider.Instance, error) {
	t.Helper()
	l := provider.Launch{Token: token, Spec: pool.Spec{Shared: pool.Shared{Pool: poolName, MaxLifetime: time.Hour}, Slurm: s},
		Runners: []provider.RunnerRequest{{Name: "runner-" + token, JobID: 7, RunID: 9, Repository: "acme/" + poolName, Owner: "acme"}}}
	pl, err := w.p.Plan(context.Background(), l)
	if err != nil {
		t.Fatal(err)
	}
	res, err := w.p.Launch(context.Background(), pl, []provider.Registration{{Mode: provider.ModeJIT, JITConfig: canary}})
	if err != nil {
		return provider.Instance{}, err
	}
	return res.Runners[0].Instance, nil
}

// launchAs is launch failing t on an error; it returns the runner and the
// account it runs as (what names the runner in a failure).
func (w *runAsWorld) launchAs(t *testing.T, what, poolName string, s *pool.Slurm, token, canary string) (provider.Instance, *user.User) {
	t.Helper()
	in, err := w.launch(t, poolName, s, token, canary)
	if err != nil {
		t.Fatal(err)
	}
	acct, err := user.Lookup(in.Tags[slurm.TagRunAs])
	if err != nil {
		t.Fatalf("the %s runner runs as %q: %v", what, in.Tags[slurm.TagRunAs], err)
	}
	return in, acct
}

// TestHostileJob: runners of run-as accounts on a real cluster. A runner
// waits in the queue (its registration written as its account, 0600 in the
// account's 0700 directory) and another runs; a hostile runner of a third
// account tries to read their registrations and environments, skiff's
// records and key, to signal and cancel them, to forge its own tags, and to
// leave a process and a job behind. Every attempt fails; skiff lists the
// three runners with its own tags, and nothing of the hostile account's is
// left once it ends.
func TestHostileJob(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testenv.SlurmOptions{Partitions: []string{"held State=DOWN"}})
	w := newRunAsWorld(t, c, runAsAccounts(t, "skiff-run", 3))
	p, e, jitDir, out := w.p, w.e, w.jitDir, w.out
	const pendingCanary, runningCanary = "CANARY-PENDING-RUNNER", "CANARY-RUNNING-RUNNER"

	// A runner waiting in the queue: its registration is its account's.
	pending, pendingAcct := w.launchAs(t, "pending", "held", w.section("victim", "held"), "tok-pending", pendingCanary)
	jit := filepath.Join(jitDir, pendingAcct.Username, slurm.RegistrationFile)
	checkRegistration(t, jit, pendingAcct, pendingCanary)
	// A running runner, and its process.
	running, runningAcct := w.launchAs(t, "running", "victims", w.section("victim", ""), "tok-running", runningCanary)
	e.waitState(t, running.ID, provider.Running)
	var victimPID string
	poll(t, "the running runner's process", func() bool {
		b, _ := exec.Command("pgrep", "-u", runningAcct.Username, "-x", "sleep").Output()
		victimPID = strings.TrimSpace(string(b))
		return victimPID != ""
	})

	tg := fmt.Sprintf("PENDING_JIT=%s\nJITDIR=%s\nVICTIM_PID=%s\nVICTIM_JOB=%s\nVICTIM_USER=%s\nVICTIM_NAME=skiffh.tok-running.runner-tok-running\nPENDING_JOB=%s\nSTATEDIR=%s\nAPPKEY=%s\nVCANARY=%s\nPCANARY=%s\n",
		jit, jitDir, victimPID, running.ID, runningAcct.Username, pending.ID, w.o.StateDir, w.appKey, runningCanary, pendingCanary)
	if err := os.WriteFile(w.targets, []byte(tg), 0o644); err != nil {
		t.Fatal(err)
	}
	bad, hostile := w.launchAs(t, "hostile", "hostile", w.section("hostile", ""), "tok-hostile", "CANARY-HOSTILE")
	if users := map[string]bool{pendingAcct.Uid: true, runningAcct.Uid: true, hostile.Uid: true}; len(users) != 3 {
		t.Errorf("the three live runners run as %s, %s and %s: want three accounts", pendingAcct.Username, runningAcct.Username, hostile.Username)
	}

	checkHostileReport(t, w, bad.ID)
	// One live runner per account: all three are taken, and a fourth
	// runner waits for one (a capacity wait, not a failure).
	if _, err := w.launch(t, "victims", w.section("victim", ""), "tok-fourth", "CANARY-FOURTH"); !errors.Is(err, provider.ErrCapacity) || provider.Permanent(err) {
		t.Errorf("a launch whose accounts all have a live runner: %v, want a retryable ErrCapacity", err)
	}
	// What it forged: Slurm took its own comment and name, which skiff reads neither of.
	forged, _ := c.Command("scontrol", "show", "job", bad.ID).CombinedOutput()
	if forge, _ := os.ReadFile(filepath.Join(out, "forge.log")); !strings.Contains(string(forged), "acme%2Fsecret") ||
		!strings.Contains(string(forged), "JobName=skiffh.tok-running.runner-tok-running") {
		t.Errorf("the forged comment and name did not reach Slurm (the tag checks below would be empty): %s\n%s", forge, forged)
	}
	// Its own registration was read and deleted before it started.
	if _, err := os.Stat(filepath.Join(jitDir, hostile.Username, slurm.RegistrationFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the hostile runner's registration file is still there (%v)", err)
	}

	// skiff still lists its three runners, each with its own tags, the
	// victims where they were.
	checkListed(t, p, map[string]listed{
		pending.ID: {"held", "acme/held", pendingAcct.Username, provider.Pending},
		running.ID: {"victims", "acme/victims", runningAcct.Username, provider.Running},
		bad.ID:     {"hostile", "acme/hostile", hostile.Username, provider.Running},
	})

	// Nothing of the hostile account's outlives its runner: no process,
	// no job.
	if err := os.WriteFile(filepath.Join(out, "end"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	e.waitState(t, bad.ID, provider.Terminated)
	poll(t, "the hostile account's processes and jobs to end", func() bool {
		procs, _ := exec.Command("pgrep", "-u", hostile.Username).Output()
		jobs, _ := c.Command("squeue", "--noheader", "--user="+hostile.Username, "--states=PENDING,RUNNING,CONFIGURING,COMPLETING", "--format=%i").Output()
		return strings.TrimSpace(string(procs)) == "" && strings.TrimSpace(string(jobs)) == ""
	})
	if strings.Contains(w.logs.String(), "CANARY") {
		t.Error("a registration reached the provider's logs")
	}

	// skiff cancels its runners as their accounts.
	if err := p.Terminate(context.Background(), []string{pending.ID, running.ID}); err != nil {
		t.Fatal(err)
	}
	e.waitState(t, running.ID, provider.Terminated)
	e.waitState(t, pending.ID, provider.Terminated)
}

// checkRegistration fails t unless the registration file jit is acct's,
// 0600, and holds canary.
func checkRegistration(t *testing.T, jit string, acct *user.User, canary string) {
	t.Helper()
	fi, err := os.Stat(jit)
	if err != nil {
		t.Fatalf("the pending runner's registration: %v", err)
	}
	if st := fi.Sys().(*syscall.Stat_t); strconv.Itoa(int(st.Uid)) != acct.Uid || fi.Mode().Perm() != 0o600 {
		t.Errorf("registration %s: owner %d, mode %v; want %s's, 0600", jit, st.Uid, fi.Mode().Perm(), acct.Username)
	}
	if b, _ := os.ReadFile(jit); string(b) != canary {
		t.Errorf("registration holds %q", b)
	}
}

// checkHostileReport waits for the report of the hostile runner (instance
// id) and fails t unless it tried each of hostileAttempts and each was
// denied.
func checkHostileReport(t *testing.T, w *runAsWorld, id string) {
	t.Helper()
	var result []byte
	var err error
	poll(t, "the hostile runner's report", func() bool {
		result, err = os.ReadFile(filepath.Join(w.out, "result"))
		return err == nil || !w.e.alive(t, id)
	})
	if err != nil {
		forge, _ := os.ReadFile(filepath.Join(w.out, "forge.log"))
		t.Fatalf("the hostile runner wrote no report (%v): %s", err, forge)
	}
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(result)), "\n") {
		name, rest, _ := strings.Cut(l, " ")
		got[name] = rest
	}
	for _, a := range hostileAttempts {
		switch r, ok := got[a]; {
		case !ok:
			t.Errorf("the hostile runner did not try %s:\n%s", a, result)
		case r != "denied":
			t.Errorf("the hostile runner could %s: %s", a, r)
		}
	}
}

// listed is what List must say of a runner: its pool, repository, run-as
// account and state.
type listed struct {
	pool, repo, user string
	st               provider.State
}

// checkListed fails t unless p lists exactly want's runners, each as want
// says.
func checkListed(t *testing.T, p *slurm.Provider, want map[string]listed) {
	t.Helper()
	all, err := p.List(context.Background(), provider.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != len(want) {
		t.Errorf("List = %d instances, want %d: %+v", len(all), len(want), all)
	}
	for _, in := range all {
		w, ok := want[in.ID]
		if !ok || in.Pool != w.pool || in.Tags[names.TagPool] != w.pool || in.Tags[names.TagRepository] != w.repo ||
			in.Tags[slurm.TagRunAs] != w.user || in.State != w.st {
			t.Errorf("instance %s: pool %s, tags %v, state %s; want %+v", in.ID, in.Pool, in.Tags, in.State, w)
		}
	}
}

// alive reports whether instance id is alive, as List says.
func (e env) alive(t *testing.T, id string) bool {
	t.Helper()
	got, err := e.p.List(context.Background(), provider.Filter{IDs: []string{id}})
	if err != nil {
		t.Fatal(err)
	}
	return len(got) == 1 && got[0].State.Alive()
}

// TestSudoersLines: the sudoers lines docs/slurm.md gives are valid sudoers
// syntax (visudo -c), and grant what the provider runs: sbatch, scancel,
// and the two commands that write a registration, as the run-as accounts.
func TestSudoersLines(t *testing.T) {
	t.Parallel()
	visudo, err := exec.LookPath("visudo")
	if err != nil {
		testenv.Missing(t, "visudo", "apt-get install -y sudo")
		return
	}
	doc, err := os.ReadFile("../../../docs/slurm.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```sudoers\n(.*?)```").FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/slurm.md has no ```sudoers block")
	}
	lines := string(m[1])
	for _, want := range []string{"sbatch", "scancel", "/usr/bin/install -m 0600 /dev/null /shared/skiff/jit/*/" + slurm.RegistrationFile,
		"/usr/bin/dd of=/shared/skiff/jit/*/" + slurm.RegistrationFile + " conv=nocreat status=none", "Runas_Alias SKIFF_RUNNERS = ci-run1, ci-run2", "(SKIFF_RUNNERS) NOPASSWD: SKIFF_SLURM"} {
		if !strings.Contains(lines, want) {
			t.Errorf("the sudoers lines lack %q:\n%s", want, lines)
		}
	}
	f := filepath.Join(t.TempDir(), "skiff")
	if err := os.WriteFile(f, []byte(lines), 0o440); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(visudo, "-c", "-f", f).CombinedOutput(); err != nil {
		t.Errorf("visudo -c -f: %v\n%s\n%s", err, out, lines)
	}
}
