package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/skiffci/skiff/internal/local"
	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/metrics"
	"github.com/skiffci/skiff/pkg/metrics/writer"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/pool/poolfile"
	"github.com/skiffci/skiff/pkg/provider"
)

// demoJob is one job the demo asks for, and what must become of it.
type demoJob struct {
	name     string // the job's name: what the stand-in's work is drawn by (demoWork)
	labels   []string
	launch   bool // a pool takes it: it must complete on a runner of ours
	cancel   bool // cancelled right after it is queued
	pool     string
	id       int64
	queuedAt time.Time
}

// demoOptions are `skiff-demo`'s flags.
type demoOptions struct {
	Standin   string        // the stand-in runner binary
	PoolsFile string        // the pools file
	Out       string        // the demo's data directory, replaced on every run
	Jobs      int           // jobs the burst queues (besides the cancelled, unmatched and duplicate ones)
	Limit     int           // runners alive at once in every pool (0: the pools file's, one GPU job at a time)
	Duration  time.Duration // how long each stand-in's job runs
	Timeout   time.Duration // give up after this long (0: demoTimeout of Jobs)
	// Work is the stand-ins' real work per job (SKIFF_STANDIN_WORK;
	// demoWork by default, "" for none).
	Work string
	// CPUProfile, when set, is where a CPU profile of this process (skiff
	// local, the simulator and the driver) is written.
	CPUProfile string
	// Provider is the backend the runners run on: process (the default)
	// or container (a Podman service of the demo's own, the stand-in in
	// an image built for it).
	Provider string
}

// runDemo is skiff-demo (what `make demo` runs): skiff local against the
// GitHub simulator over HTTP, with stand-in runners, a realistic burst of
// signed webhooks, progress, a summary and the invariants checked. It
// returns the exit code: 0 done, 1 failed, 2 bad flags.
func runDemo(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("skiff-demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: skiff-demo [--standin build/skiff-standin] [-f examples/lab.yaml] [--jobs 40] [--limit N] [--provider process|container]\n\nflags:\n")
		fs.PrintDefaults()
	}
	var o demoOptions
	fs.StringVar(&o.Standin, "standin", "build/skiff-standin", "the stand-in runner (make demo builds it)")
	fs.StringVar(&o.PoolsFile, "f", "examples/lab.yaml", "the pools file (process pools priced at an operator's rate, so the records have a cost)")
	fs.IntVar(&o.Jobs, "jobs", 40, "how many jobs the burst queues (besides the cancelled, unmatched and duplicate ones)")
	fs.DurationVar(&o.Duration, "job-duration", time.Second, "how long each stand-in runner's job runs")
	fs.StringVar(&o.Out, "out", "build/demo", "where the demo keeps its data (replaced on every run)")
	fs.DurationVar(&o.Timeout, "timeout", 0, "give up after this long (default: 5m, plus 1s for every job over 40)")
	fs.IntVar(&o.Limit, "limit", 0, "runners alive at once in every pool, its maxRunners too (default: the pools file's maxRunners, the number of CPUs, one GPU job at a time)")
	fs.StringVar(&o.Work, "work", demoWork, "the stand-ins' real work per job name, name=CPU-seconds:MiB;... (SKIFF_STANDIN_WORK; empty: none)")
	fs.StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile of skiff local, the simulator and the driver to this file")
	fs.StringVar(&o.Provider, "provider", "process", "the runners' backend: process (each a local process) or container (each a container on a Podman service the demo starts, with an image it builds from the stand-in and skiff-podhelper; needs podman, runc and go)")
	switch err := fs.Parse(args); {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case err != nil:
		return 2
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "skiff-demo: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return 2
	case o.Provider != "process" && o.Provider != "container":
		fmt.Fprintf(stderr, "skiff-demo: --provider %q: want process or container\n", o.Provider)
		return 2
	}
	if err := demo(stdout, o); err != nil {
		fmt.Fprintln(stderr, "skiff-demo:", err)
		return 1
	}
	return 0
}

