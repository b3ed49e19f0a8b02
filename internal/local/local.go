package local

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/skiffci/skiff/internal/httpserve"
	"github.com/skiffci/skiff/internal/privatefile"
	"github.com/skiffci/skiff/internal/wiring"
	"github.com/skiffci/skiff/pkg/allow"
	"github.com/skiffci/skiff/pkg/freshness"
	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/groups"
	"github.com/skiffci/skiff/pkg/instanceevents"
	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/listener"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/pool/poolfile"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/provider/route"
	"github.com/skiffci/skiff/pkg/provider/slurm"
	"github.com/skiffci/skiff/pkg/queue"
	"github.com/skiffci/skiff/pkg/room"
	"github.com/skiffci/skiff/pkg/runnerversion"
	"github.com/skiffci/skiff/pkg/scaledown"
	"github.com/skiffci/skiff/pkg/scaleup"
	"github.com/skiffci/skiff/pkg/setup"
	"github.com/skiffci/skiff/pkg/store/sqlitestore"
	"github.com/skiffci/skiff/pkg/telemetry"
	"github.com/skiffci/skiff/pkg/webhook"
)

// localVisibility is how long a received job stays hidden in local mode.
const localVisibility = 5 * time.Second

// DefaultScaleUpWorkers is Config.ScaleUpWorkers's default. One batch
// waits on its slowest launch (a process start takes tens of milliseconds
// on a busy machine, under the provider's lock), on GitHub's answers and
// on the file's commits; with a few batches at once, one's waits overlap
// another's work, and a burst of jobs is not launched ten at a time.
const DefaultScaleUpWorkers = 4

// localMaxAttempts lets a job wait for a free runner slot for about a day:
// on one machine a pool's limit is its concurrency (one GPU job per GPU),
// and a job over it waits its turn rather than being dead-lettered.
const localMaxAttempts = 24 * 60 * 60 / 5

// Config configures `skiff local`: the whole pipeline in one process
// over one SQLite file, local processes (or a dry run) for runners.
type Config struct {
	// DataDir holds the SQLite file, the runners' work directories and
	// their logs. Created if missing.
	DataDir string
	// PoolsFile is the operator's pools file.
	PoolsFile string
	// Deployment is the deployment id (names.ValidDeployment): "" takes the
	// one kept in the data directory, or derives one from it and keeps it
	// (Deployment). It scopes what the Slurm and Kubernetes providers list
	// and end; the process provider's runners live in the data directory.
	Deployment string
	// Pools, when set, is used instead of loading PoolsFile (skiff-demo
	// raises the pools' maxRunners with its --limit).
	Pools *pool.Config
	// Listen is the webhook's address (default 127.0.0.1:8080; port 0 picks one).
	Listen string
	// Provider is the provider of the pools whose section names no other
	// backend (ProviderOf): "process" (default), "slurm", "dry-run", or
	// the name of an external provider. A pool with a process:, slurm:,
	// kubernetes: or container: section goes to that backend's provider:
	// one daemon serves several backends (pkg/provider/route).
	Provider string
	// SlurmShared is the slurm provider's directory on the filesystem the
	// login node shares with the compute nodes: registrations (jit/, 0711,
	// with a 0700 directory per run-as account) and the runners' work
	// directories (work/). Required with "slurm".
	SlurmShared string
	// SlurmEnv are extra KEY=VALUE entries for Slurm's commands (say
	// SLURM_CONF=/etc/slurm/other.conf).
	SlurmEnv []string
	// SlurmSudo runs a command as a run-as account (default
	// slurm.DefaultSudo, sudo -n -u).
	SlurmSudo []string
	// ExternalProvider and ExternalProviders are providers the caller
	// built (skiff local's kubernetes and container providers, built in
	// cmd/skiff), found by Name: the pools ProviderOf sends to that name
	// run on it.
	ExternalProvider  provider.Provider
	ExternalProviders []provider.Provider
	// RunnerCommand is the runner's command for the process provider, e.g.
	// ["/opt/actions-runner/run.sh"] or ["skiff-standin"].
	RunnerCommand []string
	// RunnerEnv are extra KEY=VALUE entries for every runner.
	RunnerEnv []string
	// Hide are more paths the process provider's sandboxed runners must
	// not see (the App's key file, say); the data directory is always
	// hidden.
	Hide []string
	// Limits caps the runners alive at once per pool (e.g. one GPU job per
	// GPU); unlisted pools take the number of CPUs.
	Limits map[string]int
	// GitHubAPIURL and GitHubURL are GitHub's REST and web roots
	// (github.com by default; a GHES host, or the simulator).
	GitHubAPIURL, GitHubURL string
	// AppIDs and AppKeys are the GitHub Apps: the key secret's value (one
	// PEM, or {"<app id>": "<pem>"}, whose keys are the ids when AppIDs is
	// empty: what skiff setup writes).
	AppIDs  []int64
	AppKeys string
	// WebhookSecret is the App's webhook secret.
	WebhookSecret string
	// Allow and Installations are the webhook's allow-lists (fail closed:
	// "*" admits every owner / installation).
	Allow, Installations []string
	// ScaleUpWorkers is how many scale-up batches are handled at once
	// (default DefaultScaleUpWorkers), as the queue drives several
	// scale-up invocations at once in AWS.
	ScaleUpWorkers int
	// ReconcileEvery is the scale-down pass's period (default 1 minute).
	ReconcileEvery time.Duration
	// InstancePoll is how often the runners are listed for ends the
	// provider did not tell of (default instanceBackstop when it tells of
	// each end, instancePoll otherwise).
	InstancePoll time.Duration
	// Durability is the SQLite file's synchronous mode (default sqlitestore.Full).
	Durability sqlitestore.Synchronous
	// MetricsRecords turns on one metrics record per finished job, kept in
	// the SQLite file (Local.MetricsRecords); the process provider measures each
	// runner (CPU time, peak memory, GPUs) and describes the host.
	MetricsRecords bool
	// Now is the clock (default time.Now), for tests.
	Now func() time.Time
}

