package scaledown_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/pool/poolfile"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/provider/dryrun"
	"github.com/skiffci/skiff/pkg/queue"
	"github.com/skiffci/skiff/pkg/scaledown"
	"github.com/skiffci/skiff/pkg/scaleup"
	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/telemetry"
)

const poolsYAML = `
version: 1
defaults:
  image: {ssm: /aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64}
pools:
  - name: cpu
    labels: [self-hosted, linux, x64]
    instanceTypes: [c7i.large]
    subnets: [subnet-0aaaaaaaa]
    maxRunners: 200
`

// tagged overlays the tags the runners' hooks set on their instances (the
// dry-run provider has no tagging) and checks, at every Terminate, that no
// instance whose runner GitHub is running a job is terminated.
type tagged struct {
	provider.Provider
	mu   sync.Mutex
	tags map[string]map[string]string
	// busy returns the names of the runners running a job, by GitHub's truth.
	busy       func() map[string]int64
	violation  func(string)
	terminated int
	// onTerminate, if set, sees every Terminate before it is carried out.
	onTerminate func(ids []string)
}

func (p *tagged) tag(id, k, v string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tags[id] == nil {
		p.tags[id] = map[string]string{}
	}
	p.tags[id][k] = v
}

func (p *tagged) List(ctx context.Context, f provider.Filter) ([]provider.Instance, error) {
	out, err := p.Provider.List(ctx, f)
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range out {
		for k, v := range p.tags[out[i].ID] {
			out[i].Tags[k] = v
		}
	}
	return out, err
}

func (p *tagged) Terminate(ctx context.Context, ids []string) error {
	if p.onTerminate != nil {
		p.onTerminate(ids)
	}
	busy := p.busy()
	insts, _ := p.Provider.List(ctx, provider.Filter{IDs: ids})
	for _, in := range insts {
		if job, ok := busy[in.Tags[names.TagRunnerName]]; ok && in.State.Alive() {
			p.violation(fmt.Sprintf("terminated instance %s while its runner %s runs job %d", in.ID, in.Tags[names.TagRunnerName], job))
		}
	}
	p.mu.Lock()
	p.terminated += len(ids)
	p.mu.Unlock()
	return p.Provider.Terminate(ctx, ids)
}

// world is skiff in one process against the simulator, on a simulated clock.
type world struct {
	t       *testing.T
	seed    uint64
	rng     *mrand.Rand
	clock   *ghsim.Clock
	sim     *ghsim.Server
	dry     *dryrun.Provider
	prov    *tagged
	ledger  *ledger.Memory
	launch  *ledger.LaunchMemory
	records *store.Memory
	q       *queue.Memory
	up      *scaleup.Service
	down    *scaledown.Service
	counter *telemetry.Memory
	// unrecorded makes scale-up's write of a launched instance into the
	// ledger fail (a store error, or a crash right after the launch).
	unrecorded atomic.Bool

	jobs       map[int64]*simJob // every job, by id
	booted     map[string]bool   // instance → runner connected (or never will)
	broken     map[string]bool   // instance that never boots its runner
	finished   map[string]time.Time
	lags       map[int64]time.Duration
	flips      map[int64]bool
	violations []string
	mu         sync.Mutex
}

type simJob struct {
	id        int64
	status    string // as the webhook reported it
	seenStart bool
	waiting   time.Time // since when it waits without a runner; zero: it has one
	cancel    bool
	attempt   int // the run's attempt the job belongs to; 0 means 1
}

func (w *world) fatalf(format string, args ...any) {
	w.t.Helper()
	w.t.Fatalf("seed %d (rerun with SKIFF_SEED=%d): "+format, append([]any{w.seed, w.seed}, args...)...)
}

func newWorld(t *testing.T, seed uint64, opts ...func(*scaledown.Options)) *world {
	return newWorldSim(t, seed, nil, opts...)
}