// demo runs the demo o describes, printing its progress and summary to w;
// it fails when the burst does not end in time or an invariant fails.
func demo(w io.Writer, o demoOptions) error {
	stopProfile, err := startCPUProfile(o.CPUProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	standin := ""
	if o.Provider != "container" { // the container's stand-in is in its image
		if standin, err = standinPath(o.Standin); err != nil {
			return err
		}
	}
	pools, err := poolfile.Load(o.PoolsFile)
	if err != nil {
		return err
	}
	if o.Provider == "container" {
		// The lab's process pools run as container pools: a pool's section
		// names its backend (local.ProviderOf), and the demo's container
		// provider gives every pool its image (backend.go).
		for _, p := range pools.Pools {
			if p.Backend == pool.BackendProcess {
				p.Backend, p.Process = pool.BackendContainer, nil
			}
		}
	}
	limits := demoLimits(pools, o.Limit)
	if err := freshDir(o.Out); err != nil {
		return err
	}
	if o.Timeout <= 0 {
		o.Timeout = demoTimeout(o.Jobs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.Timeout)
	defer cancel()

	gh, err := newDemoGitHub(pools)
	if err != nil {
		return err
	}
	defer gh.sim.Close()
	sim := gh.sim
	logFile, err := os.Create(filepath.Join(o.Out, "skiff.log"))
	if err != nil {
		return err
	}
	defer logFile.Close()
	backend, err := newDemoBackend(ctx, o, filepath.Join(o.Out, "data"), slog.New(slog.NewJSONHandler(logFile, nil)))
	if err != nil {
		return err
	}
	defer backend.stop()
	l, stopLocal, err := startDemoLocal(o, standin, pools, limits, gh, logFile, backend)
	if err != nil {
		return err
	}
	defer stopLocal()
	fmt.Fprintf(w, "skiff-demo: skiff local at %s, GitHub simulator at %s, logs in %s\n", l.URL(), sim.URL(), logFile.Name())

	started := time.Now() // the burst's first job: what "all done in" counts from
	jobs := demoBurst(o.Jobs)
	want := resolveDemoPools(jobs, pools, demoOrg+"/app")
	// The slot meter runs from the burst's first job.
	slots := newSlotMeter(pools)
	meterDone := make(chan struct{})
	meterStopped := make(chan struct{})
	go func() {
		defer close(meterStopped)
		slots.run(ctx, sim, l, meterDone)
	}()
	if err := queueBurst(sim, jobs, slots); err != nil {
		return err
	}
	// A duplicate delivery: the first queued job's webhook, sent again.
	dup, err := duplicate(ctx, sim, l.URL(), gh.secret)
	if err != nil {
		return fmt.Errorf("%w (the deadline: %s after the start): see %s", err, o.Timeout, logFile.Name())
	}
	wall, err := awaitBurst(ctx, w, sim, l, pools, jobs, want, started)
	if err != nil {
		return fmt.Errorf("%w after %s (%s): see %s", err, o.Timeout, stuckJobs(sim, jobs), logFile.Name())
	}
	close(meterDone)
	<-meterStopped
	fmt.Fprintf(w, "  all done %s after the burst's first job (the queue empty after %s); peak memory of this process (skiff local, the simulator and the driver): %s\n",
		wall.Round(100*time.Millisecond), time.Since(started).Round(100*time.Millisecond), peakRSS())
	slots.report(ctx, w, sim, l, jobs, wall, backend)
	return summarize(ctx, w, sim, l, jobs, dup, logFile.Name(), filepath.Join(o.Out, "report.html"))
}

// startCPUProfile starts a CPU profile into path, when set; stop ends it.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting the CPU profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// standinPath is the stand-in runner's absolute path, once it is there.
func standinPath(standin string) (string, error) {
	standin, err := filepath.Abs(standin)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(standin); err != nil {
		return "", fmt.Errorf("the stand-in runner: %w (make demo builds it: go build -o build/skiff-standin ./cmd/skiff-standin)", err)
	}
	return standin, nil
}

// demoLimits is how many runners each pool may have alive at once: with a
// limit, every pool has that many slots (its maxRunners set to it too);
// without, one GPU job at a time and the pools file's maxRunners.
func demoLimits(pools *pool.Config, limit int) map[string]int {
	limits := map[string]int{"gpu": 1} // one GPU on this machine: one GPU job at a time
	if limit > 0 {
		// A lab with limit slots per pool: the ledger's maxRunners and the
		// process provider's limit alike.
		limits = map[string]int{}
		for _, p := range pools.Pools {
			limits[p.Name] = limit
			p.MaxRunners = limit
		}
	}
	return limits
}

// demoTimeout is how long a burst of jobs may take by default: 5 minutes
// for make demo's 40, and a second more for every further job. A large
// burst on a small host is bound by its CPU (the stand-ins' work), and
// the webhook deliveries of the burst share it.
func demoTimeout(jobs int) time.Duration {
	return 5*time.Minute + time.Duration(max(jobs-40, 0))*time.Second
}

// freshDir empties dir, creating it when it is not there.
func freshDir(dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return os.MkdirAll(dir, 0o700)
}

// The demo's GitHub App and the organisation it is installed on.
const (
	demoAppID = 4242
	demoOrg   = "acme"
)

// demoGitHub is the demo's GitHub: the simulator with the App installed on
// the organisation, the App's key and its webhook secret.
type demoGitHub struct {
	sim    *ghsim.Server
	key    *rsa.PrivateKey
	secret string
}

// newDemoGitHub starts the simulator with an App installed on demoOrg,
// which has a repository "app" and the pools' runner groups.
func newDemoGitHub(pools *pool.Config) (demoGitHub, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return demoGitHub{}, err
	}
	// GitHub overlaps its deliveries; the simulator's default, one at a
	// time, would make the burst's pace one webhook answer at a time.
	sim := ghsim.New(ghsim.Options{WebhookLanes: demoWebhookLanes})
	sim.AddApp(ghsim.AppConfig{ID: demoAppID, Slug: "skiff-demo", PublicKey: &key.PublicKey})
	sim.AddOrg(demoOrg)
	for _, p := range pools.Pools {
		if p.RunnerGroup != "" && p.RunnerGroup != "Default" {
			sim.AddRunnerGroup(demoOrg, p.RunnerGroup)
		}
	}
	sim.AddRepo(demoOrg, "app")
	sim.Install(demoAppID, demoOrg)
	secret := make([]byte, 16)
	_, _ = rand.Read(secret)
	return demoGitHub{sim: sim, key: key, secret: fmt.Sprintf("%x", secret)}, nil
}

// startDemoLocal starts skiff local — one process, one SQLite file,
// runners as local processes or the backend's containers — as the App's
// webhook, logging to logFile; stop ends it.
func startDemoLocal(o demoOptions, standin string, pools *pool.Config, limits map[string]int, gh demoGitHub,
	logFile *os.File, backend *demoBackend) (l *local.Local, stop func(), err error) {
	l, err = local.New(local.Config{
		Provider: o.Provider, ExternalProvider: backend.provider, Deployment: backend.deployment,
		DataDir: filepath.Join(o.Out, "data"), PoolsFile: o.PoolsFile, Pools: pools, Listen: "127.0.0.1:0", RunnerCommand: []string{standin},
		RunnerEnv:    demoRunnerEnv(o),
		Limits:       limits,
		GitHubAPIURL: gh.sim.URL(), AppIDs: []int64{demoAppID},
		AppKeys:       string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(gh.key)})),
		WebhookSecret: gh.secret, Allow: []string{demoOrg}, Installations: []string{"*"},
		ReconcileEvery: 2 * time.Second, // a lab reconciles often; AWS every minute
		MetricsRecords: true,
	}, slog.New(slog.NewJSONHandler(logFile, nil)))
	if err != nil {
		return nil, nil, err
	}
	gh.sim.SetWebhook(demoAppID, l.URL(), gh.secret)
	runCtx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- l.Run(runCtx) }()
	return l, func() { cancel(); <-ran }, nil
}

