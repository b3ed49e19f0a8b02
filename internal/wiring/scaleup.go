package wiring

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	sdkec2 "github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/skiffci/skiff/pkg/config"
	"github.com/skiffci/skiff/pkg/ec2"
	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/queue"
	"github.com/skiffci/skiff/pkg/room"
	"github.com/skiffci/skiff/pkg/scaleup"
	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/telemetry"
)

// ScaleUpConfig is the scale-up function's configuration, read from the
// environment by ScaleUpConfigFromEnv; README.md lists the variables.
type ScaleUpConfig struct {
	TableName         string // SKIFF_TABLE_NAME: the store's table
	RegistrationTable string // SKIFF_REGISTRATION_TABLE: the runners' registration table
	DeadLetterURL     string // SKIFF_DLQ_URL: the job queue's dead-letter queue
	// QueueURL (SKIFF_QUEUE_URL) is the job queue itself, where the waiting
	// room sends a job again; without it, jobs that cannot launch now go
	// back to the queue as before.
	QueueURL             string
	PoolsFile            string // SKIFF_POOLS_FILE
	LaunchTemplatePrefix string // SKIFF_LAUNCH_TEMPLATE_PREFIX (+ pool name)
	RootDevice           string // SKIFF_ROOT_DEVICE
	Scope                scaleup.Scope
	CheckQueued          bool
	MaxAttempts          int
	MaxFleetSize         int
	MaxPlaces            int // SKIFF_MAX_OVERRIDES
	ClaimLease           time.Duration
	LaunchBudget         time.Duration // SKIFF_LAUNCH_BUDGET
	CapacityMemory       time.Duration
	RegistrationTTL      time.Duration
	RegistrationTimeout  time.Duration
	Account              string  // SKIFF_ACCOUNT_ID
	Region               string  // AWS_REGION (set by Lambda)
	Partition            string  // SKIFF_PARTITION
	AppIDs               []int64 // SKIFF_GITHUB_APP_IDS
	PrivateKeyARN        string  // SKIFF_GITHUB_PRIVATE_KEY_ARN
	GitHubAPIURL         string
	GitHubURL            string
	LogLevel             slog.Level
	MetricsNamespace     string
}

// ScaleUpConfigFromEnv reads the configuration through getenv (os.Getenv)
// and reports every missing or malformed variable by name.
func ScaleUpConfigFromEnv(getenv func(string) string) (ScaleUpConfig, error) {
	env := config.NewEnv(getenv)
	c := ScaleUpConfig{
		TableName:            env.Required(names.EnvTableName),
		RegistrationTable:    env.Required(names.EnvRegistrationTable),
		DeadLetterURL:        env.Required(names.EnvDLQURL),
		QueueURL:             env.String(names.EnvQueueURL, ""),
		PoolsFile:            env.String(names.EnvPoolsFile, config.DefaultPoolsFile(getenv)),
		LaunchTemplatePrefix: env.String(names.EnvLaunchTemplatePrefix, names.DefaultLaunchTemplatePrefix),
		RootDevice:           env.String(names.EnvRootDevice, ec2.DefaultRootDevice),
		Scope:                scaleup.Scope(env.String(names.EnvRunnerScope, string(scaleup.ScopeOrg))),
		CheckQueued:          env.Bool(names.EnvCheckQueued, false),
		MaxAttempts:          env.Int(names.EnvMaxAttempts, scaleup.DefaultMaxAttempts),
		MaxFleetSize:         env.Int(names.EnvMaxFleetSize, scaleup.DefaultMaxFleetSize),
		MaxPlaces:            env.Int(names.EnvMaxOverrides, ec2.DefaultMaxPlaces),
		ClaimLease:           env.Duration(names.EnvClaimLease, scaleup.DefaultClaimLease),
		LaunchBudget:         env.Duration(names.EnvLaunchBudget, scaleup.DefaultLaunchBudget),
		CapacityMemory:       env.Duration(names.EnvCapacityMemory, ec2.DefaultCapacityMemory),
		RegistrationTTL:      env.Duration(names.EnvRegistrationTTL, ec2.DefaultRegistrationTTL),
		RegistrationTimeout:  env.Duration(names.EnvRegistrationTimeout, scaleup.DefaultRegistrationTimeout),
		Account:              env.Required(names.EnvAccountID),
		Region:               env.Required(names.EnvAWSRegion),
		Partition:            env.String(names.EnvPartition, "aws"),
		PrivateKeyARN:        env.Required(names.EnvGitHubPrivateKeyARN),
		GitHubAPIURL:         env.String(names.EnvGitHubAPIURL, github.DefaultBaseURL),
		GitHubURL:            env.String(names.EnvGitHubURL, "https://github.com"),
		MetricsNamespace:     env.String(names.EnvMetricsNamespace, names.DefaultMetricsNamespace),
	}
	if v := env.String(names.EnvRegistrationMode, ""); v != "" {
		env.Fail("%s=%s is no longer read: registration tokens are opted into per pool (registration: token in the pools file)", names.EnvRegistrationMode, v)
	}
	if c.Scope != scaleup.ScopeOrg && c.Scope != scaleup.ScopeRepo {
		env.Fail("%s=%q: want org or repo", names.EnvRunnerScope, c.Scope)
	}
	if c.MaxFleetSize > 10 {
		env.Fail("%s=%d: at most 10 (the fleet's job-list tag must fit EC2's 256-character tag value)", names.EnvMaxFleetSize, c.MaxFleetSize)
	}
	if c.LaunchBudget >= c.ClaimLease {
		env.Fail("%s=%s must be shorter than %s=%s (an invocation with less lease left refuses to launch)", names.EnvLaunchBudget,
			c.LaunchBudget, names.EnvClaimLease, c.ClaimLease)
	}
	if c.ClaimLease <= c.RegistrationTimeout {
		env.Fail("%s=%s must exceed %s=%s (crash recovery relies on it)", names.EnvClaimLease, c.ClaimLease,
			names.EnvRegistrationTimeout, c.RegistrationTimeout)
	}
	c.AppIDs = appIDs(env)
	c.LogLevel = env.LogLevel(names.EnvLogLevel)
	return c, env.Err()
}

