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

	"github.com/skiffci/skiff/internal/wiring"
	kube "github.com/skiffci/skiff/pkg/provider/kubernetes"
	"github.com/skiffci/skiff/pkg/sqlite"
)

// runLocal is `skiff local`: the whole pipeline on this machine, with
// runners as local processes. Secrets come from the environment or files,
// never from flags (a flag shows in the process list).
func runLocal(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("local", "-f pools.yaml --app-id ID --app-key-file app.pem [flags]", stderr)
	pools := fs.String("f", "pools.yaml", "the pools file")
	dataDir := fs.String("data-dir", "skiff-data", "the SQLite file, the runners' work directories and their logs")
	listen := fs.String("listen", "127.0.0.1:8080", "the webhook's address (the GitHub App's webhook URL points here)")
	prov := fs.String("provider", "process", "process (run each runner as a local process), kubernetes (a Pod per runner) or dry-run (log what would launch)")
	kubeconfig := fs.String("kubeconfig", "", "the kubernetes provider's kubeconfig (default: in-cluster credentials in a Pod, else $KUBECONFIG or ~/.kube/config)")
	kubeNS := fs.String("kube-namespace", kube.DefaultNamespace, "the kubernetes provider's runner namespace")
	kubeImage := fs.String("kube-image", "", "the kubernetes provider's runner image (the runner with skiff-podhelper, infra/kubernetes/runner)")
	runner := fs.String("runner", "", "the runner command for the process provider, e.g. /opt/actions-runner/run.sh")
	appID := fs.Int64("app-id", 0, "the GitHub App's id")
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
	cfg := wiring.LocalConfig{DataDir: *dataDir, PoolsFile: *pools, Listen: *listen, Provider: *prov, GitHubAPIURL: *apiURL,
		GitHubURL: *webURL, WebhookSecret: os.Getenv("SKIFF_WEBHOOK_SECRET"), Allow: splitList(*allow),
		Installations: splitList(*installations), MetricsRecords: *records, ReconcileEvery: *reconcile}
	if *runner != "" {
		cfg.RunnerCommand = strings.Fields(*runner)
	}
	if *fast {
		cfg.Durability = sqlite.Normal
	}
	var problems []string
	if *appID <= 0 {
		problems = append(problems, "--app-id is required")
	}
	cfg.AppIDs = []int64{*appID}
	switch key := os.Getenv("SKIFF_GITHUB_APP_KEY"); {
	case key != "":
		cfg.AppKeys = key
	case *keyFile != "":
		b, err := os.ReadFile(*keyFile)
		if err != nil {
			problems = append(problems, fmt.Sprintf("reading --app-key-file: %v", err))
		}
		cfg.AppKeys = string(b)
	default:
		problems = append(problems, "the App's key is required: --app-key-file or SKIFF_GITHUB_APP_KEY")
	}
	if cfg.WebhookSecret == "" {
		problems = append(problems, "SKIFF_WEBHOOK_SECRET is required: skiff does not accept unsigned webhooks")
	}
	if cfg.Provider == "process" && len(cfg.RunnerCommand) == 0 {
		problems = append(problems, "--runner is required with the process provider")
	}
	if cfg.Provider == "kubernetes" {
		if *kubeImage == "" {
			problems = append(problems, "--kube-image is required with the kubernetes provider")
		} else if client, err := kube.Client(*kubeconfig); err != nil {
			problems = append(problems, err.Error())
		} else {
			// Every pool's runners run in the one namespace and image.
			// Pools sized by their jobs' dynamic labels get requests to match.
			p, err := kube.New(kube.Options{Client: client, Default: kube.Pool{Namespace: *kubeNS, Image: *kubeImage},
				Logger: slog.New(slog.NewJSONHandler(stdout, nil))})
			if err != nil {
				problems = append(problems, err.Error())
			} else {
				cfg.ExternalProvider = p
			}
		}
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
	l, err := wiring.NewLocal(cfg, logger)
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