// demoBurst is the burst of n jobs: CPU jobs in runs of four, GPU jobs
// (one at a time here), large jobs; then a job no pool takes and a job
// cancelled while queued.
func demoBurst(n int) []*demoJob {
	var jobs []*demoJob
	for i := range n {
		switch {
		case i%10 == 9:
			jobs = append(jobs, &demoJob{name: "train", labels: []string{"self-hosted", "gpu"}, launch: true})
		case i%10 == 8:
			jobs = append(jobs, &demoJob{name: "bundle", labels: []string{"self-hosted", "large"}, launch: true})
		case i%4 == 3:
			jobs = append(jobs, &demoJob{name: "compile", labels: []string{"self-hosted", "linux", "x64"}, launch: true})
		default:
			jobs = append(jobs, &demoJob{name: "test", labels: []string{"self-hosted", "linux", "x64"}, launch: true})
		}
	}
	return append(jobs, &demoJob{labels: []string{"self-hosted", "windows"}}, &demoJob{labels: []string{"self-hosted", "linux", "x64"}, cancel: true})
}

// resolveDemoPools sets the pool of every job a pool takes, as routed for
// repo, and returns how many jobs a pool takes.
func resolveDemoPools(jobs []*demoJob, pools *pool.Config, repo string) int {
	want := 0
	for _, j := range jobs {
		if j.launch {
			want++
			if spec, err := pools.ResolveRepo(j.labels, repo); err == nil {
				j.pool = spec.Pool
			}
		}
	}
	return want
}

