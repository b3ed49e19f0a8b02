package scaleup

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/skiffci/skiff/pkg/config"
	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/secret"
)

// Config is the scale-up function's configuration, read from the
// environment by ConfigFromEnv; README.md lists the variables.
type Config struct {
	TableName            string // SKIFF_TABLE_NAME: the store's table
	RegistrationTable    string // SKIFF_REGISTRATION_TABLE: the runners' registration table
	DeadLetterURL        string // SKIFF_DLQ_URL: the job queue's dead-letter queue
	PoolsFile            string // SKIFF_POOLS_FILE
	LaunchTemplatePrefix string // SKIFF_LAUNCH_TEMPLATE_PREFIX (+ pool name)
	RootDevice           string // SKIFF_ROOT_DEVICE
	Mode                 Mode   // SKIFF_REGISTRATION_MODE: jit or token
	Scope                Scope  // SKIFF_RUNNER_SCOPE: org or repo
	CheckQueued          bool   // SKIFF_CHECK_QUEUED
	MaxAttempts          int    // SKIFF_MAX_ATTEMPTS
	MaxFleetSize         int    // SKIFF_MAX_FLEET_SIZE
	MaxPlaces            int    // SKIFF_MAX_OVERRIDES
	ClaimLease           time.Duration
	CapacityMemory       time.Duration
	RegistrationTTL      time.Duration
	RegistrationTimeout  time.Duration
	Account              string  // SKIFF_ACCOUNT_ID
	Region               string  // AWS_REGION (set by Lambda)
	Partition            string  // SKIFF_PARTITION
	AppIDs               []int64 // SKIFF_GITHUB_APP_IDS
	PrivateKeyARN        string  // SKIFF_GITHUB_PRIVATE_KEY_ARN
	GitHubAPIURL         string  // SKIFF_GITHUB_API_URL
	GitHubURL            string  // SKIFF_GITHUB_URL
	LogLevel             slog.Level
	MetricsNamespace     string
}

// ConfigFromEnv reads the configuration through getenv (os.Getenv) and
// reports every missing or malformed variable by name.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	env := config.NewEnv(getenv)
	c := Config{
		TableName:            env.Required("SKIFF_TABLE_NAME"),
		RegistrationTable:    env.Required("SKIFF_REGISTRATION_TABLE"),
		DeadLetterURL:        env.Required("SKIFF_DLQ_URL"),
		PoolsFile:            env.String("SKIFF_POOLS_FILE", config.DefaultPoolsFile(getenv)),
		LaunchTemplatePrefix: env.String("SKIFF_LAUNCH_TEMPLATE_PREFIX", "skiff-"),
		RootDevice:           env.String("SKIFF_ROOT_DEVICE", "/dev/xvda"),
		Mode:                 Mode(env.String("SKIFF_REGISTRATION_MODE", string(ModeJIT))),
		Scope:                Scope(env.String("SKIFF_RUNNER_SCOPE", string(ScopeOrg))),
		CheckQueued:          env.Bool("SKIFF_CHECK_QUEUED", false),
		MaxAttempts:          env.Int("SKIFF_MAX_ATTEMPTS", DefaultMaxAttempts),
		MaxFleetSize:         env.Int("SKIFF_MAX_FLEET_SIZE", DefaultMaxFleetSize),
		MaxPlaces:            env.Int("SKIFF_MAX_OVERRIDES", DefaultMaxPlaces),
		ClaimLease:           env.Duration("SKIFF_CLAIM_LEASE", DefaultClaimLease),
		CapacityMemory:       env.Duration("SKIFF_CAPACITY_MEMORY", DefaultCapacityMemory),
		RegistrationTTL:      env.Duration("SKIFF_REGISTRATION_TTL", DefaultRegistrationTTL),
		RegistrationTimeout:  env.Duration("SKIFF_REGISTRATION_TIMEOUT", DefaultRegistrationTimeout),
		Account:              env.Required("SKIFF_ACCOUNT_ID"),
		Region:               env.Required("AWS_REGION"),
		Partition:            env.String("SKIFF_PARTITION", "aws"),
		PrivateKeyARN:        env.Required("SKIFF_GITHUB_PRIVATE_KEY_ARN"),
		GitHubAPIURL:         env.String("SKIFF_GITHUB_API_URL", github.DefaultBaseURL),
		GitHubURL:            env.String("SKIFF_GITHUB_URL", "https://github.com"),
		MetricsNamespace:     env.String("SKIFF_METRICS_NAMESPACE", "Skiff"),
	}
	if c.Mode != ModeJIT && c.Mode != ModeToken {
		env.Fail("SKIFF_REGISTRATION_MODE=%q: want jit or token", c.Mode)
	}
	if c.Scope != ScopeOrg && c.Scope != ScopeRepo {
		env.Fail("SKIFF_RUNNER_SCOPE=%q: want org or repo", c.Scope)
	}
	if c.MaxFleetSize > 10 {
		env.Fail("SKIFF_MAX_FLEET_SIZE=%d: at most 10 (the fleet's job-list tag must fit EC2's 256-character tag value)", c.MaxFleetSize)
	}
	if c.ClaimLease <= c.RegistrationTimeout {
		env.Fail("SKIFF_CLAIM_LEASE=%s must exceed SKIFF_REGISTRATION_TIMEOUT=%s (crash recovery relies on it)", c.ClaimLease, c.RegistrationTimeout)
	}
	ids := env.List("SKIFF_GITHUB_APP_IDS")
	if len(ids) == 0 {
		env.Fail("SKIFF_GITHUB_APP_IDS is required (comma-separated GitHub App ids)")
	}
	for _, s := range ids {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil || id <= 0 {
			env.Fail("SKIFF_GITHUB_APP_IDS: %q is not an App id", s)
			continue
		}
		c.AppIDs = append(c.AppIDs, id)
	}
	c.LogLevel = env.LogLevel("SKIFF_LOG_LEVEL")
	return c, env.Err()
}

