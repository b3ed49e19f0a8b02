package loadtest

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	sdkec2 "github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/allow"
	"github.com/skiffci/skiff/pkg/fanout"
	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/instanceevents"
	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/metrics"
	"github.com/skiffci/skiff/pkg/metrics/writer"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/pool/poolfile"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/provider/ec2"
	"github.com/skiffci/skiff/pkg/provider/ec2/ec2fake"
	"github.com/skiffci/skiff/pkg/provider/ec2/ec2prices"
	"github.com/skiffci/skiff/pkg/queue"
	"github.com/skiffci/skiff/pkg/room"
	"github.com/skiffci/skiff/pkg/scaledown"
	"github.com/skiffci/skiff/pkg/scaleup"
	"github.com/skiffci/skiff/pkg/telemetry"
	"github.com/skiffci/skiff/pkg/webhook"
)

const (
	org     = "acme"
	appID   = 4242
	secret  = "loadtest-webhook-secret"
	region  = "eu-west-1"
	account = "123456789012"
	// tick is the simulated time between two steps of the world.
	tick = 5 * time.Second
	// visibility is the job queue's visibility timeout, as deployed: six
	// times scale-up's five-minute timeout (infra/skiff/data.go).
	visibility = 30 * time.Minute
	// maxReceives is the queue's redrive bound (infra's MaxReceiveCount).
	maxReceives = names.DefaultMaxAttempts + 3
	// jobsPerMinute is the arrival rate: about a thousand jobs an hour.
	jobsPerMinute = 16
	// drainLimit bounds the simulated time after the last arrival.
	drainLimit = 4 * time.Hour
)

var subnets = map[string]string{"subnet-0aaaaaaaa": "eu-west-1a", "subnet-0bbbbbbbb": "eu-west-1b", "subnet-0cccccccc": "eu-west-1c"}

var (
	keyOnce sync.Once
	appKey  *rsa.PrivateKey
	keyErr  error
)

// world is skiff and its peers in one process, on one simulated clock.
type world struct {
	t      testing.TB
	cfg    Config
	rng    *mrand.Rand
	starts []metrics.StartRow // the metrics records' start time, for the report
	clock  *ghsim.Clock
	start  time.Time
	ctx    context.Context
	log    *slog.Logger
	logs   *logScanner
	pools  *pool.Config
	faults map[string]int
	// warmRng draws the warm faults apart from rng, so that they leave the
	// other faults' draws as they were.
	warmRng *mrand.Rand

	sim        *ghsim.Server
	fake       *ec2fake.Fake
	ec2Calls   *opCounter
	be         *backend
	q          *queue.Memory
	proxy      *hookProxy
	up         *scaleup.Service
	room       *room.Service
	down       *scaledown.Service
	events     *instanceevents.Service
	upGuard    *guard
	downGuard  *guard
	counter    *telemetry.Memory
	violations []string
	vmu        sync.Mutex

	plan        []plannedRun
	next        int // the next planned run
	runs        []*runRec
	jobs        map[int64]*jobRec
	insts       map[string]*instance
	pending     []ec2Event
	interrupted map[string]bool // runner names whose instance a spot interruption ended
	stalled     []*stalledInvocation
	invocations int
	crashes     int
	stalls      int
	peakLive    map[int64]int // job id → most instances alive at once launched for it
	peakHeap    uint64
	passStart   time.Time // when the reconciler's current pass began

	pmu    sync.Mutex
	probes map[int64]probe // job id → the signals held back during it

	ranOn    map[int64]*instance  // job id → the instance its runner ran it on
	byRunner map[string]*instance // runner name → the instance it ran a job on
	wmu      sync.Mutex
	warm     warmWatch
}

type plannedRun struct {
	at    time.Duration
	large bool
	probe probe // its one job is a probe
	jobs  []ghsim.JobSpec
}

type runRec struct {
	id   int64
	jobs int // jobs of the first attempt
}

