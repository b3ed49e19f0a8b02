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
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/pool"
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

// demoOptions are `skiff demo`'s flags.
type demoOptions struct {
	Standin   string        // the stand-in runner binary
	PoolsFile string        // the pools file
	Out       string        // the demo's data directory, replaced on every run
	Jobs      int           // jobs the burst queues (besides the cancelled, unmatched and duplicate ones)
	Limit     int           // runners alive at once in every pool (0: the pools file's, one GPU job at a time)
	Duration  time.Duration // how long each stand-in's job runs
	Timeout   time.Duration // give up after this long
	// Work is the stand-ins' real work per job (SKIFF_STANDIN_WORK;
	// demoWork by default, "" for none).
	Work string
	// CPUProfile, when set, is where a CPU profile of this process (skiff
	// local, the simulator and the driver) is written.
	CPUProfile string
}

// runDemo is `skiff demo` (what `make demo` runs): skiff local against the
// GitHub simulator over HTTP, with stand-in runners, a realistic burst of
// signed webhooks, progress, a summary and the invariants checked.
func runDemo(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("demo", "[--standin build/skiff-standin] [-f examples/lab.yaml] [--jobs 40] [--limit N]", stderr)
	var o demoOptions
	fs.StringVar(&o.Standin, "standin", "build/skiff-standin", "the stand-in runner (make demo builds it)")
	fs.StringVar(&o.PoolsFile, "f", "examples/lab.yaml", "the pools file (process pools priced at an operator's rate, so the records have a cost)")
	fs.IntVar(&o.Jobs, "jobs", 40, "how many jobs the burst queues (besides the cancelled, unmatched and duplicate ones)")
	fs.DurationVar(&o.Duration, "job-duration", time.Second, "how long each stand-in runner's job runs")
	fs.StringVar(&o.Out, "out", "build/demo", "where the demo keeps its data (replaced on every run)")
	fs.DurationVar(&o.Timeout, "timeout", 5*time.Minute, "give up after this long")
	fs.IntVar(&o.Limit, "limit", 0, "runners alive at once in every pool, its maxRunners too (default: the pools file's maxRunners, the number of CPUs, one GPU job at a time)")
	fs.StringVar(&o.Work, "work", demoWork, "the stand-ins' real work per job name, name=CPU-seconds:MiB;... (SKIFF_STANDIN_WORK; empty: none)")
	fs.StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile of skiff local, the simulator and the driver to this file")
	if ok, code := parseFlags(fs, args); !ok {
		return code
	}
	if err := demo(stdout, o); err != nil {
		fmt.Fprintln(stderr, "skiff demo:", err)
		return exitFailed
	}
	return exitOK
}