// LoadApps reads the Apps' private keys from Secrets Manager, once. The
// secret is the PEM itself (one App), or a JSON object mapping each App id
// to its PEM (several Apps).
func (c Config) LoadApps(ctx context.Context, api secret.GetSecretValueAPI) ([]github.App, error) {
	v, err := secret.Fetch(ctx, api, c.PrivateKeyARN)
	if err != nil {
		return nil, fmt.Errorf("loading GitHub App keys: %w", err)
	}
	return ParseAppKeys(c.AppIDs, v)
}

// ParseAppKeys pairs App ids with private keys from a secret value (see
// LoadApps). Errors never quote the value.
func ParseAppKeys(ids []int64, value string) ([]github.App, error) {
	pems := map[int64]string{}
	if strings.HasPrefix(strings.TrimSpace(value), "{") {
		var m map[string]string
		if err := json.Unmarshal([]byte(value), &m); err != nil {
			return nil, fmt.Errorf("GitHub App key secret looks like JSON but is not {\"<app id>\": \"<pem>\"}")
		}
		for k, pem := range m {
			id, err := strconv.ParseInt(k, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("GitHub App key secret: key %q is not an App id", k)
			}
			pems[id] = pem
		}
	} else {
		if len(ids) != 1 {
			return nil, fmt.Errorf("GitHub App key secret holds one PEM but %d App ids are configured: use a JSON object", len(ids))
		}
		pems[ids[0]] = value
	}
	apps := make([]github.App, 0, len(ids))
	for _, id := range ids {
		pem, ok := pems[id]
		if !ok {
			return nil, fmt.Errorf("GitHub App key secret has no key for App %d", id)
		}
		key, err := github.ParsePrivateKey([]byte(pem))
		if err != nil {
			return nil, fmt.Errorf("GitHub App %d: %w", id, err)
		}
		apps = append(apps, github.App{ID: id, Key: key})
	}
	return apps, nil
}

// String describes the configuration for a cold-start log line, without secrets.
func (c Config) String() string {
	return strings.Join([]string{
		"table=" + c.TableName, "registration_table=" + c.RegistrationTable, "dlq=" + c.DeadLetterURL,
		"pools=" + c.PoolsFile, "mode=" + string(c.Mode), "scope=" + string(c.Scope),
		"launch_template_prefix=" + c.LaunchTemplatePrefix, fmt.Sprintf("max_attempts=%d", c.MaxAttempts),
		fmt.Sprintf("max_fleet_size=%d", c.MaxFleetSize), fmt.Sprintf("check_queued=%v", c.CheckQueued),
		fmt.Sprintf("apps=%v", c.AppIDs), "github_api=" + c.GitHubAPIURL,
	}, " ")
}

// Options returns the service options the configuration sets; the caller
// adds the clients.
func (c Config) Options() Options {
	return Options{
		Mode: c.Mode, Scope: c.Scope, GitHubURL: c.GitHubURL,
		Partition: c.Partition, Region: c.Region, Account: c.Account,
		LaunchTemplatePrefix: c.LaunchTemplatePrefix, RootDevice: c.RootDevice, CheckQueued: c.CheckQueued,
		MaxAttempts: c.MaxAttempts, MaxFleetSize: c.MaxFleetSize, MaxPlaces: c.MaxPlaces,
		ClaimLease: c.ClaimLease, CapacityMemory: c.CapacityMemory,
		RegistrationTTL: c.RegistrationTTL, RegistrationTimeout: c.RegistrationTimeout,
	}
}
