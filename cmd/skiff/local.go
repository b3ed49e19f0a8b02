package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/skiffci/skiff/internal/local"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/pool/poolfile"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/setup"
	"github.com/skiffci/skiff/pkg/store/sqlitestore"
)

// runLocal is `skiff local`: the whole pipeline on this machine, with
// runners as local processes. Secrets come from the environment or files,
// never from flags (a flag shows in the process list).
func runLocal(args []string, stdout, stderr io.Writer) int {
	f, ok, code := parseLocalFlags(args, stderr)
	if !ok {
		return code
	}
	// Without --app-id and a key, the App skiff setup left in the data
	// directory (its key file holds {"<app id>": "<pem>"}).
	var app setupApp
	app.keys, app.hookSecret, app.ok, app.err = setup.LoadLocalApp(f.dataDir)
	cfg, problems := localConfig(f, os.Getenv, os.ReadFile, app)
	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintln(stderr, "skiff local:", p)
		}
		return exitUsage
	}
	return serveLocal(cfg, f, stdout, stderr)
}

// localFlags are `skiff local`'s flags.
type localFlags struct {
	pools, dataDir, listen, provider, runner, slurmShared string
	kubeconfig, kubeNS, kubeImage, deployment             string
	containerImage                                        string
	appID                                                 int64
	keyFile, apiURL, webURL, allow, installations, limits string
	fast, records                                         bool
	reconcile                                             time.Duration
}

// parseLocalFlags reads `skiff local`'s flags; when ok is false the
// command ends with code.
func parseLocalFlags(args []string, stderr io.Writer) (f localFlags, ok bool, code int) {
	fs := newFlags("local", "-f pools.yaml [--app-id ID --app-key-file app.pem] [flags]", stderr)
	fs.StringVar(&f.pools, "f", "pools.yaml", "the pools file")
	fs.StringVar(&f.dataDir, "data-dir", "skiff-data", "the SQLite file, the runners' work directories and their logs")
	fs.StringVar(&f.deployment, "deployment", "", "the deployment id that tags this daemon's runners and scopes what it lists and ends (default: the one kept in --data-dir, else derived from its path and kept there)")
	fs.StringVar(&f.listen, "listen", "127.0.0.1:8080", "the webhook's address (the GitHub App's webhook URL points here)")
	fs.StringVar(&f.provider, "provider", "process", "the backend of pools whose section names none (a pool's process:, slurm:, kubernetes: or container: section picks its own): process (run each runner as a local process), slurm (each runner a Slurm batch job, from a login node), kubernetes (each runner a Pod), container (each runner a container on Docker or Podman) or dry-run (every pool: log what would launch)")
	fs.StringVar(&f.runner, "runner", "", "the runner command for the process and slurm providers, e.g. /opt/actions-runner/run.sh (on the shared filesystem for slurm)")
	fs.StringVar(&f.slurmShared, "slurm-shared", "", "with --provider slurm: a directory the compute nodes share, for registrations (jit/, mode 0711, a 0700 directory per run-as account) and work directories (work/)")
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "with --provider kubernetes: the kubeconfig (default: in-cluster credentials in a Pod, else $KUBECONFIG or ~/.kube/config)")
	fs.StringVar(&f.kubeNS, "kube-namespace", "", "with --provider kubernetes: the runner namespace of pools without a kubernetes: section")
	fs.StringVar(&f.kubeImage, "kube-image", "", "with --provider kubernetes: the runner image of pools without a kubernetes: section (the runner with skiff-podhelper, infra/kubernetes/runner)")
	fs.StringVar(&f.containerImage, "container-image", "", "with --provider container: the runner image of pools without a container: section (infra/kubernetes/runner); the engine is DOCKER_HOST's")
	fs.Int64Var(&f.appID, "app-id", 0, "the GitHub App's id (default: the App skiff setup stored in --data-dir)")
	fs.StringVar(&f.keyFile, "app-key-file", "", "the GitHub App's private key (PEM); or SKIFF_GITHUB_APP_KEY")
	fs.StringVar(&f.apiURL, "github-api-url", "", "GitHub's REST root (default https://api.github.com; GHES: https://HOST/api/v3)")
	fs.StringVar(&f.webURL, "github-url", "", "GitHub's web root (default https://github.com)")
	fs.StringVar(&f.allow, "allow", "", "owners and owner/name repositories served, comma-separated, or * (required)")
	fs.StringVar(&f.installations, "installations", "*", "App installation ids served, comma-separated, or *")
	fs.StringVar(&f.limits, "limits", "", "runners alive at once per pool, e.g. gpu=1,cpu=8 (default: the number of CPUs)")
	fs.BoolVar(&f.fast, "fast-sync", false, "fsync the SQLite file at checkpoints only (≈4–5× the write rate; a power loss may lose the last jobs)")
	fs.BoolVar(&f.records, "metrics-records", false, "keep one metrics record per finished job in the SQLite file (read them with skiff metrics --data-dir)")
	fs.DurationVar(&f.reconcile, "reconcile-every", time.Minute, "how often the reconciler passes (reaps idle runners, relaunches stranded jobs, redelivers failed webhooks); AWS runs it every minute, a lab may run it more often")
	ok, code = parseFlags(fs, args)
	return f, ok, code
}

