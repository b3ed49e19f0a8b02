package main

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/skiffci/skiff/internal/local"
	"github.com/skiffci/skiff/pkg/pool/poolfile"
	"github.com/skiffci/skiff/pkg/store/sqlitestore"
)

// TestLocalConfig: skiff local's configuration from its flags, the
// environment, the key file and what skiff setup stored, with every
// problem named.
func TestLocalConfig(t *testing.T) {
	t.Parallel()
	base := localFlags{pools: "pools.yaml", dataDir: "d", provider: "process", runner: "/opt/run.sh --x", installations: "*",
		allow: "acme", reconcile: time.Minute}
	with := func(f func(*localFlags)) localFlags {
		out := base
		f(&out)
		return out
	}
	env := map[string]string{"SKIFF_WEBHOOK_SECRET": "hook", "SKIFF_GITHUB_APP_KEY": "PEM"}
	noKeyEnv := map[string]string{"SKIFF_WEBHOOK_SECRET": "hook"}
	stored := setupApp{keys: `{"7":"pem"}`, hookSecret: "stored-hook", ok: true}
	const (
		needAppID  = "--app-id is required (or run skiff setup first)"
		needKey    = "the App's key is required: --app-key-file or SKIFF_GITHUB_APP_KEY (or run skiff setup first)"
		needSecret = "SKIFF_WEBHOOK_SECRET is required: skiff does not accept unsigned webhooks"
	)
	cases := []localConfigCase{
		{"flags and environment", with(func(f *localFlags) { f.appID = 7 }), env, setupApp{}, nil, func(t *testing.T, c localConfigView) {
			want := localConfigView{AppIDs: []int64{7}, AppKeys: "PEM", WebhookSecret: "hook", RunnerCommand: []string{"/opt/run.sh", "--x"},
				Allow: []string{"acme"}, Installations: []string{"*"}, Limits: map[string]int{}}
			if !reflect.DeepEqual(c, want) {
				t.Errorf("config = %+v, want %+v", c, want)
			}
		}},
		{"the App skiff setup stored", base, nil, stored, nil, func(t *testing.T, c localConfigView) {
			if c.AppKeys != stored.keys || c.WebhookSecret != "stored-hook" || c.AppIDs != nil {
				t.Errorf("config = %+v, want the stored key and secret and no app id", c)
			}
		}},
		{"the environment's secret over the stored one", base, noKeyEnv, stored, nil, func(t *testing.T, c localConfigView) {
			if c.AppKeys != stored.keys || c.WebhookSecret != "hook" {
				t.Errorf("config = %+v, want the stored key and the environment's secret", c)
			}
		}},
		{"the key file", with(func(f *localFlags) { f.appID, f.keyFile = 7, "app.pem" }), noKeyEnv, setupApp{}, nil,
			func(t *testing.T, c localConfigView) {
				if c.AppKeys != "FILE PEM" {
					t.Errorf("AppKeys = %q, want the file's", c.AppKeys)
				}
			}},
		{"an unreadable key file", with(func(f *localFlags) { f.appID, f.keyFile = 7, "missing.pem" }), noKeyEnv, setupApp{},
			[]string{"reading --app-key-file: no such file"}, nil},
		{"nothing given", with(func(f *localFlags) { f.runner = "" }), nil, setupApp{},
			[]string{needAppID, needKey, needSecret, "--runner is required with the process provider"}, nil},
		{"the stored App unreadable", base, env, setupApp{err: errors.New("reading d: denied")},
			[]string{"reading d: denied", needAppID}, nil},
		{"slurm without a shared directory", with(func(f *localFlags) { f.appID, f.provider = 7, "slurm" }), env, setupApp{},
			[]string{"--slurm-shared is required with the slurm provider"}, nil},
		{"slurm without a runner", with(func(f *localFlags) { f.appID, f.provider, f.runner, f.slurmShared = 7, "slurm", "", "/shared" }), env,
			setupApp{}, []string{"--runner is required with the slurm provider"}, nil},
		{"dry-run needs no runner", with(func(f *localFlags) { f.appID, f.provider, f.runner = 7, "dry-run", "" }), env, setupApp{}, nil, nil},
		{"bad limits and reconcile period", with(func(f *localFlags) { f.appID, f.limits, f.reconcile = 7, "gpu=x", 0 }), env, setupApp{},
			[]string{`--limits: "gpu=x" is not pool=count`, "--reconcile-every must be positive"}, nil},
		{"limits and fast sync", with(func(f *localFlags) { f.appID, f.limits, f.fast = 7, "gpu=1, cpu=8", true }), env, setupApp{}, nil,
			func(t *testing.T, c localConfigView) {
				if !reflect.DeepEqual(c.Limits, map[string]int{"gpu": 1, "cpu": 8}) || !c.Fast {
					t.Errorf("Limits = %v, fast %v; want gpu=1 cpu=8, fast", c.Limits, c.Fast)
				}
			}},
	}
	runLocalConfig(t, cases)
}