// Local is the whole pipeline in one process: the webhook's HTTP endpoint,
// the queue and the store in one SQLite file, and the scale-up loop,
// through the same services as the Lambdas. Run serves until its context
// ends, then shuts down cleanly.
type Local struct {
	cfg    Config
	log    *slog.Logger
	db     *sqlitestore.DB
	Queue  *sqlitestore.Queue
	Store  *sqlitestore.Store
	Ledger ledger.Ledger
	// Room is the pools' waiting room.
	Room *room.Service
	// MetricsRecords holds the metrics records (with Config.MetricsRecords).
	MetricsRecords *sqlitestore.MetricsRecords
	Provider       provider.Provider
	ScaleUp        *scaleup.Service
	// ScaleDown is the reconciler, run every ReconcileEvery.
	ScaleDown *scaledown.Service
	// Runners is the runner freshness check: the releases, the pools' holds.
	Runners *freshness.Service
	// Groups keeps the runner groups of the pools that name none: on every
	// reconciler pass, and at a pool's first launch in an organization.
	Groups  *groups.Keeper
	Webhook *webhook.Handler
	// Listeners take the jobs of the pools with jobs: listener from their
	// runner scale sets, one per organization (listener.go).
	Listeners []*listener.Listener

	closeFn func(context.Context) error
	events  *instanceevents.Service
	ln      net.Listener
	srv     *http.Server
	// ended holds one value after the watch reported runners that ended
	// (coalesced): the reconciler's next pass runs at once.
	ended chan struct{}
	// seenEnded are the ended runners the watch listed last time (only
	// its goroutine touches it).
	seenEnded map[string]bool
	// reportedEnded are the ended runners whose end the ledger was told
	// of (the watch's own, like seenEnded).
	reportedEnded map[string]bool
}

// How often local mode looks for runners that ended (what EC2's
// state-change events are in AWS). A provider that tells of each end
// (endNotifier: the process provider) is listed at once after one, and
// polled only as a backstop; another (Slurm) is polled every
// instancePoll, which bounds how long a freed slot stays idle.
const (
	instancePoll     = 2 * time.Second
	instanceBackstop = 30 * time.Second
)