// setupApp is what `skiff setup` left in the data directory
// (setup.LoadLocalApp): ok is false when it holds no App.
type setupApp struct {
	keys, hookSecret string
	ok               bool
	err              error
}

// localConfig builds skiff local's configuration from its flags, the
// environment (getenv), the key file (readFile) and the App skiff setup
// stored, and lists every problem with them.
func localConfig(f localFlags, getenv func(string) string, readFile func(string) ([]byte, error), app setupApp) (local.Config, []string) {
	cfg := local.Config{DataDir: f.dataDir, Deployment: f.deployment, PoolsFile: f.pools, Listen: f.listen, Provider: f.provider, GitHubAPIURL: f.apiURL,
		GitHubURL: f.webURL, WebhookSecret: getenv("SKIFF_WEBHOOK_SECRET"), Allow: splitList(f.allow),
		Installations: splitList(f.installations), MetricsRecords: f.records, ReconcileEvery: f.reconcile, SlurmShared: f.slurmShared}
	if f.runner != "" {
		cfg.RunnerCommand = strings.Fields(f.runner)
	}
	if f.keyFile != "" {
		cfg.Hide = append(cfg.Hide, f.keyFile) // from the runners' sandboxes
	}
	if f.fast {
		cfg.Durability = sqlitestore.Normal
	}
	var problems []string
	if app.err != nil {
		problems = append(problems, app.err.Error())
	}
	if f.appID > 0 {
		cfg.AppIDs = []int64{f.appID}
	} else if !app.ok {
		problems = append(problems, "--app-id is required (or run skiff setup first)")
	}
	switch key := getenv("SKIFF_GITHUB_APP_KEY"); {
	case key != "":
		cfg.AppKeys = key
	case f.keyFile != "":
		b, err := readFile(f.keyFile)
		if err != nil {
			problems = append(problems, fmt.Sprintf("reading --app-key-file: %v", err))
		}
		cfg.AppKeys = string(b)
	case app.ok:
		cfg.AppKeys = app.keys
		if cfg.WebhookSecret == "" {
			cfg.WebhookSecret = app.hookSecret
		}
	default:
		problems = append(problems, "the App's key is required: --app-key-file or SKIFF_GITHUB_APP_KEY (or run skiff setup first)")
	}
	// Loaded once for the checks below and for the daemon; a file that
	// cannot be loaded is reported when the daemon loads it again.
	if pools, err := poolfile.Load(f.pools); err == nil {
		cfg.Pools = pools
	}
	if cfg.WebhookSecret == "" && local.NeedsWebhook(cfg.Pools) {
		problems = append(problems, "SKIFF_WEBHOOK_SECRET is required: skiff does not accept unsigned webhooks")
	}
	problems = append(problems, backendProblems(cfg)...)
	if l, err := parseLimits(f.limits); err != nil {
		problems = append(problems, err.Error())
	} else {
		cfg.Limits = l
	}
	if f.reconcile <= 0 {
		problems = append(problems, "--reconcile-every must be positive")
	}
	return cfg, problems
}