// queueBurst starts the burst's runs on GitHub, four jobs a run, noting
// each job's id and queue time, counting it on the slot meter and
// cancelling the job meant to be cancelled.
func queueBurst(sim *ghsim.Server, jobs []*demoJob, slots *slotMeter) error {
	for start := 0; start < len(jobs); start += 4 {
		batch := jobs[start:min(start+4, len(jobs))]
		spec := ghsim.RunSpec{Repo: demoOrg + "/app", Event: "push"}
		for _, j := range batch {
			spec.Jobs = append(spec.Jobs, ghsim.JobSpec{Name: j.name, Labels: j.labels})
		}
		info, err := sim.StartRun(spec)
		if err != nil {
			return err
		}
		for i, j := range batch {
			j.id, j.queuedAt = info.JobIDs[i], time.Now()
			if j.launch && j.pool != "" {
				slots.add(j.id, j.pool)
			}
			if j.cancel {
				if err := sim.CancelJob(j.id); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// burstProgress is one look at the burst: its jobs completed and running,
// the runners alive and the messages queued.
type burstProgress struct {
	completed, running, live, depth int
}

// countJobStatuses counts the completed and the running jobs among
// statuses.
func countJobStatuses(statuses map[int64]string) (completed, running int) {
	for _, st := range statuses {
		switch st {
		case "completed":
			completed++
		case "in_progress":
			running++
		}
	}
	return completed, running
}

// launchIDs are the ids of the jobs a pool takes.
func launchIDs(jobs []*demoJob) []int64 {
	var ids []int64
	for _, j := range jobs {
		if j.launch {
			ids = append(ids, j.id)
		}
	}
	return ids
}

// lookAtBurst samples the burst's progress.
func lookAtBurst(ctx context.Context, sim *ghsim.Server, l *local.Local, pools *pool.Config, jobs []*demoJob) burstProgress {
	var p burstProgress
	p.completed, p.running = countJobStatuses(sim.JobStatuses(launchIDs(jobs))) // one simulator step, not one per job
	for _, pl := range pools.Pools {
		n, _ := l.Ledger.Live(ctx, pl.Name)
		p.live += n
	}
	p.depth, _ = l.Queue.Depth(ctx)
	return p
}

// awaitBurst prints the burst's progress every second until every job a
// pool takes (want of them) has completed, every runner ended and the
// queue is empty; wall is when the last job completed and every runner
// ended. It fails when ctx ends first.
func awaitBurst(ctx context.Context, w io.Writer, sim *ghsim.Server, l *local.Local, pools *pool.Config, jobs []*demoJob, want int,
	started time.Time) (wall time.Duration, err error) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		p := lookAtBurst(ctx, sim, l, pools, jobs)
		fmt.Fprintf(w, "  %5.1fs  queued %3d  running %3d  completed %3d/%d  runners alive %3d\n",
			time.Since(started).Seconds(), p.depth, p.running, p.completed, want, p.live)
		if p.completed == want && p.live == 0 && wall == 0 {
			wall = time.Since(started)
		}
		// The queue may still hold delayed messages of jobs that waited
		// out a backoff and launched since: they launch nothing more.
		if p.completed == want && p.live == 0 && p.depth == 0 {
			return wall, nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("%d of %d jobs completed, %d runners alive", p.completed, want, p.live)
		case <-tick.C:
		}
	}
}

// stuckJobs lists the jobs a pool takes that have not completed.
func stuckJobs(sim *ghsim.Server, jobs []*demoJob) string {
	var stuck []string
	for _, j := range jobs {
		if st, _ := sim.Job(j.id); j.launch && st.Status != "completed" {
			stuck = append(stuck, fmt.Sprintf("job %d %v %s", j.id, j.labels, st.Status))
		}
	}
	return strings.Join(stuck, "; ")
}

// slotMeter samples, every slotSample, each pool's runners alive and its
// jobs waiting for one: slot utilisation during the backlog is the
// runner-seconds alive ÷ the slot-seconds the pool's jobs could use while
// some of them waited. At a sample where a pool's jobs wait, that is its
// slots, or fewer when its jobs, queued and running, are fewer than its
// slots: then the jobs, not the slots, bound what runners could do (the
// burst's own submission, not the room, sets the pace). The mean runner
// lifetime (runner-seconds ÷ runners) is the measured slot time of one
// job, launch overhead included.
type slotMeter struct {
	pools *pool.Config
	mu    sync.Mutex
	jobs  map[int64]string // queued so far: job id → its pool
	// The rest is the meter goroutine's own until it stops.
	alive           map[string]time.Duration // runner-seconds alive, whole run
	runners         map[string]map[string]bool
	busyAlive, busy time.Duration // runner- and slot-seconds while jobs waited
}

// slotSample is the meter's period: a tenth of the demo's one-second jobs.
const slotSample = 100 * time.Millisecond

func newSlotMeter(pools *pool.Config) *slotMeter {
	return &slotMeter{pools: pools, jobs: map[int64]string{}, alive: map[string]time.Duration{}, runners: map[string]map[string]bool{}}
}

// add counts a job queued on GitHub for the pool.
func (m *slotMeter) add(id int64, pool string) {
	m.mu.Lock()
	m.jobs[id] = pool
	m.mu.Unlock()
}

func (m *slotMeter) run(ctx context.Context, sim *ghsim.Server, l *local.Local, done <-chan struct{}) {
	t := time.NewTicker(slotSample)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-done:
			return
		case now := <-t.C:
			dt := now.Sub(last)
			last = now
			m.sample(ctx, sim, l, dt)
		}
	}
}