// endNotifier is a provider that tells when a runner ended
// (process.Provider.Ended).
type endNotifier interface {
	Ended() <-chan struct{}
}

// DBFile is the SQLite file of local mode's data directory: queue, job
// records, launch claims and runner ledger.
func DBFile(dataDir string) string { return filepath.Join(dataDir, "skiff.db") }

// deploymentFile keeps a data directory's deployment id.
const deploymentFile = "deployment"

// Deployment returns the deployment id of the data directory dataDir
// (which must exist): the id kept in it; else want, or one derived from
// the directory's absolute path ("local-" and 8 hex digits), kept there
// from now on. A want that differs from the kept id is an error: the
// runners launched under the kept id would be left to no one.
func Deployment(dataDir, want string) (string, error) {
	if want != "" && !names.ValidDeployment(want) {
		return "", fmt.Errorf("local mode: deployment %q: want 1 to %d letters, digits and hyphens, starting with a letter",
			want, names.MaxDeploymentLen)
	}
	path := filepath.Join(dataDir, deploymentFile)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		kept := strings.TrimSpace(string(b))
		if !names.ValidDeployment(kept) {
			return "", fmt.Errorf("local mode: %s holds %q, not a deployment id", path, kept)
		}
		if want != "" && want != kept {
			return "", fmt.Errorf("local mode: the data directory belongs to deployment %q, not %q (its runners carry that id)", kept, want)
		}
		return kept, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("reading the deployment id: %w", err)
	}
	id := want
	if id == "" {
		abs, err := filepath.Abs(dataDir)
		if err != nil {
			return "", fmt.Errorf("deriving the deployment id: %w", err)
		}
		sum := sha256.Sum256([]byte(abs))
		id = "local-" + hex.EncodeToString(sum[:4])
	}
	if err := privatefile.Write(path, []byte(id+"\n")); err != nil {
		return "", fmt.Errorf("keeping the deployment id: %w", err)
	}
	return id, nil
}

// SlurmNamePrefix is the Slurm provider's job-name prefix of a deployment:
// skiff.<deployment>.
func SlurmNamePrefix(deployment string) string { return slurm.DefaultNamePrefix + deployment + "." }

// New opens the data directory and builds every part; nothing runs until
// Run. The caller owns the returned Local and must Run or Close it.
func New(cfg Config, logger *slog.Logger) (*Local, error) {
	cfg, pools, err := prepare(cfg)
	if err != nil {
		return nil, err
	}
	gh, err := gitHubClient(&cfg, logger)
	if err != nil {
		return nil, err
	}
	lists, err := parseWebhookLists(cfg)
	if err != nil {
		return nil, err
	}
	db, err := sqlitestore.Open(DBFile(cfg.DataDir), sqlitestore.Options{Synchronous: cfg.Durability})
	if err != nil {
		return nil, err
	}
	l := &Local{cfg: cfg, log: logger, db: db, ended: make(chan struct{}, 1)}
	ok := false
	defer func() {
		if !ok {
			_ = db.Close()
		}
	}()
	// A retried job comes back after a few seconds: one machine's capacity
	// frees up as soon as a runner ends, not minutes later as EC2's does.
	l.Queue = sqlitestore.NewQueue(db, sqlitestore.QueueOptions{Visibility: localVisibility, Now: cfg.Now})
	l.Store = sqlitestore.NewStore(db, cfg.Now)
	ledger := sqlitestore.NewLedger(db, cfg.Now)
	l.Ledger = ledger
	launches := sqlitestore.NewLaunches(db, cfg.Now)
	if err := l.buildProvider(pools); err != nil {
		return nil, err
	}
	if err := l.buildServices(pools, gh, ledger, launches, lists); err != nil {
		return nil, err
	}
	if needsWebhook(pools) { // with every pool on the listener, no port is opened
		if cfg.WebhookSecret == "" {
			return nil, errors.New("local mode: the webhook secret is required: skiff does not accept unsigned webhooks")
		}
		l.ln, err = net.Listen("tcp", cfg.Listen)
		if err != nil {
			return nil, fmt.Errorf("listening for webhooks on %s: %w", cfg.Listen, err)
		}
		// Timeouts on every phase and a bound on the bodies read at once
		// (internal/httpserve says why each has its value); the webhook cuts
		// each body at its own limit.
		l.srv = httpserve.New(l.Webhook, httpserve.Options{})
	}
	if err := l.recoverAtStart(context.Background(), pools, l.Ledger, launches); err != nil {
		if l.ln != nil {
			_ = l.ln.Close()
		}
		return nil, err
	}
	ok = true
	return l, nil
}