type jobRec struct {
	id       int64
	run      int64
	queuedAt time.Time
	original bool
}

// newWorld builds everything. Its servers are stopped at the test's end.
func newWorld(t testing.TB, cfg Config) *world {
	cfg = withDefaults(cfg)
	clock := ghsim.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	w := &world{t: t, cfg: cfg, rng: mrand.New(mrand.NewPCG(cfg.Seed, cfg.Seed^0x10ad)), clock: clock, start: clock.Now(),
		ctx: context.Background(), faults: map[string]int{}, jobs: map[int64]*jobRec{}, insts: map[string]*instance{},
		interrupted: map[string]bool{}, peakLive: map[int64]int{}, counter: &telemetry.Memory{}, probes: map[int64]probe{},
		warmRng: mrand.New(mrand.NewPCG(cfg.Seed+10, 0x3a7)), ranOn: map[int64]*instance{}, byRunner: map[string]*instance{},
		warm: newWarmWatch()}
	w.logs = &logScanner{next: cfg.Log, replaced: map[int64]int{}}
	w.log = slog.New(slog.NewJSONHandler(w.logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	w.plan = planRuns(w.rng, cfg.Jobs)
	var err error
	warmEnd := w.start.Add(w.plan[len(w.plan)-1].at)
	if w.pools, err = poolfile.Parse([]byte(poolsYAML(w.start, warmEnd, largeMaxRunners(cfg.Jobs))), "loadtest-pools.yaml"); err != nil {
		t.Fatalf("the harness's pools: %v", err)
	}
	keyOnce.Do(func() { appKey, keyErr = rsa.GenerateKey(rand.Reader, 2048) })
	if keyErr != nil {
		t.Fatal(keyErr)
	}
	w.startGitHub()
	// The store.
	if w.be, err = newBackend(t, cfg.Store, clock.Now); err != nil {
		t.Fatalf("the store: %v", err)
	}
	// The queue: SQS's semantics on the simulated clock.
	w.q = &queue.Memory{}
	w.q.SetClock(clock.Now)
	w.q.SetVisibility(visibility)
	w.startWebhook()
	w.startEC2()
	w.startRoom()
	w.startScaleUp()
	w.startScaleDown()
	w.startInstanceEvents()
	w.setGitHubFaults()
	return w
}

// withDefaults fills in a Config's defaults: 100 jobs, the memory store.
func withDefaults(cfg Config) Config {
	if cfg.Jobs <= 0 {
		cfg.Jobs = 100
	}
	if cfg.Store == "" {
		cfg.Store = StoreMemory
	}
	return cfg
}

// startGitHub starts the simulator, the App installed on the organisation
// with its three repositories.
func (w *world) startGitHub() {
	w.sim = ghsim.New(ghsim.Options{Now: w.clock.Now, Seed: w.cfg.Seed + 1, RateLimit: 15000, BusyHidden: w.flagHidden})
	w.t.Cleanup(w.sim.Close)
	w.sim.AddApp(ghsim.AppConfig{ID: appID, Slug: "skiff-loadtest", PublicKey: &appKey.PublicKey})
	w.sim.AddOrg(org)
	for _, r := range []string{"app", "api", "web"} {
		w.sim.AddRepo(org, r)
	}
	w.sim.Install(appID, org)
	testenv.KeptGroups(w.t, w.sim, w.pools, org)
}

// startWebhook starts the webhook behind its HTTP server, GitHub's
// deliveries through the proxy.
func (w *world) startWebhook() {
	t, cfg, clock := w.t, w.cfg, w.clock
	allowed, _ := allow.Parse([]string{org})
	installs, _ := webhook.ParseInstallationList([]string{"*"})
	hook, err := webhook.New(webhook.Options{Secrets: [][]byte{[]byte(secret)}, Router: w.pools, Policies: w.pools, Queue: w.q,
		Store: w.be.records, Runners: w.be.ledger, Lifecycle: w.be.lifecycle, Counter: w.counter, Logger: w.log.With("function", "webhook"),
		Now: clock.Now, Allow: allowed, Installations: installs})
	if err != nil {
		t.Fatal(err)
	}
	hookSrv := httptest.NewServer(hook)
	t.Cleanup(hookSrv.Close)
	w.proxy = &hookProxy{target: hookSrv.URL, hc: &http.Client{Timeout: 10 * time.Second}, now: clock.Now,
		rng: mrand.New(mrand.NewPCG(cfg.Seed+2, 0xd0d0)), dupRate: cfg.Faults.DuplicateHooks, delayRate: cfg.Faults.ReorderedHooks,
		hold: w.holdDelivery}
	proxySrv := httptest.NewServer(w.proxy)
	t.Cleanup(proxySrv.Close)
	w.sim.SetWebhook(appID, proxySrv.URL, secret)
}

// startEC2 starts the EC2 fake's Query-protocol front, called through the
// SDK, and scale-up's and scale-down's providers over it, each behind its
// guard.
func (w *world) startEC2() {
	t, cfg, clock := w.t, w.cfg, w.clock
	w.fake = ec2fake.New()
	w.fake.SetClock(clock.Now)
	// A stop takes the OS's shutdown; a start, the model's stopped pending.
	w.fake.SetStateDelays(30*time.Second, w.latency().Kinds[Stopped].PendingToRunning.P50)
	for s, z := range subnets {
		w.fake.SetZone(s, z)
	}
	w.ec2Calls = &opCounter{handler: w.fake.Handler()}
	ec2Srv := httptest.NewServer(w.ec2Calls)
	t.Cleanup(ec2Srv.Close)
	api := sdkec2.New(sdkec2.Options{Region: region, BaseEndpoint: aws.String(ec2Srv.URL),
		Credentials: credentials.NewStaticCredentialsProvider("AKIDLOADTEST", "loadtest", ""),
		// The SDK's standard retryer, its backoff waits cut to a millisecond
		// of wall-clock time.
		Retryer: retry.AddWithMaxBackoffDelay(retry.NewStandard(), time.Millisecond)})
	noDelay := time.Duration(0)
	// Every service's concurrent calls run one at a time, in orders drawn
	// from the seed.
	upProv, err := ec2.NewProvider(ec2.ProviderOptions{API: api, Registrations: w.be.regs, Capacity: room.CapacityMemory{Store: w.be.room}, Partition: "aws",
		Region: region, Account: account, TagRetryDelay: &noDelay, Counter: w.counter, Logger: w.log.With("function", "scaleup"), Now: clock.Now,
		Executor: fanout.NewSeeded(cfg.Seed + 3)})
	if err != nil {
		t.Fatal(err)
	}
	// The reconciler launches warm machines, with their warm items.
	downProv, err := ec2.NewProvider(ec2.ProviderOptions{API: api, Registrations: w.be.regs, Capacity: room.CapacityMemory{Store: w.be.room},
		Partition: "aws", Region: region, Account: account, TagRetryDelay: &noDelay, Counter: w.counter,
		Logger: w.log.With("function", "scaledown"), Now: clock.Now, Executor: fanout.NewSeeded(cfg.Seed + 4)})
	if err != nil {
		t.Fatal(err)
	}
	w.upGuard = &guard{Provider: upProv, sim: w.sim, violation: w.violate, handed: w.checkHand, stopping: w.stopping}
	w.downGuard = &guard{Provider: downProv, sim: w.sim, violation: w.violate, handed: w.checkHand, stopping: w.stopping}
}

// githubClient is one function's GitHub client (each Lambda has its own),
// its retries' random draws seeded.
func (w *world) githubClient(fn string, seed uint64) *github.Client {
	c, err := github.NewClient([]github.App{{ID: appID, Key: appKey}}, github.WithBaseURL(w.sim.URL()), github.WithClock(w.clock.Now),
		github.WithSleep(func(ctx context.Context, _ time.Duration) error { return ctx.Err() }), github.WithLogger(w.log.With("function", fn)),
		github.WithRand(mrand.New(mrand.NewPCG(seed, 0x917)).Float64))
	if err != nil {
		w.t.Fatal(err)
	}
	return c
}

// startRoom builds the waiting room, as deployed: scale-up puts the jobs it
// cannot launch now in it, every reporter of a runner's end wakes it, the
// reconciler sweeps it; its offers, delayed tries and probes go to the job
// queue.
func (w *world) startRoom() {
	jitter := mrand.New(mrand.NewPCG(w.cfg.Seed+9, 0x200))
	var jmu sync.Mutex
	var err error
	w.room, err = room.New(room.Options{Room: w.be.room, Queue: w.q, Jobs: w.be.records, Pools: w.pools, Ledger: w.be.ledger,
		Counter: w.counter, Logger: w.log.With("function", "room"), Now: w.clock.Now, Jitter: func() float64 {
			jmu.Lock()
			defer jmu.Unlock()
			return jitter.Float64()
		}})
	if err != nil {
		w.t.Fatal(err)
	}
}

// startScaleUp builds scale-up, with its own GitHub client.
func (w *world) startScaleUp() {
	cfg := w.cfg
	var upLaunches ledger.Launches = w.be.launches
	if cfg.Plant == PlantIgnoreClaims {
		upLaunches = blindClaims{upLaunches}
	}
	var upLedger ledger.Ledger = room.Ledger{Ledger: w.be.ledger, Room: w.room}
	if cfg.Plant == PlantTakeWithoutEnd {
		upLedger = takeBlindLedger{upLedger}
	}
	var err error
	w.up, err = scaleup.New(scaleup.Options{Pools: w.pools, Launches: stepLaunches{upLaunches},
		Ledger: stepLedger{upLedger}, Room: w.room,
		Jobs: w.be.records, Provider: stepped(w.upGuard.port()), GitHub: stepGitHub{w.githubClient("scaleup", cfg.Seed+5)}, Counter: w.counter,
		Logger: w.log.With("function", "scaleup"), Now: w.clock.Now, Executor: fanout.NewSeeded(cfg.Seed + 6)})
	if err != nil {
		w.t.Fatal(err)
	}
}

// scaleDownPeers are what scale-down talks to, some of them blinded by a
// plant.
type scaleDownPeers struct {
	github       scaledown.GitHub
	ledger       ledger.Ledger
	provider     provider.Provider
	replacements queue.Sender
}

// plantScaleDown blinds the peers of scale-down that plant names; a plant
// of another function leaves them as they are.
func plantScaleDown(plant string, p scaleDownPeers) (scaleDownPeers, error) {
	switch plant {
	case PlantIgnoreBusyFlag:
		p.github = flagBlindGitHub{p.github}
	case PlantIgnoreLedgerStart:
		p.ledger = startBlindLedger{p.ledger}
	case PlantIgnoreHookTag:
		p.provider = keepWarmer(tagBlindProvider{p.provider}, p.provider)
	case PlantIgnoreRefusal:
		p.github = refusalBlindGitHub{p.github}
	case "", PlantEndInterrupted, PlantLoseReplacements, PlantIgnoreClaims, PlantTakeWithoutEnd:
	default:
		return p, fmt.Errorf("unknown plant %q (%v)", plant, Plants)
	}
	if plant == PlantLoseReplacements {
		p.replacements = lostSends{}
	}
	return p, nil
}

// startScaleDown builds scale-down, with its own GitHub client and the
// metrics records on or off.
func (w *world) startScaleDown() {
	t, cfg := w.t, w.cfg
	peers, err := plantScaleDown(cfg.Plant, scaleDownPeers{github: deleteGuard{GitHub: w.githubClient("scaledown", cfg.Seed+7), w: w},
		ledger: w.be.ledger, provider: w.downGuard.port(), replacements: w.q})
	if err != nil {
		t.Fatal(err)
	}
	w.down, err = scaledown.New(scaledown.Options{Pools: w.pools, Ledger: room.Ledger{Ledger: peers.ledger, Room: w.room},
		Room: w.room, Claims: w.be.launches, Jobs: w.be.records,
		Provider: peers.provider, GitHub: peers.github, Queue: peers.replacements, Metrics: w.metricsWriter(), Counter: w.counter,
		Logger: w.log.With("function", "scaledown"), Now: w.clock.Now, Scopes: []github.Scope{github.OrgScope(org)}, Apps: []int64{appID},
		MaxReplacements: 3, RerunInterrupted: []string{"*"}, MaxJobChecks: cfg.MaxJobChecks, Executor: fanout.NewSeeded(cfg.Seed + 8)})
	if err != nil {
		t.Fatal(err)
	}
}

// recordPools are the pools whose jobs get metrics records: all of them,
// or none, on both functions together, as the stack sets
// SKIFF_METRICS_RECORDS.
func (w *world) recordPools() []string {
	if w.cfg.MetricsRecords {
		return []string{"*"}
	}
	return nil
}

// metricsWriter is scale-down's writer of metrics records, or none.
func (w *world) metricsWriter() writer.MetricsWriter {
	if !w.cfg.MetricsRecords {
		return writer.NoMetrics{}
	}
	return &writer.RecordWriter{Pools: w.recordPools(), Jobs: w.be.records, Ledger: w.be.ledger, Out: w.be.metrics,
		CloudProvider: "aws", Region: region, Prices: ec2prices.Prices, Counter: w.counter, Logger: w.log.With("function", "scaledown")}
}

// startInstanceEvents builds the EC2 events function.
func (w *world) startInstanceEvents() {
	var eventsLedger instanceevents.Ledger = wakingLedger{Ledger: room.Ledger{Ledger: w.be.ledger, Room: w.room},
		Interruptions: w.be.ledger}
	if w.cfg.Plant == PlantEndInterrupted {
		eventsLedger = interruptBlindLedger{eventsLedger}
	}
	var err error
	w.events, err = instanceevents.New(instanceevents.Options{Ledger: eventsLedger, Counter: w.counter,
		Logger: w.log.With("function", "ec2events"), RecordPools: w.recordPools()})
	if err != nil {
		w.t.Fatal(err)
	}
}

// wakingLedger is the ledger as the EC2 events write it, with the waiting
// room woken when a runner ends.
type wakingLedger struct {
	room.Ledger
	ledger.Interruptions
}

func (w *world) violate(s string) {
	w.vmu.Lock()
	w.violations = append(w.violations, fmt.Sprintf("at +%s: %s", w.clock.Now().Sub(w.start), s))
	w.vmu.Unlock()
}

// planRuns spreads the jobs over runs of one to four jobs arriving at
// about jobsPerMinute from warmUp on; one run in five asks for the large
// pool, and one of those in four a larger disk (skiff/disk=100: another
// spec, which no warm machine fits). Of the n jobs, probeJobs(n) are
// probes, each a run of its own spread evenly over the window, running 14
// to 18 minutes on the standard pool.
func planRuns(rng *mrand.Rand, n int) []plannedRun {
	window := time.Duration(float64(n)/jobsPerMinute*float64(time.Minute)) + time.Minute
	var out []plannedRun
	probes := min(probeJobs(n), n/2)
	for k := range probes {
		kind := probeKinds[k%len(probeKinds)]
		out = append(out, plannedRun{at: warmUp + window*time.Duration(k+1)/time.Duration(probes+1), probe: kind,
			jobs: []ghsim.JobSpec{{Name: "probe-" + probeNames[kind], Labels: []string{"self-hosted", "linux", "x64"},
				Duration: time.Duration(14*60+rng.IntN(4*60)) * time.Second}}})
	}
	for left := n - probes; left > 0; {
		k := min(left, 1+rng.IntN(4))
		left -= k
		r := plannedRun{at: warmUp + time.Duration(rng.Int64N(int64(window))), large: rng.IntN(5) == 0}
		disk := r.large && rng.IntN(4) == 0
		for range k {
			labels := []string{"self-hosted", "linux", "x64"}
			switch {
			case disk:
				labels = []string{"self-hosted", "large", "skiff/disk=100"}
			case r.large:
				labels = []string{"self-hosted", "large"}
			}
			r.jobs = append(r.jobs, ghsim.JobSpec{Name: fmt.Sprintf("job-%d", len(r.jobs)+1), Labels: labels,
				Duration: jobDuration(rng)})
		}
		out = append(out, r)
	}
	sortRuns(out)
	return out
}

// jobDuration: most jobs run one to eight minutes, one in ten 12 to 25
// (longer than a runner's idle timeout, so a reaper that mistakes a busy
// runner for an idle one has something to kill).
func jobDuration(rng *mrand.Rand) time.Duration {
	if rng.IntN(10) == 0 {
		return time.Duration(12*60+rng.IntN(13*60)) * time.Second
	}
	return time.Duration(60+rng.IntN(420)) * time.Second
}

func sortRuns(rs []plannedRun) {
	for i := 1; i < len(rs); i++ {
		for j := i; j > 0 && rs[j].at < rs[j-1].at; j-- {
			rs[j], rs[j-1] = rs[j-1], rs[j]
		}
	}
}

// setGitHubFaults injects GitHub's errors into every endpoint skiff calls,
// with a secondary rate-limit window on some when a burst is on.
func (w *world) setGitHubFaults() {
	w.setGitHubFaultsUntil(time.Time{}, "")
}

var githubOps = []string{ghsim.OpCreateInstallationToken, ghsim.OpGetOrgInstallation, ghsim.OpGetRepoInstallation,
	ghsim.OpListHookDeliveries, ghsim.OpRedeliverHookDelivery, ghsim.OpGenerateOrgJITConfig, ghsim.OpGenerateRepoJITConfig,
	ghsim.OpListRunnerGroups, ghsim.OpCreateOrgRegToken, ghsim.OpCreateRepoRegToken, ghsim.OpListOrgRunners, ghsim.OpListRepoRunners,
	ghsim.OpGetOrgRunner, ghsim.OpGetRepoRunner, ghsim.OpDeleteOrgRunner, ghsim.OpDeleteRepoRunner, ghsim.OpGetJob,
	ghsim.OpGetWorkflowRun, ghsim.OpGetPermissionLevel, ghsim.OpRerunFailedJobs}

func (w *world) setGitHubFaultsUntil(limitUntil time.Time, limited string) {
	f := w.cfg.Faults
	for _, op := range githubOps {
		fault := ghsim.Fault{ErrorRate: f.GitHub5xx, ErrorStatus: []int{500, 502, 503}[len(op)%3]}
		if op == limited {
			fault.LimitUntil, fault.RetryAfter = limitUntil, time.Minute
		}
		w.sim.SetFault(op, fault)
	}
	w.sim.SetFault(ghsim.OpWebhook, ghsim.Fault{ErrorRate: f.DroppedHooks})
}

// logScanner passes the services' log lines on and counts the
// replacements the reconciler logs, per job.
type logScanner struct {
	next     io.Writer
	mu       sync.Mutex
	replaced map[int64]int
}

func (l *logScanner) Write(p []byte) (int, error) {
	if strings.Contains(string(p), "replacement launched") {
		var line struct {
			Msg   string `json:"msg"`
			JobID int64  `json:"job_id"`
		}
		if json.Unmarshal(p, &line) == nil && line.Msg == "stranded job: replacement launched" {
			l.mu.Lock()
			l.replaced[line.JobID]++
			l.mu.Unlock()
		}
	}
	if l.next != nil {
		return l.next.Write(p)
	}
	return len(p), nil
}

func (l *logScanner) replacements(job int64) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.replaced[job]
}

func (l *logScanner) total() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, v := range l.replaced {
		n += v
	}
	return n
}