func (m *slotMeter) sample(ctx context.Context, sim *ghsim.Server, l *local.Local, dt time.Duration) {
	m.mu.Lock()
	ids := make([]int64, 0, len(m.jobs))
	poolOf := make(map[int64]string, len(m.jobs))
	for id, p := range m.jobs {
		ids = append(ids, id)
		poolOf[id] = p
	}
	m.mu.Unlock()
	waiting, running := map[string]int{}, map[string]int{}
	for id, st := range sim.JobStatuses(ids) { // one simulator step, not one per job
		switch st {
		case "queued":
			waiting[poolOf[id]]++
		case "in_progress":
			running[poolOf[id]]++
		}
	}
	instances, err := l.Provider.List(ctx, provider.Filter{})
	if err != nil {
		return
	}
	live := map[string]int{}
	for _, in := range instances {
		if m.runners[in.Pool] == nil {
			m.runners[in.Pool] = map[string]bool{}
		}
		m.runners[in.Pool][in.ID] = true
		if in.State.Alive() {
			live[in.Pool]++
		}
	}
	for _, p := range m.pools.Pools {
		m.alive[p.Name] += time.Duration(live[p.Name]) * dt
		if waiting[p.Name] > 0 && p.MaxRunners > 0 {
			usable := min(p.MaxRunners, waiting[p.Name]+running[p.Name])
			m.busyAlive += time.Duration(min(live[p.Name], usable)) * dt
			m.busy += time.Duration(usable) * dt
		}
	}
}