// newWorldSim is newWorld with the simulator's options tweaked.
func newWorldSim(t *testing.T, seed uint64, simOpts func(*ghsim.Options), opts ...func(*scaledown.Options)) *world {
	w := &world{t: t, seed: seed, rng: mrand.New(mrand.NewPCG(seed, seed^0x5eed)), clock: ghsim.NewClock(time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)),
		jobs: map[int64]*simJob{}, booted: map[string]bool{}, broken: map[string]bool{}, finished: map[string]time.Time{},
		lags: map[int64]time.Duration{}, flips: map[int64]bool{}, counter: &telemetry.Memory{}}
	key := testenv.Key()
	// GitHub's busy flag, as its REST API shows it: false for 25–60 s after a
	// job starts, and for a minute in the middle of one job in three.
	so := ghsim.Options{Now: w.clock.Now, Seed: seed + 1, BusyHidden: func(job int64, since time.Duration) bool {
		w.mu.Lock()
		lag, flips := w.lags[job], w.flips[job]
		w.mu.Unlock()
		return since < lag || flips && since >= 90*time.Second && since < 150*time.Second
	}}
	if simOpts != nil {
		simOpts(&so)
	}
	w.sim = ghsim.New(so)
	t.Cleanup(w.sim.Close)
	installAcme(w.sim, key)
	gh := appClient(t, w.sim, key, w.clock.Now)
	pools := parsePools(t, poolsYAML)
	testenv.KeptGroups(t, w.sim, pools, "acme")
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	if os.Getenv("SKIFF_TEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	w.dry = dryrun.New(log, w.clock.Now)
	w.prov = &tagged{Provider: w.dry, tags: map[string]map[string]string{}, busy: w.busyRunners,
		violation: func(s string) { w.mu.Lock(); w.violations = append(w.violations, s); w.mu.Unlock() }}
	w.ledger = ledger.NewMemory(w.clock.Now)
	w.launch = ledger.NewLaunchMemory()
	w.records = store.NewMemory()
	w.records.SetClock(w.clock.Now)
	w.q = &queue.Memory{}
	w.q.SetClock(w.clock.Now)
	var err error
	w.up, err = scaleup.New(scaleup.Options{Pools: pools, Launches: w.launch, Ledger: unrecordedLedger{w.ledger, &w.unrecorded}, Jobs: w.records, Provider: w.prov,
		GitHub: gh, Counter: w.counter, Logger: log, Now: w.clock.Now, MaxAttempts: 50})
	if err != nil {
		t.Fatal(err)
	}
	o := scaledown.Options{Pools: pools, Ledger: w.ledger, Claims: w.launch, Jobs: w.records, Provider: w.prov,
		GitHub: gh, Queue: w.q, Counter: w.counter, Logger: log, Now: w.clock.Now, Scopes: []github.Scope{github.OrgScope("acme")},
		Apps: []int64{42}, MaxReplacements: 10, MaxJobChecks: 20}
	for _, f := range opts {
		f(&o)
	}
	w.down, err = scaledown.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// installAcme installs App 42, of key, on the organisation acme, which has
// the repository app; it returns the installation's id.
func installAcme(sim *ghsim.Server, key *rsa.PrivateKey) int64 {
	sim.AddApp(ghsim.AppConfig{ID: 42, Slug: "skiff", PublicKey: &key.PublicKey})
	sim.AddOrg("acme")
	sim.AddRepo("acme", "app")
	return sim.Install(42, "acme")
}

// appClient is App 42's GitHub client of sim on the clock now; its
// retries wait for no time to pass.
func appClient(tb testing.TB, sim *ghsim.Server, key *rsa.PrivateKey, now func() time.Time) *github.Client {
	tb.Helper()
	gh, err := github.NewClient([]github.App{{ID: 42, Key: key}}, github.WithBaseURL(sim.URL()), github.WithClock(now),
		github.WithSleep(func(ctx context.Context, _ time.Duration) error { return ctx.Err() }))
	if err != nil {
		tb.Fatal(err)
	}
	return gh
}

// parsePools parses a pools file the test wrote.
func parsePools(tb testing.TB, yaml string) *pool.Config {
	tb.Helper()
	pools, err := poolfile.Parse([]byte(yaml), "pools.yaml")
	if err != nil {
		tb.Fatal(err)
	}
	return pools
}

// unrecordedLedger is the ledger as scale-up writes it, whose Launched
// fails while fail is set.
type unrecordedLedger struct {
	ledger.Ledger
	fail *atomic.Bool
}

func (l unrecordedLedger) Launched(ctx context.Context, name string, la ledger.LaunchReport) error {
	if l.fail.Load() {
		return errors.New("recording launch: the store failed")
	}
	return l.Ledger.Launched(ctx, name, la)
}

func (w *world) busyRunners() map[string]int64 {
	out := map[string]int64{}
	for _, r := range w.sim.Runners() {
		if r.Busy {
			out[r.Name] = r.JobID
		}
	}
	return out
}

// webhook plays the webhook function: it reports what GitHub did, some of
// it late or never (in_progress lost 20 %), into the store, the queue and
// the ledger.
func (w *world) webhook(ctx context.Context) {
	now := w.clock.Now()
	for id, j := range w.jobs {
		js, _ := w.sim.Job(id)
		switch {
		case j.status == "" && js.Status != "":
			j.status = "queued"
			attempt := max(j.attempt, 1)
			_, _ = w.records.RecordJob(ctx, store.JobRecord{ID: id, RunID: js.RunID, Attempt: attempt, Repository: "acme/app", Owner: "acme",
				Status: store.StatusQueued, Labels: js.Labels, Pool: "cpu", QueuedAt: now, WorkflowName: "CI", JobName: "build"})
			_ = w.records.RecordRun(ctx, store.RunRecord{ID: js.RunID, Attempt: attempt, Event: "push", WorkflowName: "CI", Repository: "acme/app"})
			if err := w.q.Send(ctx, queue.Job{JobID: id, RunID: js.RunID, Attempt: attempt, Repository: "acme/app", Owner: "acme",
				Labels: js.Labels, Pool: "cpu", DeliveryID: "d" + strconv.FormatInt(id, 10), ReceivedAt: now}); err != nil {
				w.t.Fatal(err)
			}
		}
		if js.Status != "queued" && js.RunnerName != "" && !j.seenStart {
			j.seenStart = true
			if w.rng.IntN(5) > 0 && now.Sub(js.StartedAt) > time.Duration(w.rng.IntN(60))*time.Second {
				_ = w.ledger.Advance(ctx, js.RunnerName, ledger.StateJobStarted, js.StartedAt, id)
				_, _ = w.records.RecordJob(ctx, store.JobRecord{ID: id, Status: store.StatusInProgress, StartedAt: js.StartedAt, RunnerName: js.RunnerName})
			} else if w.rng.IntN(2) == 0 {
				j.seenStart = false // late: reported on a later tick
			}
		}
		if js.Status == "completed" && j.status != "completed" {
			j.status = "completed"
			if js.RunnerName != "" {
				_ = w.ledger.Advance(ctx, js.RunnerName, ledger.StateJobCompleted, now, id)
			}
			_, _ = w.records.RecordJob(ctx, store.JobRecord{ID: id, Status: store.StatusCompleted, CompletedAt: now, Conclusion: js.Conclusion,
				RunnerName: js.RunnerName})
		}
	}
}

// scaleUp plays the queue's event source.
func (w *world) scaleUp(ctx context.Context) {
	for {
		// A canceled context makes Receive return what is visible now
		// instead of waiting (in real time) for a send.
		rctx, cancel := context.WithCancel(ctx)
		cancel()
		ds, _ := w.q.Receive(rctx, 10)
		if len(ds) == 0 {
			return
		}
		answers := w.up.Handle(ctx, ds)
		for i := range ds {
			_ = w.q.Complete(ctx, ds[i], answers[i])
		}
	}
}

// instances plays the runners' instances: they boot (10 % never do), the
// hooks tag them (20 % of tags are lost), and most power off after their job.
func (w *world) instances(ctx context.Context) {
	now := w.clock.Now()
	all, _ := w.dry.List(ctx, provider.Filter{AliveOnly: true})
	busy := w.busyRunners()
	for _, in := range all {
		name := in.Tags[names.TagRunnerName]
		if _, decided := w.broken[in.ID]; !decided {
			w.broken[in.ID] = w.rng.IntN(10) == 0 // decided once per instance
		}
		if !w.booted[in.ID] && !w.broken[in.ID] {
			if now.Sub(in.LaunchedAt) >= time.Duration(15+w.rng.IntN(75))*time.Second {
				reg, ok := w.dry.Delivered(in.ID)
				if ok {
					if _, err := w.sim.ConnectRunner(reg.JITConfig); err != nil {
						w.t.Logf("connecting %s: %v", name, err)
					}
				}
				w.booted[in.ID] = true
			}
			continue
		}
		if job, ok := busy[name]; ok {
			w.mu.Lock()
			if _, known := w.lags[job]; !known {
				w.lags[job] = time.Duration(25+w.rng.IntN(36)) * time.Second
				w.flips[job] = w.rng.IntN(3) == 0
			}
			w.mu.Unlock()
			if w.prov.tags[in.ID][names.TagJobStarted] == "" && w.rng.IntN(5) > 0 {
				w.prov.tag(in.ID, names.TagJobStarted, now.Format(time.RFC3339))
			}
			continue
		}
		if w.prov.tags[in.ID][names.TagJobStarted] != "" || w.ranJob(name) {
			if _, ok := w.finished[in.ID]; !ok {
				w.finished[in.ID] = now
				if w.rng.IntN(5) > 0 {
					w.prov.tag(in.ID, names.TagJobCompleted, now.Format(time.RFC3339))
				}
			}
			if w.rng.IntN(5) > 0 && now.Sub(w.finished[in.ID]) >= 10*time.Second {
				_ = w.dry.Terminate(ctx, []string{in.ID}) // powers itself off
			}
		}
	}
}

func (w *world) ranJob(name string) bool {
	for id := range w.jobs {
		if js, _ := w.sim.Job(id); js.RunnerName == name {
			return true
		}
	}
	return false
}

// checkWaiting: no queued job is without a runner for longer than the boot
// timeout plus one reconcile (and scale-up's next tick).
func (w *world) checkWaiting(ctx context.Context, bound time.Duration) {
	now := w.clock.Now()
	live, _ := w.ledger.LiveRunners(ctx, "cpu")
	has := map[int64]bool{}
	for _, r := range live {
		if r.State < ledger.StateJobStarted && (r.BusyJob == 0 || r.BusyJob == r.JobID) {
			has[r.JobID] = true
		}
	}
	for id, j := range w.jobs {
		js, _ := w.sim.Job(id)
		if js.Status != "queued" || has[id] {
			j.waiting = time.Time{}
			continue
		}
		if j.waiting.IsZero() {
			j.waiting = now
		}
		if now.Sub(j.waiting) > bound {
			w.fatalf("job %d waits without a runner for %s (bound %s)", id, now.Sub(j.waiting), bound)
		}
	}
}

func seed(t *testing.T) uint64 {
	if s := os.Getenv("SKIFF_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("SKIFF_SEED=%q: %v", s, err)
		}
		return n
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24
}

// run drives the world: jobs arrive for 40 simulated minutes (some are
// cancelled while queued), then everything drains. It returns the world.
func run(t *testing.T, s uint64) *world {
	w := newWorld(t, s)
	ctx := context.Background()
	const tick = 10 * time.Second
	bound := 10*time.Minute + time.Minute + 2*tick
	startAt := w.clock.Now()
	for step := 0; ; step++ {
		now := w.clock.Now()
		if now.Sub(startAt) < 40*time.Minute && w.rng.IntN(3) == 0 {
			var specs []ghsim.JobSpec
			for range 1 + w.rng.IntN(3) {
				specs = append(specs, ghsim.JobSpec{Labels: []string{"self-hosted", "linux", "x64"},
					Duration: time.Duration(1+w.rng.IntN(8)) * time.Minute})
			}
			info, err := w.sim.StartRun(ghsim.RunSpec{Repo: "acme/app", Jobs: specs})
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range info.JobIDs {
				w.jobs[id] = &simJob{id: id, cancel: w.rng.IntN(10) == 0}
			}
		}
		for id, j := range w.jobs {
			if js, _ := w.sim.Job(id); j.cancel && js.Status == "queued" && w.rng.IntN(6) == 0 {
				_ = w.sim.CancelJob(id)
			}
		}
		w.webhook(ctx)
		w.scaleUp(ctx)
		w.instances(ctx)
		if step%6 == 0 {
			if _, err := w.down.Reconcile(ctx); err != nil {
				t.Fatalf("seed %d: reconcile: %v", s, err)
			}
		}
		if len(w.violations) > 0 {
			return w
		}
		w.checkWaiting(ctx, bound)
		if now.Sub(startAt) > 40*time.Minute && w.quiet(ctx) {
			return w
		}
		if now.Sub(startAt) > 4*time.Hour {
			t.Fatalf("seed %d: not drained after 4 simulated hours: %s", s, w.left(ctx))
		}
		w.clock.Advance(tick)
		w.sim.Step()
	}
}

// quiet: every job is done and nothing is left: no instance, no runner, no count.
func (w *world) quiet(ctx context.Context) bool {
	for id := range w.jobs {
		if js, _ := w.sim.Job(id); js.Status != "completed" {
			return false
		}
	}
	return w.left(ctx) == ""
}

func (w *world) left(ctx context.Context) string {
	alive, _ := w.dry.List(ctx, provider.Filter{AliveOnly: true})
	runners := w.sim.Runners()
	live, _ := w.ledger.Live(ctx, "cpu")
	if len(alive) == 0 && len(runners) == 0 && live == 0 {
		return ""
	}
	return fmt.Sprintf("%d instances alive, %d runners on GitHub, ledger count %d", len(alive), len(runners), live)
}

// TestInterleavings: seeded random interleavings of jobs, boots, failed
// boots, lost webhooks and tags, cancellations, runners taken by other jobs
// and GitHub's lagging and flipping busy flag. No busy runner is ever
// terminated; no job waits without a runner longer than the boot timeout
// plus one reconcile; at the end no instance, runner or count is left.
func TestInterleavings(t *testing.T) {
	t.Parallel()
	base := seed(t)
	runs := 4
	if os.Getenv("SKIFF_SEED") != "" {
		runs = 1
	}
	for i := range runs {
		s := base + uint64(i)
		t.Run("seed="+strconv.FormatUint(s, 10), func(t *testing.T) {
			t.Parallel()
			w := run(t, s)
			if len(w.violations) > 0 {
				w.fatalf("%s", w.violations[0])
			}
			reps := w.counter.Get(scaledown.MetricReplacements, "taken") + w.counter.Get(scaledown.MetricReplacements, "boot_timeout") +
				w.counter.Get(scaledown.MetricReplacements, "instance_gone") + w.counter.Get(scaledown.MetricReplacements, "idle")
			t.Logf("seed %d: %d jobs; %d terminated by scale-down; replacements %d; counters %v", s, len(w.jobs), w.prov.terminated, reps,
				w.counter.Snapshot())
		})
	}
}

// launchOne starts a run of one CPU job lasting d, reports it through the
// webhook and launches its runner: the job, its run and its one instance.
func (w *world) launchOne(ctx context.Context, d time.Duration) (job int64, info ghsim.RunInfo, in provider.Instance) {
	w.t.Helper()
	info, err := w.sim.StartRun(ghsim.RunSpec{Repo: "acme/app", Jobs: []ghsim.JobSpec{{Labels: []string{"self-hosted", "linux", "x64"},
		Duration: d}}})
	if err != nil {
		w.t.Fatal(err)
	}
	job = info.JobIDs[0]
	w.jobs[job] = &simJob{id: job}
	w.webhook(ctx)
	w.scaleUp(ctx)
	live, _ := w.dry.List(ctx, provider.Filter{AliveOnly: true})
	if len(live) != 1 {
		w.t.Fatalf("%d instances, want 1", len(live))
	}
	return job, info, live[0]
}

// endThenReconcile ends instance in and runs a pass a minute later; it
// returns the pass's report and the GitHub job checks the pass made.
func (w *world) endThenReconcile(ctx context.Context, in provider.Instance) (scaledown.Report, int) {
	w.t.Helper()
	if err := w.dry.Terminate(ctx, []string{in.ID}); err != nil {
		w.t.Fatal(err)
	}
	before := w.sim.Requests(ghsim.OpGetJob)
	w.clock.Advance(time.Minute)
	rep, err := w.down.Reconcile(ctx)
	if err != nil {
		w.t.Fatal(err)
	}
	return rep, w.sim.Requests(ghsim.OpGetJob) - before
}