// prepare fills cfg's defaults, creates the data directory and loads the
// pools.
func prepare(cfg Config) (Config, *pool.Config, error) {
	if cfg.DataDir == "" {
		return cfg, nil, errors.New("local mode: the data directory is required")
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:8080"
	}
	if cfg.Provider == "" {
		cfg.Provider = "process"
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.ReconcileEvery <= 0 {
		cfg.ReconcileEvery = time.Minute
	}
	if cfg.ScaleUpWorkers <= 0 {
		cfg.ScaleUpWorkers = DefaultScaleUpWorkers
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return cfg, nil, fmt.Errorf("creating the data directory: %w", err)
	}
	// It holds the queue, the records and (skiff setup's) the App's key.
	if err := setup.CheckPrivate(cfg.DataDir); err != nil {
		return cfg, nil, fmt.Errorf("local mode: the data directory: %w", err)
	}
	id, err := Deployment(cfg.DataDir, cfg.Deployment)
	if err != nil {
		return cfg, nil, err
	}
	cfg.Deployment = id
	if cfg.Pools != nil {
		return cfg, cfg.Pools, nil
	}
	pools, err := poolfile.Load(cfg.PoolsFile)
	if err != nil {
		return cfg, nil, fmt.Errorf("loading pools: %w", err)
	}
	return cfg, pools, nil
}

// gitHubClient builds the GitHub client over cfg's Apps; with no AppIDs,
// the ids are the key file's (what skiff setup writes), set in cfg.
func gitHubClient(cfg *Config, logger *slog.Logger) (*github.Client, error) {
	apps, err := github.ParseAppKeys(cfg.AppIDs, cfg.AppKeys)
	if err != nil {
		return nil, err
	}
	if len(cfg.AppIDs) == 0 {
		for _, a := range apps {
			cfg.AppIDs = append(cfg.AppIDs, a.ID)
		}
	}
	ghOpts := []github.Option{github.WithLogger(logger)}
	if cfg.GitHubAPIURL != "" {
		ghOpts = append(ghOpts, github.WithBaseURL(cfg.GitHubAPIURL))
	}
	return github.NewClient(apps, ghOpts...)
}

// webhookLists are the allow-lists: the repositories (the webhook, the
// listeners and the runner groups admit by it) and the installations.
type webhookLists struct {
	allow         allow.List
	installations webhook.InstallationList
}

// parseWebhookLists parses cfg's allow-lists.
func parseWebhookLists(cfg Config) (webhookLists, error) {
	allowed, err := allow.Parse(cfg.Allow)
	if err != nil {
		return webhookLists{}, fmt.Errorf("local mode: the allow-list: %w", err)
	}
	installations, err := webhook.ParseInstallationList(cfg.Installations)
	if err != nil {
		return webhookLists{}, fmt.Errorf("local mode: the installations: %w", err)
	}
	return webhookLists{allow: allowed, installations: installations}, nil
}

// buildServices builds the waiting room and the services over the stores
// and the provider: state changes, scale-up, scale-down and the webhook.
func (l *Local) buildServices(pools *pool.Config, gh *github.Client, ledger *sqlitestore.Ledger, launches *sqlitestore.Launches,
	lists webhookLists) error {
	cfg, logger, counter := l.cfg, l.log, telemetry.Discard
	// The waiting room: a job that finds its pool full waits in the file
	// and is offered the moment one of the pool's runners ends (the ledger
	// below wakes it, whoever reports the end).
	var err error
	l.Room, err = room.New(room.Options{Room: sqlitestore.NewRoom(l.db), Queue: l.Queue, Jobs: l.Store, Pools: pools,
		Ledger: ledger, Logger: logger, Now: cfg.Now})
	if err != nil {
		return err
	}
	l.Ledger = room.Ledger{Ledger: ledger, Room: l.Room}
	metricsWriter, recordPools := l.metricsWriter(pools, ledger, counter)
	l.events, err = instanceevents.New(instanceevents.Options{Ledger: wiring.WakingEvents{Ledger: room.Ledger{Ledger: ledger, Room: l.Room},
		Interruptions: ledger}, Counter: counter, Logger: logger, RecordPools: recordPools})
	if err != nil {
		return err
	}
	l.Groups, err = groups.New(groups.Options{Pools: pools, Allow: lists.allow, GitHub: gh, Counter: counter, Logger: logger, Now: cfg.Now})
	if err != nil {
		return err
	}
	// The runner releases come from the configured GitHub API, once a day
	// (kept in the data file); a GitHub Enterprise Server answers none.
	l.Runners, err = freshness.New(freshness.Options{Pools: pools, State: sqlitestore.NewRunnerState(l.db), Logger: logger, Now: cfg.Now,
		Source: runnerversion.SourceFunc(func(ctx context.Context) ([]runnerversion.Release, error) {
			return gh.RunnerReleases(ctx, freshness.Installation(ctx))
		})})
	if err != nil {
		return err
	}
	sg, err := l.buildListeners(pools, gh, lists.allow)
	if err != nil {
		return err
	}
	l.ScaleUp, err = scaleup.New(scaleup.Options{Pools: pools, Launches: launches, Ledger: l.Ledger, Jobs: l.Store,
		Provider: l.Provider, GitHub: sg, Counter: counter, Logger: logger, Now: cfg.Now, GitHubURL: cfg.GitHubURL, Room: l.Room,
		Groups: l.Groups, Deployment: cfg.Deployment, Runners: l.Runners,
		// Locally GitHub's answer is cheap and a slot is precious: a job
		// cancelled while it waited for one is not launched.
		MaxAttempts: localMaxAttempts, CheckQueued: true})
	if err != nil {
		return err
	}
	// Failed webhook deliveries are looked for only when a pool takes its
	// jobs from the webhook: a daemon whose pools all use the listener has
	// none of its own (an App's deliveries to an AWS stack are that stack's
	// to redeliver), and would spend a GitHub call a minute on the look.
	var apps []int64
	if needsWebhook(pools) {
		apps = cfg.AppIDs
	}
	l.ScaleDown, err = scaledown.New(scaledown.Options{Pools: pools, Ledger: l.Ledger, Claims: launches, Jobs: l.Store,
		Provider: l.Provider, GitHub: gh, Queue: l.Queue, Counter: counter, Logger: logger, Now: cfg.Now,
		Apps: apps, Metrics: metricsWriter, ScaleUpChecksQueued: true, // scale-up runs with CheckQueued above
		Room: l.Room, Groups: l.Groups, Deployment: cfg.Deployment, Runners: l.Runners})
	if err != nil {
		return err
	}
	if !needsWebhook(pools) {
		return nil // every pool takes its jobs from the listener
	}
	l.Webhook, err = webhook.New(webhook.Options{Secrets: [][]byte{[]byte(cfg.WebhookSecret)}, Router: pools, Policies: pools,
		Scopes: pools, SecurityEvents: sqlitestore.NewSecurityEvents(l.db, cfg.Now),
		Queue: l.Queue, Store: l.Store, Runners: l.Ledger, Counter: counter, Logger: logger, Now: cfg.Now,
		Allow: lists.allow, Installations: lists.installations, Recorded: sqlitestore.NewInstallations(l.db),
		Deployment: cfg.Deployment})
	return err
}

// startLedger is the part of the runner ledger recoverAtStart uses: each
// pool's live records, a reservation released, a launch recorded.
// ledger.Ledger implements it.
type startLedger interface {
	LiveRunners(ctx context.Context, pool string) ([]ledger.Runner, error)
	End(ctx context.Context, name string, at time.Time, reason string) (bool, error)
	Launched(ctx context.Context, name string, l ledger.LaunchReport) error
}

var _ startLedger = ledger.Ledger(nil)

// recoverAtStart takes over what the previous process on this data directory left
// when it was killed in the middle of a launch. None of its scale-up
// invocations goes on, so: a reservation whose runner the provider lists
// (adopted, or ended since) is recorded as launched, one without a runner
// is released, and the launch claims' leases end — the jobs' messages,
// never acknowledged, come back and recover their launch record or launch again at
// once. Otherwise such a reservation would count in its pool until the
// reconciler's stale-reservation rule (half an hour), and such a job would
// wait out its claim's lease (10 minutes).
func (l *Local) recoverAtStart(ctx context.Context, pools *pool.Config, led startLedger, launches *sqlitestore.Launches) error {
	instances, err := l.Provider.List(ctx, provider.Filter{})
	if err != nil {
		return fmt.Errorf("listing the runners at start: %w", err)
	}
	byRunner := map[string]provider.Instance{}
	for _, in := range instances {
		byRunner[in.Tags[names.TagRunnerName]] = in
	}
	for _, p := range pools.Pools {
		rs, err := led.LiveRunners(ctx, p.Name)
		if err != nil {
			return fmt.Errorf("reading the ledger of pool %s at start: %w", p.Name, err)
		}
		for _, r := range rs {
			if r.State != ledger.StateReserved {
				continue
			}
			log := l.log.With("pool", p.Name, "runner_name", r.Name, "job_id", r.JobID)
			in, ok := byRunner[r.Name]
			if !ok {
				if _, err := led.End(ctx, r.Name, l.cfg.Now(), "not_launched"); err != nil {
					return fmt.Errorf("releasing runner %s at start: %w", r.Name, err)
				}
				log.Info("released a reservation the previous process left without a runner")
				continue
			}
			if err := led.Launched(ctx, r.Name, ledger.LaunchReport{InstanceID: in.ID, InstanceType: in.InstanceType, Zone: in.Zone,
				Spot: in.Capacity == provider.Spot, StartKind: ledger.StartCold, At: in.LaunchedAt}); err != nil {
				return fmt.Errorf("recording runner %s's launch at start: %w", r.Name, err)
			}
			log.Info("recorded the launch the previous process made before it was killed", "instance_id", in.ID)
		}
	}
	n, err := launches.EndLeases(ctx, l.cfg.Now())
	if err != nil {
		return fmt.Errorf("ending the previous process's launch claims: %w", err)
	}
	if n > 0 {
		l.log.Info("ended the launch claims the previous process held", "claims", n)
	}
	return nil
}

// URL is the webhook's URL, for the GitHub App's settings ("" when every
// pool takes its jobs from the listener and no port is open).
func (l *Local) URL() string {
	if l.ln == nil {
		return ""
	}
	return "http://" + l.ln.Addr().String() + "/"
}

// Run serves webhooks and runs the scale-up loops until ctx ends, then
// stops taking work, completes what it answered, ends the runners it started
// and closes the data file.
func (l *Local) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	serveErr := make(chan error, 1)
	wg.Add(3)
	go func() {
		defer wg.Done()
		l.watchInstances(ctx)
	}()
	for _, ln := range l.Listeners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ln.Run(ctx)
		}()
	}
	go func() {
		defer wg.Done()
		l.reconcile(ctx)
	}()
	if l.srv != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := l.srv.Serve(l.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				serveErr <- err
			}
		}()
	}
	go func() {
		defer wg.Done()
		queue.ConsumeConcurrently(ctx, l.Queue, 10, l.cfg.ScaleUpWorkers, l.ScaleUp.Handle, l.log)
	}()
	l.log.Info("skiff local ready", "webhook", l.URL(), "data_dir", l.cfg.DataDir, "provider", l.cfg.Provider)
	var err error
	select {
	case <-ctx.Done():
	case err = <-serveErr:
	}
	shut, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if l.srv != nil {
		_ = l.srv.Shutdown(shut)
	}
	wg.Wait()
	return errors.Join(err, l.Close(shut))
}