func demo(w io.Writer, o demoOptions) error {
	standin, poolsFile, out, n, limit, duration, timeout := o.Standin, o.PoolsFile, o.Out, o.Jobs, o.Limit, o.Duration, o.Timeout
	if o.CPUProfile != "" {
		f, err := os.Create(o.CPUProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("starting the CPU profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	standin, err := filepath.Abs(standin)
	if err != nil {
		return err
	}
	if _, err := os.Stat(standin); err != nil {
		return fmt.Errorf("the stand-in runner: %w (make demo builds it: go build -o build/skiff-standin ./cmd/skiff-standin)", err)
	}
	pools, err := pool.Load(poolsFile)
	if err != nil {
		return err
	}
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
	if err := os.RemoveAll(out); err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o700); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()

	// GitHub: the simulator, an App installed on an organisation.
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	// GitHub overlaps its deliveries; the simulator's default, one at a
	// time, would make the burst's pace one webhook answer at a time.
	sim := ghsim.New(ghsim.Options{WebhookLanes: demoWebhookLanes})
	defer sim.Close()
	const appID, org = 4242, "acme"
	sim.AddApp(ghsim.AppConfig{ID: appID, Slug: "skiff-demo", PublicKey: &key.PublicKey})
	sim.AddOrg(org)
	for _, p := range pools.Pools {
		if p.RunnerGroup != "" && p.RunnerGroup != "Default" {
			sim.AddRunnerGroup(org, p.RunnerGroup)
		}
	}
	sim.AddRepo(org, "app")
	sim.Install(appID, org)
	secret := make([]byte, 16)
	_, _ = rand.Read(secret)
	webhookSecret := fmt.Sprintf("%x", secret)

	// skiff local: one process, one SQLite file, runners as local processes.
	logFile, err := os.Create(filepath.Join(out, "skiff.log"))
	if err != nil {
		return err
	}
	defer logFile.Close()
	l, err := local.New(local.Config{
		DataDir: filepath.Join(out, "data"), PoolsFile: poolsFile, Pools: pools, Listen: "127.0.0.1:0", RunnerCommand: []string{standin},
		RunnerEnv:    []string{"SKIFF_STANDIN_DURATION=" + duration.String(), "SKIFF_STANDIN_IDLE=20s", "SKIFF_STANDIN_WORK=" + o.Work},
		Limits:       limits,
		GitHubAPIURL: sim.URL(), AppIDs: []int64{appID},
		AppKeys:       string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})),
		WebhookSecret: webhookSecret, Allow: []string{org}, Installations: []string{"*"},
		ReconcileEvery: 2 * time.Second, // a lab reconciles often; AWS every minute
		MetricsRecords: true,
	}, slog.New(slog.NewJSONHandler(logFile, nil)))
	if err != nil {
		return err
	}
	sim.SetWebhook(appID, l.URL(), webhookSecret)
	runCtx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- l.Run(runCtx) }()
	defer func() { stop(); <-ran }()
	fmt.Fprintf(w, "skiff demo: skiff local at %s, GitHub simulator at %s, logs in %s\n", l.URL(), sim.URL(), logFile.Name())

	started := time.Now() // the burst's first job: what "all done in" counts from
	// The burst: CPU jobs in runs of four, GPU jobs (one at a time here),
	// large jobs, a job no pool takes, a job cancelled while queued.
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
	jobs = append(jobs, &demoJob{labels: []string{"self-hosted", "windows"}}, &demoJob{labels: []string{"self-hosted", "linux", "x64"}, cancel: true})
	// The slot meter runs from the burst's first job.
	want := 0
	for _, j := range jobs {
		if j.launch {
			want++
			if spec, err := pools.ResolveRepo(j.labels, org+"/app"); err == nil {
				j.pool = spec.Pool
			}
		}
	}
	slots := newSlotMeter(pools)
	meterDone := make(chan struct{})
	meterStopped := make(chan struct{})
	go func() {
		defer close(meterStopped)
		slots.run(ctx, sim, l, meterDone)
	}()
	for start := 0; start < len(jobs); start += 4 {
		batch := jobs[start:min(start+4, len(jobs))]
		spec := ghsim.RunSpec{Repo: org + "/app", Event: "push"}
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
	// A duplicate delivery: the first queued job's webhook, sent again.
	dup, err := duplicate(ctx, sim, l.URL(), webhookSecret)
	if err != nil {
		return err
	}

	// Progress until every job a pool takes has completed and every runner ended.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var wall time.Duration // the last job completed and every runner ended
	for {
		completed, running := 0, 0
		var ids []int64
		for _, j := range jobs {
			if j.launch {
				ids = append(ids, j.id)
			}
		}
		for _, st := range sim.JobStatuses(ids) { // one simulator step, not one per job
			switch st {
			case "completed":
				completed++
			case "in_progress":
				running++
			}
		}
		live := 0
		for _, p := range pools.Pools {
			n, _ := l.Ledger.Live(ctx, p.Name)
			live += n
		}
		depth, _ := l.Queue.Depth(ctx)
		fmt.Fprintf(w, "  %5.1fs  queued %3d  running %3d  completed %3d/%d  runners alive %3d\n",
			time.Since(started).Seconds(), depth, running, completed, want, live)
		if completed == want && live == 0 && wall == 0 {
			wall = time.Since(started)
		}
		// The queue may still hold delayed messages of jobs that waited
		// out a backoff and launched since: they launch nothing more.
		if completed == want && live == 0 && depth == 0 {
			break
		}
		select {
		case <-ctx.Done():
			var stuck []string
			for _, j := range jobs {
				if st, _ := sim.Job(j.id); j.launch && st.Status != "completed" {
					stuck = append(stuck, fmt.Sprintf("job %d %v %s", j.id, j.labels, st.Status))
				}
			}
			return fmt.Errorf("%d of %d jobs completed, %d runners alive after %s (%s): see %s", completed, want, live, timeout,
				strings.Join(stuck, "; "), logFile.Name())
		case <-tick.C:
		}
	}
	close(meterDone)
	<-meterStopped
	fmt.Fprintf(w, "  all done %s after the burst's first job (the queue empty after %s); peak memory of this process (skiff local, the simulator and the driver): %s\n",
		wall.Round(100*time.Millisecond), time.Since(started).Round(100*time.Millisecond), peakRSS())
	slots.report(ctx, w, sim, l, jobs, wall)
	return summarize(ctx, w, sim, l, jobs, dup, logFile.Name(), filepath.Join(out, "report.html"))
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
func (m *slotMeter) report(ctx context.Context, w io.Writer, sim *ghsim.Server, l *local.Local, jobs []*demoJob, wall time.Duration) {
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
	if cpu, ok := childrenCPU(); ok {
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
	runners, ok1 := childrenCPU()
	self, ok2 := selfCPU()
	if ok1 && ok2 && wall > 0 {
		fmt.Fprintln(w, " ", cpuShare(runners, self, wall, runtime.NumCPU()))
	}
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
// against the schema, and writes the usage report.
func records(ctx context.Context, l *local.Local, jobs []*demoJob, report string) (int, []string, error) {
	var recs []metrics.Record
	for r, err := range l.Records.List(ctx, metrics.Filter{}) {
		if err != nil {
			return 0, nil, err
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
		return 0, nil, err
	}
	err = metrics.WriteHTML(f, recs, metrics.Advise(recs, metrics.AdviceOptions{MinRecords: 5, Headroom: 0.2}), time.Now())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return len(recs), failures, err
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
	fmt.Fprintf(w, "\nskiff demo summary\n")
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
	nrec, recFailures, err := records(ctx, l, jobs, report)
	if err != nil {
		return err
	}
	failures = append(failures, recFailures...)
	fmt.Fprintf(w, "  metrics records         %d written, validated against schema/metrics.schema.json; report: %s\n", nrec, report)
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
