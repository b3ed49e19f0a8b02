package scaledown

import (
	"fmt"
	"strings"

	"github.com/skiffci/skiff/pkg/config"
	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/names"
)

// Config is the scale-down function's configuration, read from the
// environment by ConfigFromEnv; docs/configuration.md lists the variables.
type Config struct {
	TableName        string // SKIFF_TABLE_NAME
	QueueURL         string // SKIFF_QUEUE_URL: replacements go to scale-up's queue
	PoolsFile        string
	Account, Region  string
	Deployment       string // SKIFF_DEPLOYMENT: only this deployment's runners are listed and reaped
	Partition        string
	AppIDs           []int64 // SKIFF_GITHUB_APP_IDS (optional: the key secret's JSON keys)
	PrivateKeyARN    string
	GitHubAPIURL     string
	RepoScope        bool     // SKIFF_RUNNER_SCOPE=repo
	Scopes           []string // SKIFF_SCALEDOWN_SCOPES: owners or owner/repo listed every pass
	MaxReplacements  int      // SKIFF_MAX_REPLACEMENTS
	MaxGitHubCalls   int      // SKIFF_MAX_GITHUB_CALLS: a pass's GitHub calls (DefaultMaxGitHubCalls)
	RerunInterrupted []string // SKIFF_RERUN_INTERRUPTED: pools, or "*"
	MetricsPools     []string // SKIFF_METRICS_RECORDS: pools that opted in, or "*"
	MetricsTable     string   // SKIFF_METRICS_TABLE (default the state table)
	Redeliver        bool     // SKIFF_REDELIVER (default true)
	Allow            []string // SKIFF_ALLOW: the kept runner groups admit it
	MetricsNamespace string
	// RegistrationTable, LaunchTemplatePrefix and RootDevice let the
	// reconciler launch the pools' warm machines (docs/warm-pools.md) as
	// scale-up launches runners: SKIFF_REGISTRATION_TABLE (optional: without
	// it no warm machine is launched), SKIFF_LAUNCH_TEMPLATE_PREFIX,
	// SKIFF_ROOT_DEVICE.
	RegistrationTable    string
	LaunchTemplatePrefix string
	RootDevice           string
}

// ConfigFromEnv reads the configuration through getenv and reports
// every missing or malformed variable by name.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	env := config.NewEnv(getenv)
	c := Config{
		TableName:            env.Required(names.EnvTableName),
		QueueURL:             env.Required(names.EnvQueueURL),
		PoolsFile:            env.String(names.EnvPoolsFile, config.DefaultPoolsFile(getenv)),
		Account:              env.Required(names.EnvAccountID),
		Deployment:           env.Deployment(),
		Region:               env.Required(names.EnvAWSRegion),
		Partition:            env.String(names.EnvPartition, "aws"),
		PrivateKeyARN:        env.Required(names.EnvGitHubPrivateKeyARN),
		GitHubAPIURL:         env.String(names.EnvGitHubAPIURL, github.DefaultBaseURL),
		RepoScope:            env.String(names.EnvRunnerScope, "org") == "repo",
		Scopes:               env.List(names.EnvScaleDownScopes),
		MaxReplacements:      env.Int(names.EnvMaxReplacements, 3),
		MaxGitHubCalls:       env.Int(names.EnvMaxGitHubCalls, DefaultMaxGitHubCalls),
		RerunInterrupted:     env.List(names.EnvRerunInterrupted),
		RegistrationTable:    env.String(names.EnvRegistrationTable, ""),
		LaunchTemplatePrefix: env.String(names.EnvLaunchTemplatePrefix, names.DefaultLaunchTemplatePrefix),
		RootDevice:           env.String(names.EnvRootDevice, names.DefaultRootDevice),
		MetricsPools:         env.List(names.EnvMetricsRecords),
		MetricsTable:         env.String(names.EnvMetricsTable, ""),
		Redeliver:            env.Bool(names.EnvRedeliver, true),
		Allow:                env.List(names.EnvAllow),
		MetricsNamespace:     env.String(names.EnvMetricsNamespace, names.DefaultMetricsNamespace),
	}
	c.AppIDs = env.AppIDs()
	if c.MetricsTable == "" {
		c.MetricsTable = c.TableName
	}
	return c, env.Err()
}

// String describes the configuration for a cold-start log line, without secrets.
func (c Config) String() string {
	return strings.Join([]string{"deployment=" + c.Deployment, "table=" + c.TableName, "queue=" + c.QueueURL, "pools=" + c.PoolsFile,
		fmt.Sprintf("apps=%v", c.AppIDs), fmt.Sprintf("scopes=%v", c.Scopes), fmt.Sprintf("max_replacements=%d", c.MaxReplacements),
		fmt.Sprintf("max_github_calls=%d", c.MaxGitHubCalls),
		fmt.Sprintf("rerun_interrupted=%v", c.RerunInterrupted), fmt.Sprintf("metrics_records=%v", c.MetricsPools),
		fmt.Sprintf("redeliver=%v", c.Redeliver), "github_api=" + c.GitHubAPIURL}, " ")
}
