package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/skiffci/skiff/internal/local"
	"github.com/skiffci/skiff/pkg/setup"
	"github.com/skiffci/skiff/pkg/sqlite"
)

// runLocal is `skiff local`: the whole pipeline on this machine, with
// runners as local processes. Secrets come from the environment or files,
// never from flags (a flag shows in the process list).
func runLocal(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("local", "-f pools.yaml [--app-id ID --app-key-file app.pem] [flags]", stderr)
	pools := fs.String("f", "pools.yaml", "the pools file")
	dataDir := fs.String("data-dir", "skiff-data", "the SQLite file, the runners' work directories and their logs")
	listen := fs.String("listen", "127.0.0.1:8080", "the webhook's address (the GitHub App's webhook URL points here)")
	prov := fs.String("provider", "process", "process (run each runner as a local process), slurm (each runner a Slurm batch job, from a login node), kubernetes (each runner a Pod) or dry-run (log what would launch)")
	runner := fs.String("runner", "", "the runner command for the process and slurm providers, e.g. /opt/actions-runner/run.sh (on the shared filesystem for slurm)")
	slurmShared := fs.String("slurm-shared", "", "with --provider slurm: a directory the compute nodes share, for registrations (jit/, mode 0700) and work directories (work/)")
	kubeconfig := fs.String("kubeconfig", "", "with --provider kubernetes: the kubeconfig (default: in-cluster credentials in a Pod, else $KUBECONFIG or ~/.kube/config)")
	kubeNS := fs.String("kube-namespace", "", "with --provider kubernetes: the runner namespace of pools without a kubernetes: section")
	kubeImage := fs.String("kube-image", "", "with --provider kubernetes: the runner image of pools without a kubernetes: section (the runner with skiff-podhelper, infra/kubernetes/runner)")
	appID := fs.Int64("app-id", 0, "the GitHub App's id (default: the App skiff setup stored in --data-dir)")
	keyFile := fs.String("app-key-file", "", "the GitHub App's private key (PEM); or SKIFF_GITHUB_APP_KEY")
	apiURL := fs.String("github-api-url", "", "GitHub's REST root (default https://api.github.com; GHES: https://HOST/api/v3)")
	webURL := fs.String("github-url", "", "GitHub's web root (default https://github.com)")
	allow := fs.String("allow", "", "owners and owner/name repositories served, comma-separated, or * (required)")
	installations := fs.String("installations", "*", "App installation ids served, comma-separated, or *")
	limits := fs.String("limits", "", "runners alive at once per pool, e.g. gpu=1,cpu=8 (default: the number of CPUs)")
	fast := fs.Bool("fast-sync", false, "fsync the SQLite file at checkpoints only (≈4–5× the write rate; a power loss may lose the last jobs)")
	records := fs.Bool("metrics-records", false, "keep one metrics record per finished job in the SQLite file (read them with skiff metrics --data-dir)")
	reconcile := fs.Duration("reconcile-every", time.Minute, "how often the reconciler passes (reaps idle runners, relaunches stranded jobs, redelivers failed webhooks); AWS runs it every minute, a lab may run it more often")
	if ok, code := parseFlags(fs, args); !ok {
		return code
	}
	cfg := local.Config{DataDir: *dataDir, PoolsFile: *pools, Listen: *listen, Provider: *prov, GitHubAPIURL: *apiURL,
		GitHubURL: *webURL, WebhookSecret: os.Getenv("SKIFF_WEBHOOK_SECRET"), Allow: splitList(*allow),
		Installations: splitList(*installations), MetricsRecords: *records, ReconcileEvery: *reconcile, SlurmShared: *slurmShared}
	if *runner != "" {
		cfg.RunnerCommand = strings.Fields(*runner)
	}
	if *fast {
		cfg.Durability = sqlite.Normal
	}
	var problems []string
	// Without --app-id and a key, the App skiff setup left in the data
	// directory (its key file holds {"<app id>": "<pem>"}).
	keys, hookSecret, fromSetup, err := setup.LoadLocalApp(*dataDir)
	if err != nil {
		problems = append(problems, err.Error())
	}
	if *appID > 0 {
		cfg.AppIDs = []int64{*appID}
	} else if !fromSetup {
		problems = append(problems, "--app-id is required (or run skiff setup first)")
	}
	switch key := os.Getenv("SKIFF_GITHUB_APP_KEY"); {
	case key != "":
		cfg.AppKeys = key
	case *keyFile != "":
		b, err := os.ReadFile(*keyFile)
		if err != nil {
			problems = append(problems, fmt.Sprintf("reading --app-key-file: %v", err))
		}
		cfg.AppKeys = string(b)
	case fromSetup:
		cfg.AppKeys = keys
		if cfg.WebhookSecret == "" {
			cfg.WebhookSecret = hookSecret
		}
	default:
		problems = append(problems, "the App's key is required: --app-key-file or SKIFF_GITHUB_APP_KEY (or run skiff setup first)")
	}
	if cfg.WebhookSecret == "" {
		problems = append(problems, "SKIFF_WEBHOOK_SECRET is required: skiff does not accept unsigned webhooks")
	}
	if (cfg.Provider == "process" || cfg.Provider == "slurm") && len(cfg.RunnerCommand) == 0 {
		problems = append(problems, "--runner is required with the "+cfg.Provider+" provider")
	}
	if cfg.Provider == "slurm" && cfg.SlurmShared == "" {
		problems = append(problems, "--slurm-shared is required with the slurm provider")
	}
	if l, err := parseLimits(*limits); err != nil {
		problems = append(problems, err.Error())
	} else {
		cfg.Limits = l
	}
	if *reconcile <= 0 {
		problems = append(problems, "--reconcile-every must be positive")
	}
	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintln(stderr, "skiff local:", p)
		}
		return exitUsage
	}
	logger := slog.New(slog.NewJSONHandler(stdout, nil))
	if cfg.Provider == "kubernetes" {
		if cfg.Pools, cfg.ExternalProvider, err = kubeProvider(*pools, *kubeconfig, *kubeNS, *kubeImage, logger); err != nil {
			fmt.Fprintln(stderr, "skiff local:", err)
			return exitUsage
		}
	}
	l, err := local.New(cfg, logger)
	if err != nil {
		fmt.Fprintln(stderr, "skiff local:", err)
		return exitFailed
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	fmt.Fprintf(stderr, "skiff local: webhook at %s (point the App's webhook URL there); Ctrl-C stops\n", l.URL())
	if err := l.Run(ctx); err != nil {
		fmt.Fprintln(stderr, "skiff local:", err)
		return exitFailed
	}
	return exitOK
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