// backendProblems lists the flags the backends of cfg's pools need and
// cfg lacks: the runner command for process pools and for pools without a
// section on --provider slurm (a slurm: section names its runnerDir), the
// shared directory for Slurm pools. Without pools (a file that could not
// be loaded, reported when the daemon loads it) cfg's provider alone is
// checked.
func backendProblems(cfg local.Config) []string {
	pools := cfg.Pools
	if pools == nil {
		pools = &pool.Config{Pools: []*pool.Pool{{Name: "-"}}} // one pool of --provider's
	}
	var problems []string
	for _, b := range local.ProvidersOf(pools, cfg.Provider) {
		needRunner := b == "process"
		if b == "slurm" {
			if cfg.SlurmShared == "" {
				problems = append(problems, "--slurm-shared is required with the slurm provider")
			}
			for _, p := range local.Routed(pools, cfg.Provider, b).Pools {
				needRunner = needRunner || p.Slurm == nil || p.Slurm.RunnerDir == ""
			}
		}
		if needRunner && len(cfg.RunnerCommand) == 0 {
			problems = append(problems, "--runner is required with the "+b+" provider")
		}
	}
	slices.Sort(problems)
	return problems
}

// serveLocal builds skiff local from cfg and runs it until a signal; it
// returns the exit status.
func serveLocal(cfg local.Config, f localFlags, stdout, stderr io.Writer) int {
	logger := slog.New(slog.NewJSONHandler(stdout, nil))
	if err := buildExternal(&cfg, f, logger); err != nil {
		fmt.Fprintln(stderr, "skiff local:", err)
		return exitUsage
	}
	l, err := local.New(cfg, logger)
	if err != nil {
		fmt.Fprintln(stderr, "skiff local:", err)
		return exitFailed
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if l.URL() == "" {
		fmt.Fprintln(stderr, "skiff local: every pool takes its jobs from its runner scale set: no port open; Ctrl-C stops")
	} else {
		fmt.Fprintf(stderr, "skiff local: webhook at %s (point the App's webhook URL there); Ctrl-C stops\n", l.URL())
	}
	if err := l.Run(ctx); err != nil {
		fmt.Fprintln(stderr, "skiff local:", err)
		return exitFailed
	}
	return exitOK
}

// buildExternal builds the kubernetes and container providers, for the
// pools that run on them (local.ProviderOf: their section, or --provider
// for a pool with none), into cfg.ExternalProviders. cfg.Pools is the
// pools file localConfig loaded; nil when it could not be, which is said
// here.
func buildExternal(cfg *local.Config, f localFlags, logger *slog.Logger) error {
	if cfg.Pools == nil {
		_, err := poolfile.Load(f.pools)
		return fmt.Errorf("loading pools: %w", err)
	}
	pools := cfg.Pools
	var err error
	// The providers are built here, so the deployment id is decided here
	// (only once a provider is about to be: a refusal writes nothing).
	deployment := func() (string, error) {
		if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
			return "", fmt.Errorf("creating the data directory: %w", err)
		}
		id, err := local.Deployment(cfg.DataDir, cfg.Deployment)
		cfg.Deployment = id
		return id, err
	}
	for _, name := range local.ProvidersOf(pools, cfg.Provider) {
		var p provider.Provider
		routed := local.Routed(pools, cfg.Provider, name)
		switch name {
		case "kubernetes":
			p, err = kubeProvider(routed, f.kubeconfig, f.kubeNS, f.kubeImage, deployment, logger)
		case "container":
			p, err = containerProvider(routed, f.containerImage, cfg.DataDir, deployment, logger)
		default:
			continue
		}
		if err != nil {
			return err
		}
		cfg.ExternalProviders = append(cfg.ExternalProviders, p)
	}
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// parseLimits reads "gpu=1,cpu=8".
func parseLimits(s string) (map[string]int, error) {
	out := map[string]int{}
	for _, kv := range splitList(s) {
		k, v, ok := strings.Cut(kv, "=")
		n, err := strconv.Atoi(v)
		if !ok || k == "" || err != nil || n < 0 {
			return nil, fmt.Errorf("--limits: %q is not pool=count", kv)
		}
		out[k] = n
	}
	return out, nil
}