// report prints the utilisation and the ideal wall time: per pool, the
// jobs its runners ran (GitHub gives a queued job to any runner whose
// labels it matches, so a pool's runners may run another pool's jobs) in
// rounds of its slots, each round one mean runner lifetime; the slowest
// pool sets it.
func (m *slotMeter) report(ctx context.Context, w io.Writer, sim *ghsim.Server, l *local.Local, jobs []*demoJob, wall time.Duration,
	backend *demoBackend) {
	n := map[string]int{}
	for _, j := range jobs {
		st, ok := sim.Job(j.id)
		if !ok || !j.launch || st.RunnerName == "" {
			continue
		}
		if r, err := l.Ledger.Runner(ctx, st.RunnerName); err == nil {
			n[r.Pool]++
		}
	}
	var ideal time.Duration
	slowest := ""
	for _, p := range m.pools.Pools {
		runners := len(m.runners[p.Name])
		if n[p.Name] == 0 || runners == 0 || p.MaxRunners <= 0 {
			continue
		}
		life := m.alive[p.Name] / time.Duration(runners)
		rounds := (n[p.Name] + p.MaxRunners - 1) / p.MaxRunners
		if d := time.Duration(rounds) * life; d > ideal {
			ideal, slowest = d, fmt.Sprintf("%s: its runners ran %d jobs, %d slots, mean runner lifetime %s", p.Name, n[p.Name], p.MaxRunners,
				life.Round(10*time.Millisecond))
		}
	}
	util := 0.0
	if m.busy > 0 {
		util = 100 * float64(m.busyAlive) / float64(m.busy)
	}
	// The runners' own work needs the host's CPUs: no schedule of slots
	// finishes before the CPU time they used, spread over every CPU.
	if cpu, ok := runnersCPU(ctx, l); ok {
		if d := cpu / time.Duration(runtime.NumCPU()); d > ideal {
			ideal, slowest = d, fmt.Sprintf("the runners used %s of CPU time, %d CPUs", cpu.Round(100*time.Millisecond), runtime.NumCPU())
		}
	}
	fmt.Fprintf(w, "  slot utilisation during the backlog %.1f%% (runner-seconds alive / slot-seconds the pool's waiting and running jobs could use while some waited, sampled every %s)\n",
		util, slotSample)
	if ideal > 0 {
		fmt.Fprintf(w, "  ideal wall time %s (%s); wall %s = %.2f x ideal\n", ideal.Round(100*time.Millisecond), slowest,
			wall.Round(100*time.Millisecond), float64(wall)/float64(ideal))
	}
	runners, ok1 := runnersCPU(ctx, l)
	self, ok2 := selfCPU()
	if ok1 && ok2 && wall > 0 {
		fmt.Fprintln(w, " ", cpuShare(runners, self, wall, runtime.NumCPU()))
	}
	if cpu, ok := backend.engineCPU(); ok {
		fmt.Fprintf(w, "  CPU time of the engine's API service (podman system service, not its conmon and runc): %s\n", cpu.Round(100*time.Millisecond))
	}
}

// runnersCPU is the CPU time the runners used: what the process provider
// measured of each (its cgroup, else its sandbox's processes in /proc),
// or the container provider (each container's cgroup, read by its
// entrypoint), else this process's waited-for children's (a sandboxed
// runner's tree is reaped inside its sandbox, out of this process's
// rusage).
func runnersCPU(ctx context.Context, l *local.Local) (time.Duration, bool) {
	if src, ok := l.Provider.(writer.UsageSource); ok {
		// The process provider's own measure, or the runner image's
		// entrypoint's of each container's cgroup.
		return measuredCPU(ctx, l, src)
	}
	return childrenCPU()
}

// measuredCPU sums the CPU seconds src measured of every runner listed.
func measuredCPU(ctx context.Context, l *local.Local, src writer.UsageSource) (time.Duration, bool) {
	all, err := l.Provider.List(ctx, provider.Filter{})
	if err != nil {
		return 0, false
	}
	var sum time.Duration
	for _, in := range all {
		if pk, ok := src.Peaks(in.ID); ok && pk.CPUSeconds != nil {
			sum += time.Duration(*pk.CPUSeconds * float64(time.Second))
		}
	}
	return sum, true
}

