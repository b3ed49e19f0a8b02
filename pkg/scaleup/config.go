package scaleup

import (
	"fmt"
	"strings"
	"time"

	"github.com/skiffci/skiff/pkg/config"
	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/userdata"
)

// Config is the scale-up function's configuration, read from the
// environment by ConfigFromEnv; docs/configuration.md lists the variables.
type Config struct {
	TableName            string // SKIFF_TABLE_NAME: the store's table
	RegistrationTable    string // SKIFF_REGISTRATION_TABLE: the runners' registration table
	DeadLetterURL        string // SKIFF_DLQ_URL: the job queue's dead-letter queue
	PoolsFile            string // SKIFF_POOLS_FILE
	LaunchTemplatePrefix string // SKIFF_LAUNCH_TEMPLATE_PREFIX (+ pool name)
	RootDevice           string // SKIFF_ROOT_DEVICE
	Scope                Scope
	CheckQueued          bool
	MaxAttempts          int
	MaxLaunchSize        int
	// MaxPlaces (SKIFF_MAX_OVERRIDES), CapacityMemory
	// (SKIFF_CAPACITY_MEMORY) and RegistrationTTL (SKIFF_REGISTRATION_TTL)
	// are the EC2 provider's: unset, 0, which the provider takes for its
	// defaults (ec2.DefaultMaxPlaces, DefaultCapacityMemory,
	// DefaultRegistrationTTL).
	MaxPlaces           int
	ClaimLease          time.Duration
	LaunchBudget        time.Duration // SKIFF_LAUNCH_BUDGET
	CapacityMemory      time.Duration
	RegistrationTTL     time.Duration
	RegistrationTimeout time.Duration
	Account             string  // SKIFF_ACCOUNT_ID
	Deployment          string  // SKIFF_DEPLOYMENT: the deployment's runners, tagged and listed
	Region              string  // AWS_REGION (set by Lambda)
	Partition           string  // SKIFF_PARTITION
	AppIDs              []int64 // SKIFF_GITHUB_APP_IDS (optional: the key secret's JSON keys)
	PrivateKeyARN       string  // SKIFF_GITHUB_PRIVATE_KEY_ARN
	// QueueURL (SKIFF_QUEUE_URL) is the job queue itself: where jobs wait
	// for the App, and where the waiting room sends a job again; without
	// it, jobs that cannot launch now go back to the queue as before.
	QueueURL     string
	GitHubAPIURL string
	GitHubURL    string
	// Allow (SKIFF_ALLOW) is the webhook's allow-list: a pool's kept
	// runner group, created at its first launch in an organization, admits it.
	Allow            []string
	MetricsNamespace string
}

// ConfigFromEnv reads the configuration through getenv (os.Getenv)
// and reports every missing or malformed variable by name.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	env := config.NewEnv(getenv)
	c := Config{
		TableName:            env.Required(names.EnvTableName),
		RegistrationTable:    env.Required(names.EnvRegistrationTable),
		DeadLetterURL:        env.Required(names.EnvDLQURL),
		PoolsFile:            env.String(names.EnvPoolsFile, config.DefaultPoolsFile(getenv)),
		LaunchTemplatePrefix: env.String(names.EnvLaunchTemplatePrefix, names.DefaultLaunchTemplatePrefix),
		RootDevice:           env.String(names.EnvRootDevice, names.DefaultRootDevice),
		Scope:                Scope(env.String(names.EnvRunnerScope, string(ScopeOrg))),
		CheckQueued:          env.Bool(names.EnvCheckQueued, false),
		MaxAttempts:          env.Int(names.EnvMaxAttempts, names.DefaultMaxAttempts),
		MaxLaunchSize:        env.Int(names.EnvMaxFleetSize, DefaultMaxLaunchSize),
		MaxPlaces:            env.Int(names.EnvMaxOverrides, 0),
		ClaimLease:           env.Duration(names.EnvClaimLease, DefaultClaimLease),
		LaunchBudget:         env.Duration(names.EnvLaunchBudget, DefaultLaunchBudget),
		CapacityMemory:       env.Duration(names.EnvCapacityMemory, 0),
		RegistrationTTL:      env.Duration(names.EnvRegistrationTTL, 0),
		RegistrationTimeout:  env.Duration(names.EnvRegistrationTimeout, userdata.DefaultRegistrationTimeout),
		Account:              env.Required(names.EnvAccountID),
		Deployment:           env.Deployment(),
		Region:               env.Required(names.EnvAWSRegion),
		Partition:            env.String(names.EnvPartition, "aws"),
		PrivateKeyARN:        env.Required(names.EnvGitHubPrivateKeyARN),
		QueueURL:             env.String(names.EnvQueueURL, ""),
		GitHubAPIURL:         env.String(names.EnvGitHubAPIURL, github.DefaultBaseURL),
		GitHubURL:            env.String(names.EnvGitHubURL, "https://github.com"),
		Allow:                env.List(names.EnvAllow),
		MetricsNamespace:     env.String(names.EnvMetricsNamespace, names.DefaultMetricsNamespace),
	}
	if v := env.String(names.EnvRegistrationMode, ""); v != "" {
		env.Fail("%s=%s is no longer read: registration tokens are opted into per pool (registration: token in the pools file)", names.EnvRegistrationMode, v)
	}
	if c.Scope != ScopeOrg && c.Scope != ScopeRepo {
		env.Fail("%s=%q: want org or repo", names.EnvRunnerScope, c.Scope)
	}
	if c.Scope == ScopeOrg && len(c.Allow) == 0 {
		env.Fail("%s is required with organization runners: each pool's runner group, created at its first launch in an organization, admits the allow-list's repositories", names.EnvAllow)
	}
	if c.MaxLaunchSize > 10 {
		env.Fail("%s=%d: at most 10 (the launch's job-list tag must fit EC2's 256-character tag value)", names.EnvMaxFleetSize, c.MaxLaunchSize)
	}
	if c.LaunchBudget >= c.ClaimLease {
		env.Fail("%s=%s must be shorter than %s=%s (an invocation with less lease left refuses to launch)", names.EnvLaunchBudget,
			c.LaunchBudget, names.EnvClaimLease, c.ClaimLease)
	}
	if c.ClaimLease <= c.RegistrationTimeout {
		env.Fail("%s=%s must exceed %s=%s (crash recovery relies on it)", names.EnvClaimLease, c.ClaimLease,
			names.EnvRegistrationTimeout, c.RegistrationTimeout)
	}
	c.AppIDs = env.AppIDs()
	return c, env.Err()
}

// String describes the configuration for a cold-start log line, without secrets.
func (c Config) String() string {
	return strings.Join([]string{
		"deployment=" + c.Deployment, "table=" + c.TableName, "registration_table=" + c.RegistrationTable, "dlq=" + c.DeadLetterURL,
		"pools=" + c.PoolsFile, "scope=" + string(c.Scope),
		"launch_template_prefix=" + c.LaunchTemplatePrefix, fmt.Sprintf("max_attempts=%d", c.MaxAttempts),
		fmt.Sprintf("max_fleet_size=%d", c.MaxLaunchSize), fmt.Sprintf("check_queued=%v", c.CheckQueued),
		fmt.Sprintf("apps=%v", c.AppIDs), "github_api=" + c.GitHubAPIURL,
	}, " ")
}