// watchInstances reports runners that ended to the ledger, as EC2's
// state-change events do in AWS: after each end the provider tells of, and
// on every poll, each ended instance not yet reported is (a failed report
// is tried again at the next), so none is missed.
func (l *Local) watchInstances(ctx context.Context) {
	var ended <-chan struct{}
	poll := instancePoll
	if n, ok := l.Provider.(endNotifier); ok {
		ended, poll = n.Ended(), instanceBackstop
		if r, ok := l.Provider.(*route.Router); ok && !r.AllEndsTold() {
			poll = instancePoll // a member (Slurm) tells of no end
		}
	}
	if l.cfg.InstancePoll > 0 {
		poll = l.cfg.InstancePoll
	}
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ended:
		case <-t.C:
		}
		if l.reportEnded(ctx) > 0 {
			select {
			case l.ended <- struct{}{}:
			default:
			}
		}
	}
}

// reportEnded reports each ended instance the provider lists that it has
// not reported yet, and returns how many runners it saw end since its
// previous call; for each of those it tells the room that its pool has
// capacity again. Each end is reported once: the provider lists an ended
// runner for an hour, and reporting every one again at every end would
// make the ledger's writes grow with the square of the runners.
func (l *Local) reportEnded(ctx context.Context) int {
	instances, err := l.Provider.List(ctx, provider.Filter{})
	if err != nil {
		l.log.Warn("listing runner processes", "err", err)
		return 0
	}
	n, seen, reported := 0, map[string]bool{}, map[string]bool{}
	for _, in := range instances {
		if in.State.Alive() {
			continue
		}
		if !l.seenEnded[in.ID] {
			n++
			// The backend's own slot freed (the process provider's
			// per-pool limit): a capacity backoff of the pool ends and
			// its waiting jobs are offered. Local providers have no
			// places (provider.Placer): the pool is the place.
			l.Room.Recovered(ctx, in.Pool, "")
		}
		seen[in.ID] = true
		if l.reportedEnded[in.ID] {
			reported[in.ID] = true
			continue
		}
		if err := l.events.StateChanged(ctx, in.ID, "terminated", l.cfg.Now()); err != nil {
			l.log.Warn("reporting an ended runner", "instance_id", in.ID, "err", err)
			continue
		}
		reported[in.ID] = true
	}
	l.seenEnded, l.reportedEnded = seen, reported
	return n
}

// reconcile runs a scale-down pass every ReconcileEvery until ctx ends.
//
// A pass also runs as soon as the watch reports a runner that ended: the
// EC2 events leave many ends to the reconciler (a runner that ran another
// job than its own, or whose job's metrics record it writes), and its
// pass is what frees the slot and wakes the pool's room. In AWS the
// reconciler runs every minute; a lab's slots are too few to idle that long.
func (l *Local) reconcile(ctx context.Context) {
	t := time.NewTicker(l.cfg.ReconcileEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-l.ended:
		}
		// A pass has a minute, as the Lambda does: it starts no new step in
		// the last seconds before its deadline.
		pass, cancel := context.WithTimeout(ctx, time.Minute)
		if _, err := l.ScaleDown.Reconcile(pass); err != nil && ctx.Err() == nil {
			l.log.Error("reconciling", "err", err)
		}
		cancel()
	}
}

// Close ends the runners this process started and closes the data file.
func (l *Local) Close(ctx context.Context) error {
	var errs []error
	if l.closeFn != nil {
		errs = append(errs, l.closeFn(ctx))
	}
	return errors.Join(append(errs, l.db.Close())...)
}
