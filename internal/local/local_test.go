package local_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skiffci/skiff/internal/local"
	"github.com/skiffci/skiff/internal/localtest"
	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/freshness"
	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/pool/poolfile"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/queue"
	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/store/sqlitestore"
)

// buildStandin builds the stand-in runner into dir and returns its path.
func buildStandin(t testing.TB, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "skiff-standin")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/skiffci/skiff/cmd/skiff-standin").CombinedOutput(); err != nil {
		t.Fatalf("building the stand-in runner: %v\n%s", err, out)
	}
	return bin
}

// startLocal starts local mode with c against sim, which sends it its
// webhooks: c gets a temporary data directory, a pools file of pools, a
// listen address and sim's App (key pemKey) and organisation acme (its
// allow-list unless c has one). It
// returns local mode, its debug log and stop, which ends Run (at the latest
// when t ends) and returns its error.
func startLocal(t testing.TB, sim *ghsim.Server, pemKey, pools string, c local.Config) (*local.Local, *testenv.SyncBuffer, func() error) {
	t.Helper()
	dir := t.TempDir()
	c.DataDir, c.PoolsFile, c.Listen = filepath.Join(dir, "data"), filepath.Join(dir, "pools.yaml"), "127.0.0.1:0"
	if err := os.WriteFile(c.PoolsFile, []byte(pools), 0o600); err != nil {
		t.Fatal(err)
	}
	c.GitHubAPIURL, c.AppIDs, c.AppKeys = sim.URL(), []int64{testenv.AppID}, pemKey
	c.WebhookSecret, c.Installations = "local-secret", []string{"*"}
	if c.Allow == nil {
		c.Allow = []string{"acme"}
	}
	logs := &testenv.SyncBuffer{}
	l, err := local.New(c, slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	sim.SetWebhook(testenv.AppID, l.URL(), "local-secret")
	return l, logs, localtest.Run(t, l)
}

// TestLocalMode runs the whole pipeline in one process — the webhook over
// HTTP, the SQLite queue and store, scale-up, local processes — against the
// GitHub simulator over HTTP, whose signed webhooks reach the local
// endpoint, and stand-in runners that connect with their JIT configuration,
// take their job and complete it.
func TestLocalMode(t *testing.T) {
	t.Parallel()
	standin := buildStandin(t, t.TempDir())
	sim, pemKey := testenv.GitHubApp(t, "CANARYLOCAL")
	l, logs, stop := startLocal(t, sim, pemKey, testenv.CPUPools, local.Config{
		RunnerCommand: []string{standin}, RunnerEnv: []string{"SKIFF_STANDIN_DURATION=200ms"}, Limits: map[string]int{"cpu": 2},
	})

	labels := []string{"self-hosted", "linux", "x64"}
	run, err := sim.StartRun(ghsim.RunSpec{Repo: "acme/app", Jobs: []ghsim.JobSpec{{Labels: labels}, {Labels: labels}, {Labels: labels}}})
	if err != nil {
		t.Fatal(err)
	}
	// Wait for every job to complete (the runners report it to the
	// simulator), then for every runner process's end to be reported: the
	// pool's count is back to 0.
	localtest.Poll(t, "every job to complete", logs, func() bool { return completedJobs(sim, run.JobIDs) == len(run.JobIDs) })
	localtest.Poll(t, "the pool to count no runner once every process ended", logs, func() bool {
		live, _ := l.Ledger.Live(context.Background(), "cpu")
		return live == 0
	})
	if os.Getenv("SKIFF_LOCAL_LOGS") != "" {
		t.Log(logs.String())
	}
	// The pool's maxRunners (20) is capped by what the machine runs (2), so
	// the third job waits for a reservation instead of registering a JIT
	// runner the provider would refuse: one registration per runner.
	all, err := l.Provider.List(context.Background(), provider.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if jit := sim.Requests(ghsim.OpGenerateOrgJITConfig); jit != len(all) {
		t.Errorf("%d JIT registrations for %d runners launched", jit, len(all))
	}
	if err := stop(); err != nil {
		t.Errorf("Run: %v", err)
	}
	for _, id := range run.JobIDs {
		if j, _ := sim.Job(id); j.Conclusion != "success" {
			t.Errorf("job %d: %+v", id, j)
		}
	}
}

// TestLocalRecoversReservationsAtStart: a reservation the previous process
// left without a runner (it was killed between reserving and launching)
// is released when local mode starts again, instead of counting in its
// pool until the reconciler's stale-reservation rule, and the claim it
// held no longer waits out its lease.
func TestLocalRecoversReservationsAtStart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	poolsFile := filepath.Join(dir, "pools.yaml")
	if err := os.WriteFile(poolsFile, []byte(testenv.CPUPools), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(data, 0o700); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	db, err := sqlitestore.Open(local.DBFile(data), sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	claim := ledger.Claim{JobID: 7, Attempt: 1, Gen: 1, Token: "skiff-t", Pool: "cpu", LeaseUntil: now.Add(10 * time.Minute),
		UpdatedAt: now, ExpiresAt: now.Add(time.Hour)}
	cerr := sqlitestore.NewLaunches(db, nil).ClaimLaunch(ctx, claim, 0, now)
	n, err := sqlitestore.NewLedger(db, time.Now).Reserve(ctx, "cpu", 20, []ledger.Runner{{Name: "skiff-7-1", Pool: "cpu", JobID: 7, RunID: 6,
		Attempt: 1, ReservedAt: now}})
	if err := errors.Join(err, cerr, db.Close()); err != nil || n != 1 {
		t.Fatalf("claiming and reserving: %d, %v", n, err)
	}
	logs := &testenv.SyncBuffer{}
	l, err := local.New(local.Config{DataDir: data, PoolsFile: poolsFile, Listen: "127.0.0.1:0", Provider: "dry-run",
		AppIDs: []int64{77}, AppKeys: testenv.KeyPEM(),
		WebhookSecret: "s", Allow: []string{"acme"}, Installations: []string{"*"}}, slog.New(slog.NewJSONHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if live, err := l.Ledger.Live(ctx, "cpu"); err != nil || live != 0 {
		t.Errorf("the pool counts %d runners (%v) after the restart, want 0:\n%s", live, err, logs)
	}
	if r, err := l.Ledger.Runner(ctx, "skiff-7-1"); err != nil || r.State.Live() || r.Reason != "not_launched" {
		t.Errorf("the left reservation: %+v, %v; want it released", r, err)
	}
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	db, err = sqlitestore.Open(local.DBFile(data), sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	after := time.Now()
	got, err := sqlitestore.NewLaunches(db, nil).LaunchClaims(ctx, []int64{7}, after)
	if c := got[7]; err != nil || c.LeaseUntil.After(after) || c.Gen != 1 || c.Token != claim.Token {
		t.Errorf("the left claim: %+v, %v; want it as it was, its lease over", c, err)
	}
}

// TestLocalWakesOnExit: in a pool of one slot, each job after the first
// launches only once the previous runner's process ended; with the state
// poll and the reconciler's period an hour long, only the provider's
// notice of each exit (and the reconciler's pass it runs at once) frees
// the slot, so the run finishes only if the end is event-driven.
func TestLocalWakesOnExit(t *testing.T) {
	t.Parallel()
	standin := buildStandin(t, t.TempDir())
	sim, pemKey := testenv.GitHubApp(t, "CANARYLOCAL")
	l, logs, stop := startLocal(t, sim, pemKey, testenv.CPUPools, local.Config{
		RunnerCommand: []string{standin}, RunnerEnv: []string{"SKIFF_STANDIN_DURATION=100ms"}, Limits: map[string]int{"cpu": 1},
		ReconcileEvery: time.Hour, InstancePoll: time.Hour,
		// With metrics records, the EC2 events leave every end to the
		// reconciler: the pass the end runs at once frees the slot.
		MetricsRecords: true,
	})
	labels := []string{"self-hosted", "linux", "x64"}
	run, err := sim.StartRun(ghsim.RunSpec{Repo: "acme/app", Jobs: []ghsim.JobSpec{{Labels: labels}, {Labels: labels}, {Labels: labels}}})
	if err != nil {
		t.Fatal(err)
	}
	// Were the end noticed only by the hour-long polls, these would wait
	// until the test binary's -timeout is near, and fail.
	localtest.Poll(t, "every job to complete", logs, func() bool { return completedJobs(sim, run.JobIDs) == len(run.JobIDs) })
	localtest.Poll(t, "the pool to count no runner", logs, func() bool {
		live, _ := l.Ledger.Live(context.Background(), "cpu") // the watch is another goroutine's
		return live == 0
	})
	if err := stop(); err != nil {
		t.Errorf("Run: %v", err)
	}
}

// completedJobs counts the jobs the simulator reports completed.
func completedJobs(sim *ghsim.Server, ids []int64) int {
	n := 0
	for _, id := range ids {
		if j, ok := sim.Job(id); ok && j.Status == "completed" {
			n++
		}
	}
	return n
}

// TestRefusesAnOpenDataDirectory: skiff local does not start on a data
// directory other users can read, and says which chmod fixes it.
func TestRefusesAnOpenDataDirectory(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil { // whatever the umask
		t.Fatal(err)
	}
	_, err := local.New(local.Config{DataDir: dir, Provider: "dry-run", PoolsFile: "does-not-matter.yaml"}, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "chmod 700 "+dir) {
		t.Fatalf("New on a 0755 data directory: %v, want a refusal naming it and chmod 700", err)
	}
}

// TestLocalWebhookCutsSlowBody: the webhook server of skiff local ends a
// request whose body stops arriving (its read timeout), instead of holding
// the connection for as long as the client likes.
func TestLocalWebhookCutsSlowBody(t *testing.T) {
	t.Parallel()
	sim, pemKey := testenv.GitHubApp(t, "CANARYSLOW")
	l, _, _ := startLocal(t, sim, pemKey, testenv.CPUPools, local.Config{Provider: "dry-run"})
	u, err := url.Parse(l.URL())
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nX-GitHub-Event: workflow_job\r\nContent-Length: 1000\r\n\r\n{\"action\":")
	// A failure guard, not a timing claim: the server's read timeout is
	// 10 s (internal/httpserve); the guard is the test binary's -timeout.
	if deadline, ok := testenv.AwaitDeadline(t); ok {
		_ = c.SetReadDeadline(deadline)
	}
	if _, err := io.Copy(io.Discard, c); err != nil {
		t.Errorf("the server never ended a request whose body stopped: %v", err)
	}
}

// TestDeployment: a data directory's deployment id is kept in it: derived
// from its path the first time (two directories, two ids), given once and
// then required to stay, never silently changed.
func TestDeployment(t *testing.T) {
	t.Parallel()
	a, b := t.TempDir(), t.TempDir()
	idA, err := local.Deployment(a, "")
	if err != nil {
		t.Fatal(err)
	}
	idB, err := local.Deployment(b, "")
	if err != nil {
		t.Fatal(err)
	}
	if !names.ValidDeployment(idA) || !strings.HasPrefix(idA, "local-") || idA == idB {
		t.Errorf("derived ids %q and %q: want two valid local- ids", idA, idB)
	}
	if again, err := local.Deployment(a, ""); err != nil || again != idA {
		t.Errorf("read again: %q, %v; want the kept %q", again, err, idA)
	}
	if _, err := local.Deployment(a, "other"); err == nil || !strings.Contains(err.Error(), idA) {
		t.Errorf("another id for a kept directory: %v, want an error naming %q", err, idA)
	}
	given := filepath.Join(t.TempDir(), "given")
	if err := mkdir(given); err != nil {
		t.Fatal(err)
	}
	if id, err := local.Deployment(given, "ci-runners"); err != nil || id != "ci-runners" {
		t.Errorf("given id: %q, %v", id, err)
	}
	if id, err := local.Deployment(given, ""); err != nil || id != "ci-runners" {
		t.Errorf("given id read back: %q, %v", id, err)
	}
	if _, err := local.Deployment(t.TempDir(), "9 lives"); err == nil {
		t.Error("an id unusable in a tag was accepted")
	}
	if got := local.SlurmNamePrefix("ci-runners"); got != "skiff.ci-runners." {
		t.Errorf("Slurm name prefix %q", got)
	}
}

func mkdir(path string) error { return os.MkdirAll(path, 0o700) }

// TestStalePoolStops runs the whole pipeline with stand-in runners of a
// version GitHub no longer serves: the first runner is refused and exits 7,
// the reconciler holds the pool, and its jobs are dead-lettered with the
// fix instead of a replacement loop; the pool's status line says held.
func TestStalePoolStops(t *testing.T) {
	t.Parallel()
	standin := buildStandin(t, t.TempDir())
	sim, pemKey := testenv.GitHubApp(t, "CANARYSTALE")
	now := time.Now()
	sim.SetRunnerReleases([]ghsim.RunnerRelease{
		{Version: "2.334.0", Published: now.AddDate(0, 0, -2), SHA256: map[string]string{"linux-x64": strings.Repeat("4", 64)}},
		{Version: "2.333.0", Published: now.AddDate(0, 0, -45), SHA256: map[string]string{"linux-x64": strings.Repeat("3", 64)}},
		{Version: "2.330.0", Published: now.AddDate(0, 0, -90), SHA256: map[string]string{"linux-x64": strings.Repeat("0", 64)}},
	})
	l, logs, stop := startLocal(t, sim, pemKey, testenv.CPUPools, local.Config{
		RunnerCommand: []string{standin}, RunnerEnv: []string{"SKIFF_STANDIN_VERSION=2.330.0", "SKIFF_STANDIN_IDLE=1m"},
		Limits: map[string]int{"cpu": 2},
	})
	labels := []string{"self-hosted", "linux", "x64"}
	first, err := sim.StartRun(ghsim.RunSpec{Repo: "acme/app", Jobs: []ghsim.JobSpec{{Labels: labels}}})
	if err != nil {
		t.Fatal(err)
	}
	var holds []store.RunnerHold
	localtest.Poll(t, "the pool to be held", logs, func() bool {
		holds, _ = l.Runners.Holds(context.Background()) // the reconciler's goroutine holds it
		return len(holds) > 0
	})
	if holds[0].Pool != "cpu" || holds[0].Reason != freshness.ReasonOutdated || !strings.Contains(holds[0].Detail, "Fix:") {
		t.Errorf("hold %+v", holds[0])
	}
	second, err := sim.StartRun(ghsim.RunSpec{Repo: "acme/app", Jobs: []ghsim.JobSpec{{Labels: labels}}})
	if err != nil {
		t.Fatal(err)
	}
	var dead []queue.DeadLetterRecord
	localtest.Poll(t, "the held pool's job to be dead-lettered", logs, func() bool {
		dead, _ = l.Queue.DeadLetters(context.Background())
		return deadLettered(dead, second.JobIDs[0])
	})
	for _, d := range dead {
		if d.Reason != freshness.ReasonOutdated || !strings.Contains(d.Detail, "GitHub refuses runner unknown") ||
			!strings.Contains(d.Detail, "update the pool's runner") && !strings.Contains(d.Detail, "rebuild it with runner 2.334.0") {
			t.Errorf("dead letter %+v", d)
		}
	}
	// One runner was launched: the refused one. Its job's replacement and
	// the second job never started another.
	if n := sim.Requests(ghsim.OpGenerateOrgJITConfig); n != 1 {
		t.Errorf("%d runners registered, want 1 (no replacement loop)\n%s", n, logs.String())
	}
	if j, _ := sim.Job(first.JobIDs[0]); j.Status != "queued" {
		t.Errorf("first job %+v", j)
	}
	pools, err := poolfile.Parse([]byte(testenv.CPUPools), "pools.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f, ok := freshness.Assess(pools.Pool("cpu"), nil, map[string]store.RunnerHold{"cpu": holds[0]}, time.Now())
	if !ok || f.State != "held" {
		t.Errorf("status line %+v", f)
	}
	if err := stop(); err != nil {
		t.Errorf("Run: %v", err)
	}
}

func deadLettered(dead []queue.DeadLetterRecord, job int64) bool {
	for _, d := range dead {
		if d.JobID == job {
			return true
		}
	}
	return false
}

// TestRefusedJobsNeverReachARunner: a fork's pull request on a public
// repository and a job of a repository outside the allow-list, queued
// before an admitted job with the same labels, are refused by skiff and
// stay queued on GitHub; the runner launched for the admitted job is in
// the runner group skiff keeps for the pool, which admits neither, so
// GitHub (the simulator, over HTTP, with stand-in runners) gives it the
// admitted job. Without the group (the simulator ignoring groups, or the
// pool registering in the Default group) the runner takes a refused job.
func TestRefusedJobsNeverReachARunner(t *testing.T) {
	t.Parallel()
	standin := buildStandin(t, t.TempDir())
	tests := []struct {
		name         string
		runnerGroup  string // the pool's runnerGroup: line, if any
		ignoreGroups bool
		wantRefused  bool // a refused job starts on the skiff runner
	}{
		{"the group skiff keeps", "", false, false},
		{"the simulator ignores groups", "", true, true},
		{"the pool registers in the Default group", "    runnerGroup: Default\n", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sim, pemKey := testenv.GitHubApp(t, "CANARYGROUPS")
			sim.SetIgnoreRunnerGroups(tt.ignoreGroups)
			if err := sim.SetVisibility("acme/site", ghsim.VisibilityPublic); err != nil {
				t.Fatal(err)
			}
			sim.AddRepo("acme", "secret") // private, not on the allow-list
			l, logs, stop := startLocal(t, sim, pemKey, testenv.CPUPools+tt.runnerGroup, local.Config{
				RunnerCommand: []string{standin}, RunnerEnv: []string{"SKIFF_STANDIN_DURATION=100ms"}, Limits: map[string]int{"cpu": 2},
				Allow: []string{"acme/app", "acme/site"}, ReconcileEvery: time.Hour,
			})
			labels := []string{"self-hosted", "linux", "x64"}
			start := func(spec ghsim.RunSpec) int64 {
				t.Helper()
				spec.Jobs = []ghsim.JobSpec{{Labels: labels}}
				run, err := sim.StartRun(spec)
				if err != nil {
					t.Fatal(err)
				}
				return run.JobIDs[0]
			}
			fork := start(ghsim.RunSpec{Repo: "acme/site", Event: "pull_request", HeadRepo: "mallory/site"})
			outside := start(ghsim.RunSpec{Repo: "acme/secret"})
			admitted := start(ghsim.RunSpec{Repo: "acme/app"})
			refused := map[int64]string{fork: "the fork's pull request", outside: "the job outside the allow-list"}

			// Until the admitted job completes or a refused one leaves the
			// queue.
			testenv.Await(t, "the admitted job to complete, or a refused one to leave the queue", 20*time.Millisecond, func() bool {
				if j, _ := sim.Job(admitted); j.Status == "completed" {
					return true
				}
				for id := range refused {
					if j, _ := sim.Job(id); j.Status != "queued" {
						return true
					}
				}
				return false
			}, nil)
			var ran []string
			for id, what := range refused {
				if j, _ := sim.Job(id); j.Status != "queued" || j.RunnerID != 0 {
					ran = append(ran, fmt.Sprintf("%s ran on %s (%s)", what, j.RunnerName, j.Status))
				}
			}
			if got := len(ran) > 0; got != tt.wantRefused {
				t.Errorf("refused jobs that ran: %s; want some: %v\n%s", strings.Join(ran, "; "), tt.wantRefused, logs.String())
			}
			if !tt.wantRefused {
				checkAdmittedInKeptGroup(t, sim, l, admitted)
			}
			if err := stop(); err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
}

// checkAdmittedInKeptGroup fails t unless the admitted job ran, alone, on a
// skiff runner of the group skiff keeps for the pool (acme/app and
// acme/site, no public repository), and the reconciler's pass keeps that
// group without a call.
func checkAdmittedInKeptGroup(t *testing.T, sim *ghsim.Server, l *local.Local, admitted int64) {
	t.Helper()
	if j, _ := sim.Job(admitted); j.Conclusion != "success" || !strings.HasPrefix(j.RunnerName, "skiff-") {
		t.Errorf("admitted job = %+v, want it run by a skiff runner", j)
	}
	if n := sim.Requests(ghsim.OpGenerateOrgJITConfig); n != 1 {
		t.Errorf("%d runners registered, want 1 (the admitted job's)", n)
	}
	if access, ok := sim.RunnerGroupAccess("acme", "skiff-cpu"); !ok || access.Visibility != ghsim.GroupSelected ||
		access.AllowsPublic || len(access.Repositories) != 2 {
		t.Errorf("skiff-cpu = %+v, %v; want acme/app and acme/site, no public repository", access, ok)
	}
	// The reconciler's pass keeps the group scale-up created:
	// nothing changed since, so it makes no call.
	rep, err := l.ScaleDown.Reconcile(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Groups.Orgs != 1 || rep.Groups.Calls != 0 || rep.Groups.Errors != 0 {
		t.Errorf("the reconciler's groups = %+v, want acme kept with no call", rep.Groups)
	}
}
