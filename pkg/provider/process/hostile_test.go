package process_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/provider/process"
)

// hostileEnv makes the test binary a runner command (hostileRunner): a
// victim that waits for its SIGTERM, or, when its JIT configuration is a
// hostileSpec, a hostile job that tries to reach skiff and the victims.
const hostileEnv = "SKIFF_PROCESS_TEST_HOSTILE"

// lingerEnv makes the test binary a process a hostile job leaves behind:
// in a session of its own, it waits forever.
const lingerEnv = "SKIFF_PROCESS_TEST_LINGER"

// hostileSpec is what the hostile job tries, handed over as its JIT
// configuration.
type hostileSpec struct {
	// Secrets are skiff's files: the SQLite file, the App's key, the
	// webhook secret, the other runners' records.
	Secrets []string
	// Dirs are the other runners' work directories.
	Dirs []string
	// PIDs are the other runners' processes, as the host numbers them.
	PIDs []int
	// Canary is in every victim's JIT configuration, written backwards
	// here (the hostile job's own environment holds this spec).
	Canary string
	// Own is the hostile runner's own work directory.
	Own string
}

// attempt is one line of the hostile job's report: what it tried, and
// whether that worked (a breach, unless the line is a control).
type attempt struct {
	What    string `json:"what"`
	Worked  bool   `json:"worked"`
	Control bool   `json:"control,omitempty"` // must work: proves the probe can see what it looks for
	Detail  string `json:"detail,omitempty"`
}

// hostileRunner is the runner command of TestHostileJob.
func hostileRunner() int {
	jit := os.Getenv(process.EnvJITConfig)
	var spec hostileSpec
	if json.Unmarshal([]byte(jit), &spec) != nil {
		// A victim: runs until its SIGTERM.
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM)
		<-sig
		return 0
	}
	canary := []rune(spec.Canary)
	slices.Reverse(canary)
	spec.Canary = string(canary)
	out := json.NewEncoder(os.Stdout)
	report := func(a attempt) { _ = out.Encode(a) }
	for _, f := range spec.Secrets {
		b, err := os.ReadFile(f)
		report(attempt{What: "read " + f, Worked: err == nil, Detail: errText(err) + strconv.Itoa(len(b))})
	}
	for _, d := range spec.Dirs {
		_, err := os.ReadDir(d)
		report(attempt{What: "list " + d, Worked: err == nil, Detail: errText(err)})
	}
	ents, err := os.ReadDir(filepath.Dir(spec.Own))
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	report(attempt{What: "find another runner's directory beside its own", Worked: len(names) != 1, Detail: errText(err) + strings.Join(names, " ")})
	// Another runner's JIT configuration, from its process's environment:
	// by the host's pids, and by every pid this job can see.
	for _, pid := range spec.PIDs {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
		report(attempt{What: "read the environment of pid " + strconv.Itoa(pid), Worked: err == nil && strings.Contains(string(b), spec.Canary), Detail: errText(err)})
	}
	seen, own := 0, false
	ents, _ = os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue
		}
		seen++
		if strings.Contains(string(b), spec.Canary) {
			report(attempt{What: "find a victim's JIT configuration in /proc/" + e.Name() + "/environ", Worked: true})
		}
		own = own || strings.Contains(string(b), "hostile-own-marker")
	}
	report(attempt{What: "read its own environment in /proc", Worked: own, Control: true, Detail: fmt.Sprintf("%d environments readable", seen)})
	for _, pid := range spec.PIDs {
		err := syscall.Kill(pid, syscall.SIGKILL)
		report(attempt{What: "kill pid " + strconv.Itoa(pid), Worked: err == nil, Detail: errText(err)})
		err = syscall.Kill(-pid, syscall.SIGKILL)
		report(attempt{What: "kill process group " + strconv.Itoa(pid), Worked: err == nil, Detail: errText(err)})
	}
	exe, _ := os.Executable()
	err = os.WriteFile(filepath.Join(filepath.Dir(exe), "planted"), []byte("x"), 0o600)
	report(attempt{What: "write beside the runner command", Worked: err == nil, Detail: errText(err)})
	err = os.WriteFile(filepath.Join(spec.Own, "own-file"), []byte("x"), 0o600)
	report(attempt{What: "write in its own work directory", Worked: err == nil, Control: true, Detail: errText(err)})
	// Leave a process behind, in a session of its own (out of the
	// runner's process group), and exit without waiting for it.
	linger := exec.Command(exe)
	linger.Env = []string{lingerEnv + "=" + spec.Own}
	linger.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = linger.Start()
	report(attempt{What: "start a process that outlives the job", Worked: err == nil, Control: true, Detail: errText(err)})
	return 0
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error() + " "
}