// cpuShare says what the host's CPUs did over the wall time: the runners'
// CPU time, the demo's own (skiff local with the simulator and the
// driver), and the share of every CPU's whole time they add up to, the
// rest going to other processes of the host or idle. On a shared host,
// that is how far the CPU-bound ideal, which assumes every CPU, was
// within reach.
func cpuShare(runners, self, wall time.Duration, cpus int) string {
	all := wall * time.Duration(cpus)
	return fmt.Sprintf("CPU time: the runners %s, this process %s (skiff local, the simulator, the driver): %.0f%% of the %d CPUs' %s over the wall",
		runners.Round(100*time.Millisecond), self.Round(100*time.Millisecond), 100*float64(runners+self)/float64(all), cpus,
		all.Round(100*time.Millisecond))
}

// demoWebhookLanes is how many of the simulator's webhook deliveries are
// in flight at once: enough that the burst's deliveries (about four per
// job) do not queue behind each other's answers on a machine of a few
// cores, each job's still in order.
const demoWebhookLanes = 8

// demoWork is what the stand-in runners do per job, by its name
// (SKIFF_STANDIN_WORK: CPU seconds burnt and MiB held): a compile job
// keeps a CPU busy and holds 192 MiB, a test job barely uses its slot
// (the report's right-sizing says how many fit this machine at once).
const demoWork = "compile=0.5:192;bundle=0.4:384;train=0.3:256;*=0.05:24"

// peakRSS is the process's peak resident set (VmHWM), or "unknown" off Linux.
func peakRSS() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			if err == nil {
				return fmt.Sprintf("%.0f MB", float64(kb)/1024)
			}
		}
	}
	return "unknown"
}

// records checks the metrics records: one per completed job, each valid
// against the schema, and writes the usage report. It returns the records.
func records(ctx context.Context, l *local.Local, jobs []*demoJob, report string) ([]metrics.Record, []string, error) {
	var recs []metrics.Record
	for r, err := range l.MetricsRecords.List(ctx, metrics.Filter{}) {
		if err != nil {
			return nil, nil, err
		}
		recs = append(recs, r)
	}
	var failures []string
	seen := map[int64]int{}
	for _, r := range recs {
		seen[r.JobID]++
		if err := metrics.Validate(r); err != nil {
			failures = append(failures, fmt.Sprintf("job %d's metrics record fails the schema: %v", r.JobID, err))
		}
	}
	for _, j := range jobs {
		if j.launch && seen[j.id] != 1 {
			failures = append(failures, fmt.Sprintf("job %d has %d metrics records, want 1", j.id, seen[j.id]))
		}
	}
	f, err := os.Create(report)
	if err != nil {
		return nil, nil, err
	}
	err = metrics.WriteHTML(f, recs, metrics.Advise(recs, metrics.AdviceOptions{MinRecords: 5, Headroom: 0.2}), time.Now())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return recs, failures, err
}