// String describes the configuration for a cold-start log line, without secrets.
func (c ScaleUpConfig) String() string {
	return strings.Join([]string{
		"table=" + c.TableName, "registration_table=" + c.RegistrationTable, "dlq=" + c.DeadLetterURL,
		"pools=" + c.PoolsFile, "scope=" + string(c.Scope),
		"launch_template_prefix=" + c.LaunchTemplatePrefix, fmt.Sprintf("max_attempts=%d", c.MaxAttempts),
		fmt.Sprintf("max_fleet_size=%d", c.MaxFleetSize), fmt.Sprintf("check_queued=%v", c.CheckQueued),
		fmt.Sprintf("apps=%v", c.AppIDs), "github_api=" + c.GitHubAPIURL,
	}, " ")
}

// ScaleUp is the scale-up function's service with the dead-letterer its
// answers need, built once per Lambda container.
type ScaleUp struct {
	Service     *scaleup.Service
	DeadLetters queue.DeadLetterer
	Counter     telemetry.Counter
	Logger      *slog.Logger
}

// NewScaleUp builds the production scale-up: the GitHub Apps' keys read once
// from Secrets Manager, the pools file, DynamoDB (launch state and the
// registration table), the EC2 provider, the dead-letter queue, and EMF
// metrics and JSON logs on stdout. The GitHub client's token, runner group
// and registration token caches live as long as the container.
func NewScaleUp(ctx context.Context, cfg ScaleUpConfig, awsCfg aws.Config, logger *slog.Logger) (*ScaleUp, error) {
	gh, pools, err := githubAndPools(ctx, awsCfg, cfg.PrivateKeyARN, cfg.AppIDs, cfg.GitHubAPIURL, cfg.PoolsFile, logger)
	if err != nil {
		return nil, err
	}
	ddb := dynamodb.NewFromConfig(awsCfg)
	launches := store.NewLaunchDynamo(ddb, cfg.TableName)
	counter := telemetry.NewEMF(os.Stdout, cfg.MetricsNamespace, names.FunctionScaleUp, nil)
	prov, err := ec2.NewProvider(ec2.ProviderOptions{
		API: sdkec2.NewFromConfig(awsCfg), Registrations: ec2.NewRegistrationTable(ddb, cfg.RegistrationTable), Capacity: launches,
		Partition: cfg.Partition, Region: cfg.Region, Account: cfg.Account,
		LaunchTemplatePrefix: cfg.LaunchTemplatePrefix, RootDevice: cfg.RootDevice, MaxPlaces: cfg.MaxPlaces,
		CapacityMemoryFor: cfg.CapacityMemory, RegistrationTTL: cfg.RegistrationTTL, RegistrationTimeout: cfg.RegistrationTimeout,
		Counter: counter, Logger: logger,
	})
	if err != nil {
		return nil, err
	}
	var ledger store.Ledger = store.NewLedgerDynamo(ddb, cfg.TableName)
	records := store.NewDynamo(ddb, cfg.TableName)
	var waiter scaleup.Waiter = scaleup.NoRoom{}
	if cfg.QueueURL != "" {
		rm, err := dynamoRoom(ddb, sqs.NewFromConfig(awsCfg), cfg.TableName, cfg.QueueURL, pools, ledger, counter, nil, logger)
		if err != nil {
			return nil, err
		}
		ledger, waiter = room.Ledger{Ledger: ledger, Room: rm}, rm
	}
	svc, err := scaleup.New(scaleup.Options{
		Pools: pools, Launches: launches, Ledger: ledger, Records: records, Room: waiter,
		Provider: prov, GitHub: gh,
		Counter: counter, Timings: telemetry.NewEMFTimings(os.Stdout, cfg.MetricsNamespace, names.FunctionScaleUp, nil),
		Logger: logger, Scope: cfg.Scope, GitHubURL: cfg.GitHubURL, CheckQueued: cfg.CheckQueued,
		MaxAttempts: cfg.MaxAttempts, MaxFleetSize: cfg.MaxFleetSize, ClaimLease: cfg.ClaimLease, LaunchBudget: cfg.LaunchBudget,
		RegistrationTimeout: cfg.RegistrationTimeout,
	})
	if err != nil {
		return nil, err
	}
	return &ScaleUp{Service: svc, DeadLetters: queue.NewSQSDeadLetters(sqs.NewFromConfig(awsCfg), cfg.DeadLetterURL),
		Counter: counter, Logger: logger}, nil
}