// pidNamespace is the pid namespace pid runs in ("" when it is gone).
func pidNamespace(pid int) string {
	ns, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/pid")
	return ns
}

// zombie reports whether pid has exited (and waits for its parent).
func zombie(pid int) bool {
	f := stat(pid)
	return len(f) > 0 && f[0] == "Z"
}

// inNamespace lists the host's processes in pid namespace ns.
func inNamespace(ns string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err == nil && pidNamespace(pid) == ns && !zombie(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestHostileJob: a job on the process backend, in its sandbox, tries to
// read skiff's files (the SQLite file and the App's key in the data
// directory, the runners' records), the other runners' work directories
// and their JIT configurations (/proc/<pid>/environ), to kill the other
// runners, to write outside its work directory and to leave a process
// behind; every attempt fails, the other runners run on, and nothing of
// the job is left once it has ended. Controls (its own environment in
// /proc, its own directory) show that the probe sees what it looks for.
// The planted weakenings — skiff's data directory bound into the sandbox,
// the pid namespace dropped — must each be caught as a breach.
func TestHostileJob(t *testing.T) {
	if err := process.CheckSandbox(""); err != nil {
		testenv.Missing(t, "a working bubblewrap", fmt.Sprintf("apt-get install bubblewrap (%v)", err))
	}
	t.Parallel()
	cases := []struct {
		name   string
		weaken func([]string) []string
		breach string // an attempt that must work with this weakening ("" for none)
	}{
		{name: "the sandbox"},
		{name: "planted: the data directory bound into the sandbox", breach: "skiff.db",
			weaken: func(a []string) []string { return append(a, "--bind", hostileRoot(a), hostileRoot(a)) }},
		{name: "planted: no pid namespace", breach: "kill pid",
			weaken: func(a []string) []string {
				return slices.DeleteFunc(a, func(s string) bool { return s == "--unshare-pid" })
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			hostileCase(t, tc.weaken, tc.breach)
		})
	}
}

// hostileBase is where the tests lay skiff's data directory: the working
// directory, away from /tmp, which the sandbox replaces with a /tmp of its
// own (a bind of the data directory there, the planted weakening, would
// not show the host's files). A checkout under /tmp uses /var/lib: the
// sandbox tests run as root.
func hostileBase() string {
	wd, _ := os.Getwd()
	if wd == "/tmp" || strings.HasPrefix(wd, "/tmp/") {
		return "/var/lib"
	}
	return wd
}

// hostileRoot finds the data directory in bwrap's arguments: the first
// directory hidden under hostileBase.
func hostileRoot(a []string) string {
	base := hostileBase()
	for i := 0; i+1 < len(a); i++ {
		if a[i] == "--tmpfs" && strings.HasPrefix(a[i+1], base+"/") {
			return a[i+1]
		}
	}
	return "/nonexistent"
}

func hostileCase(t *testing.T, weaken func([]string) []string, breach string) {
	p, root, logs := hostileProvider(t)
	data, logDir := filepath.Join(root, "runners"), filepath.Join(root, "logs")
	ctx := context.Background()
	spec := pool.Spec{Shared: pool.Shared{Pool: "lab", Backend: pool.BackendProcess}, Process: &pool.Process{}}
	const canary = "CANARY-VICTIM-JIT"
	var victims []provider.Instance
	var hs hostileSpec
	for _, name := range hostileSecrets {
		hs.Secrets = append(hs.Secrets, filepath.Join(root, name))
	}
	for i := range 2 {
		in := launchOne(t, p, spec, "tok-victim-"+strconv.Itoa(i), provider.Registration{Mode: provider.ModeJIT,
			JITConfig: canary + strconv.Itoa(i), RunnerName: "victim-" + strconv.Itoa(i)})
		victims = append(victims, in)
		pid, dir, _ := p.Process(in.ID)
		hs.PIDs = append(hs.PIDs, pid, process.Group(p, in.ID))
		hs.Dirs = append(hs.Dirs, dir)
		hs.Secrets = append(hs.Secrets, filepath.Join(data, "procs", in.ID+".json"))
	}
	backwards := []rune(canary)
	slices.Reverse(backwards)
	hs.Canary = string(backwards)
	if weaken != nil {
		process.WeakenSandbox(p, weaken)
	}
	// The hostile job's directory is the next one.
	_, dir0, _ := p.Process(victims[1].ID)
	n, _ := strconv.Atoi(strings.TrimPrefix(victims[1].ID, "proc-"))
	hs.Own = filepath.Join(filepath.Dir(dir0), "proc-"+strconv.Itoa(n+1))
	b, _ := json.Marshal(hs)
	hostile := launchOne(t, p, spec, "tok-hostile", provider.Registration{Mode: provider.ModeJIT, JITConfig: string(b), RunnerName: "hostile"})
	if hostile.ID != "proc-"+strconv.Itoa(n+1) {
		t.Fatalf("the hostile runner is %s, want proc-%d", hostile.ID, n+1)
	}
	group := process.Group(p, hostile.ID)
	ns := pidNamespace(group)
	wctx, cancel := testenv.AwaitContext(t)
	defer cancel()
	if code, err := p.Wait(wctx, hostile.ID); err != nil || code != 0 {
		t.Fatalf("the hostile job: exit %d, %v; logs:\n%s", code, err, logs)
	}
	waitGone(t, group)

	// Its report, from its log (which it could not see either).
	breaches := readHostileReport(t, filepath.Join(logDir, hostile.ID+".log"))
	breaches = append(breaches, leftBehind(t, p, hs, ns, victims)...)
	switch {
	case breach == "" && len(breaches) > 0:
		t.Errorf("the hostile job could:\n  %s", strings.Join(breaches, "\n  "))
	case breach != "" && !slices.ContainsFunc(breaches, func(b string) bool { return strings.Contains(b, breach) }):
		t.Errorf("the planted weakening went unnoticed: no breach names %q (breaches: %v)", breach, breaches)
	default:
		t.Logf("breaches: %v", breaches)
	}
	if strings.Contains(logs.String(), canary) {
		t.Error("a victim's JIT configuration reached the provider's logs")
	}
	if breach != "" {
		return // the weakened sandbox's victims may be dead: the cleanup closes the provider
	}
	for _, v := range victims {
		if err := p.Terminate(ctx, []string{v.ID}); err != nil {
			t.Fatal(err)
		}
		// 0 when its handler was set up in time, 128+15 before that; 137
		// would be the SIGKILL after the grace (a minute here).
		if code, err := p.Wait(wctx, v.ID); err != nil || code != 0 && code != 128+int(syscall.SIGTERM) {
			t.Errorf("victim %s: exit %d, %v; want 0 or 143 (it ends at its SIGTERM, through the sandbox)", v.ID, code, err)
		}
	}
}

// hostileSecrets are the files of skiff's data directory the hostile job
// must neither read nor remove.
var hostileSecrets = []string{"skiff.db", "github-app-key.json", "github-webhook-secret"}

// hostileProvider is a sandboxing provider of the hostile job beside skiff's
// data directory as skiff local lays it out, outside /tmp (hostileBase),
// at root: the SQLite file, the App skiff setup stored, the provider's
// part (runners, logs), all hidden from the runners; it logs to logs.
func hostileProvider(t *testing.T) (p *process.Provider, root string, logs *testenv.SyncBuffer) {
	t.Helper()
	root, err := os.MkdirTemp(hostileBase(), ".hostile-data-")
	if err != nil {
		t.Fatal(err)
	}
	root, _ = filepath.Abs(root)
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	secrets := map[string]string{"skiff.db": "SQLite format 3\x00", "github-app-key.json": `{"1":"-----BEGIN RSA PRIVATE KEY-----"}`,
		"github-webhook-secret": "whsec"}
	for name, content := range secrets {
		if err := os.WriteFile(filepath.Join(root, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	logs = &testenv.SyncBuffer{}
	data, logDir := filepath.Join(root, "runners"), filepath.Join(root, "logs")
	p, err = process.New(process.Options{Command: []string{testBinary(t)}, DataDir: data, LogDir: logDir, Hide: []string{root},
		Env: []string{hostileEnv + "=1", "MARK=hostile-own-marker"}, KillGrace: time.Minute, DefaultLimit: 8, Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.SandboxError(); err != nil {
		t.Fatalf("the sandbox: %v", err)
	}
	t.Cleanup(func() {
		cctx, cancel := testenv.AwaitContext(t)
		defer cancel()
		_ = p.Close(cctx)
	})
	return p, root, logs
}

// readHostileReport reads the hostile job's report from its log at path:
// the attempts that worked, as breaches. It fails t when a control
// attempt failed or the probe did not run.
func readHostileReport(t *testing.T, path string) (breaches []string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var controls []string
	sc := bufio.NewScanner(f)
	lines := 0
	for sc.Scan() {
		var a attempt
		if json.Unmarshal(sc.Bytes(), &a) != nil {
			t.Logf("runner output: %s", sc.Text())
			continue
		}
		lines++
		switch {
		case a.Control && !a.Worked:
			t.Errorf("control %q failed (%s): the probe cannot see what it looks for", a.What, a.Detail)
		case a.Control:
			controls = append(controls, a.What)
		case a.Worked:
			breaches = append(breaches, a.What+" ("+a.Detail+")")
		}
	}
	if lines == 0 || len(controls) != 3 {
		t.Fatalf("the hostile job reported %d attempts, controls %v: it did not run its probe", lines, controls)
	}
	return breaches
}

// leftBehind is what the hostile job (its sandbox's pid namespace ns) did
// beyond its report, as breaches: processes it left running (killed now),
// victims it ended, secrets it removed, a file planted beside the runner
// command (removed now).
func leftBehind(t *testing.T, p *process.Provider, hs hostileSpec, ns string, victims []provider.Instance) (breaches []string) {
	t.Helper()
	// Nothing of it is left: not the process it started to outlive it,
	// nor any other in its pid namespace.
	left := lingering(hs.Own)
	if ns == "" || ns == pidNamespace(os.Getpid()) {
		breaches = append(breaches, "run in the host's pid namespace")
	} else {
		left = append(left, inNamespace(ns)...)
	}
	for _, pid := range left {
		st, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		breaches = append(breaches, "leave process "+strconv.Itoa(pid)+" running ("+pidNamespace(pid)+", sandbox "+ns+"): "+string(st))
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	// The victims run on, their directories and records in place.
	all, _ := p.List(context.Background(), provider.Filter{})
	for _, v := range victims {
		i := slices.IndexFunc(all, func(in provider.Instance) bool { return in.ID == v.ID })
		if i < 0 || all[i].State != provider.Running {
			breaches = append(breaches, "end victim "+v.ID)
		}
	}
	for _, s := range hs.Secrets {
		if _, err := os.Stat(s); err != nil {
			breaches = append(breaches, "remove "+s)
		}
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(testBinary(t)), "planted")); err == nil {
		breaches = append(breaches, "plant a file beside the runner command")
		_ = os.Remove(filepath.Join(filepath.Dir(testBinary(t)), "planted"))
	}
	return breaches
}

// lingering lists the processes a hostile job with work directory own
// started to outlive it, wherever they run.
func lingering(own string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile("/proc/" + e.Name() + "/environ"); err == nil && string(b) == lingerEnv+"="+own+"\x00" {
			pids = append(pids, pid)
		}
	}
	return pids
}