// replacements counts, per job, the replacements the reconciler logged
// ("stranded job: replacement launched"): a job may have one runner
// launched for it plus one per replacement, never more.
func replacements(logFile string) (map[int64]int, error) {
	f, err := os.Open(logFile)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[int64]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var line struct {
			Msg   string `json:"msg"`
			JobID int64  `json:"job_id"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "stranded job: replacement launched" {
			out[line.JobID]++
		}
	}
	return out, sc.Err()
}

// duplicate sends the first queued job's delivery again, signed, with its
// own X-GitHub-Delivery, as GitHub does when it redelivers.
func duplicate(ctx context.Context, sim *ghsim.Server, url, secret string) (string, error) {
	for _, d := range sim.Deliveries() {
		if d.Event != "workflow_job" || d.Action != "queued" {
			continue
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(d.Payload))
		if err != nil {
			return "", err
		}
		req.Header.Set("X-GitHub-Event", d.Event)
		req.Header.Set("X-GitHub-Delivery", d.GUID)
		req.Header.Set("X-Hub-Signature-256", github.SignWebhook([]byte(secret), d.Payload))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return "", fmt.Errorf("sending a duplicate delivery: %w", err)
		}
		_ = resp.Body.Close()
		return d.GUID, nil
	}
	return "", fmt.Errorf("no queued delivery to send again")
}

// summarize prints what happened and checks the invariants: every job a
// pool takes completed on one runner of ours (none lost, none launched
// twice), the others never launched, no runner ended while running a job.
func summarize(ctx context.Context, w io.Writer, sim *ghsim.Server, l *local.Local, jobs []*demoJob, dup, logFile, report string) error {
	instances, err := l.Provider.List(ctx, provider.Filter{})
	if err != nil {
		return err
	}
	replaced, err := replacements(logFile)
	if err != nil {
		return err
	}
	perJob := map[int64]int{}
	for _, in := range instances {
		id, _ := strconv.ParseInt(in.Tags[names.TagJobID], 10, 64)
		perJob[id]++
	}
	var failures []string
	var waits []time.Duration
	completed, skipped, cancelledLaunched := 0, 0, 0
	for _, j := range jobs {
		st, _ := sim.Job(j.id)
		switch {
		case j.launch && (st.Status != "completed" || st.Conclusion != "success"):
			failures = append(failures, fmt.Sprintf("job %d (%v) ended %s/%s: lost", j.id, j.labels, st.Status, st.Conclusion))
		case j.launch && perJob[j.id] > 1+replaced[j.id]:
			failures = append(failures, fmt.Sprintf("job %d had %d runners launched for it and %d logged replacements", j.id,
				perJob[j.id], replaced[j.id]))
		case j.cancel && perJob[j.id] > 1:
			failures = append(failures, fmt.Sprintf("cancelled job %d had %d runners launched for it", j.id, perJob[j.id]))
		case j.cancel:
			// Scale-up may reach the job before its cancellation does (so
			// may AWS's): then one runner launched, found no job of its
			// own and ended like any idle runner.
			cancelledLaunched += perJob[j.id]
			skipped++
		case !j.launch && perJob[j.id] != 0:
			failures = append(failures, fmt.Sprintf("job %d (%v) got a runner though no pool takes it", j.id, j.labels))
		case j.launch:
			completed++
			waits = append(waits, st.StartedAt.Sub(j.queuedAt))
		default:
			skipped++
		}
	}
	slices.Sort(waits)
	pct := func(p float64) time.Duration {
		if len(waits) == 0 {
			return 0
		}
		return waits[min(len(waits)-1, int(p*float64(len(waits))))]
	}
	deliveries := sim.Deliveries()
	sort.Slice(deliveries, func(i, k int) bool { return deliveries[i].ID < deliveries[k].ID })
	fmt.Fprintf(w, "\nskiff-demo summary\n")
	fmt.Fprintf(w, "  webhook deliveries      %d (+1 duplicate of %s)\n", len(deliveries), dup)
	fmt.Fprintf(w, "  jobs queued             %d\n", len(jobs))
	fmt.Fprintf(w, "  runners launched        %d\n", len(instances))
	fmt.Fprintf(w, "  jobs completed          %d (a runner may take another job than its own: GitHub's rule)\n", completed)
	total := 0
	for _, n := range replaced {
		total += n
	}
	fmt.Fprintf(w, "  replacements requested  %d (jobs whose runner another job took, re-queued by the reconciler)\n", total)
	fmt.Fprintf(w, "  not run (no pool, cancelled)  %d (%d runner launched before the cancel arrived)\n", skipped, cancelledLaunched)
	fmt.Fprintf(w, "  queue wait p50 / p95    %s / %s\n", pct(0.5).Round(time.Millisecond), pct(0.95).Round(time.Millisecond))
	recs, recFailures, err := records(ctx, l, jobs, report)
	if err != nil {
		return err
	}
	failures = append(failures, recFailures...)
	fmt.Fprintf(w, "  metrics records         %d written, validated against schema/metrics.schema.json; report: %s\n", len(recs), report)
	if err := metrics.WriteStartTable(w, metrics.SummarizeStarts(recs)); err != nil {
		return err
	}
	fmt.Fprintf(w, "  invariants: no job lost; no job given a second runner but as a logged replacement; none launched without a pool; one valid record per job: ")
	if len(failures) > 0 {
		fmt.Fprintln(w, "FAILED")
		for _, f := range failures {
			fmt.Fprintln(w, "   -", f)
		}
		return fmt.Errorf("%d invariant failures", len(failures))
	}
	fmt.Fprintln(w, "ok")
	return nil
}