// localConfigCase is flags and an environment and the App skiff setup
// stored, and the problems localConfig must find, or the check of the
// config it must build.
type localConfigCase struct {
	name         string
	flags        localFlags
	env          map[string]string
	app          setupApp
	wantProblems []string
	check        func(t *testing.T, cfg localConfigView)
}

// readKeyFile reads app.pem as "FILE PEM"; every other file is missing.
func readKeyFile(name string) ([]byte, error) {
	if name == "app.pem" {
		return []byte("FILE PEM"), nil
	}
	return nil, errors.New("no such file")
}

// runLocalConfig runs localConfig on each case.
func runLocalConfig(t *testing.T, cases []localConfigCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, problems := localConfig(tc.flags, func(k string) string { return tc.env[k] }, readKeyFile, tc.app)
			if !reflect.DeepEqual(problems, tc.wantProblems) {
				t.Errorf("problems = %q, want %q", problems, tc.wantProblems)
			}
			if tc.check != nil {
				tc.check(t, localConfigView{AppIDs: cfg.AppIDs, AppKeys: cfg.AppKeys, WebhookSecret: cfg.WebhookSecret,
					RunnerCommand: cfg.RunnerCommand, Allow: cfg.Allow, Installations: cfg.Installations, Limits: cfg.Limits,
					Fast: cfg.Durability == sqlitestore.Normal})
			}
		})
	}
}

// localConfigView is the part of local.Config that localConfig decides
// from more than one source.
type localConfigView struct {
	AppIDs                 []int64
	AppKeys, WebhookSecret string
	RunnerCommand          []string
	Allow, Installations   []string
	Limits                 map[string]int
	Fast                   bool
}

// TestBackendFlags: the flags a daemon needs follow the backends its pools
// name: the runner command for process pools and for pools without a
// section on --provider slurm (a slurm: section names its runnerDir), the
// shared directory for Slurm pools.
func TestBackendFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := func(name, yaml string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte("version: 1\npools:\n"+yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	const (
		lab      = "  - name: lab\n    labels: [lab]\n    process: {}\n"
		hpc      = "  - name: hpc\n    labels: [hpc]\n    slurm: {partition: debug, runAs: [ci1], runnerDir: /shared/actions-runner, workDir: /shared/work}\n"
		plain    = "  - name: plain\n    labels: [plain]\n    instanceTypes: [c7i.large]\n    subnets: [subnet-0a1b2c3d4e5f60718]\n    image: {ami: ami-0123456789abcdef0}\n"
		runner   = "--runner is required with the process provider"
		shared   = "--slurm-shared is required with the slurm provider"
		slurmRun = "--runner is required with the slurm provider"
	)
	cases := []struct {
		name, pools, provider, runner, shared string
		want                                  []string
	}{
		{"a process pool and a Slurm pool", file("mixed.yaml", lab+hpc), "process", "", "", []string{runner, shared}},
		{"the Slurm pool's runnerDir is its runner", file("hpc.yaml", hpc), "process", "", "/shared", nil},
		{"a pool without a section, on --provider slurm", file("plain.yaml", hpc+plain), "slurm", "", "/shared", []string{slurmRun}},
		{"both given", file("mixed2.yaml", lab+hpc), "process", "/opt/run.sh", "/shared", nil},
		{"no pools file: the provider alone", filepath.Join(dir, "missing.yaml"), "slurm", "", "", []string{slurmRun, shared}},
	}
	for _, tc := range cases {
		cfg := local.Config{Provider: tc.provider, SlurmShared: tc.shared}
		if tc.runner != "" {
			cfg.RunnerCommand = []string{tc.runner}
		}
		if pools, err := poolfile.Load(tc.pools); err == nil {
			cfg.Pools = pools
		}
		if got := backendProblems(cfg); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
