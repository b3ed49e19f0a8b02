// Package wiring builds skiff's services from their configuration: the one
// place that knows which adapter serves each port in AWS. The Lambda
// functions (functions/*) and the CLI call it; the services themselves
// (pkg/webhook, pkg/scaleup) see only their ports.
package wiring

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/skiffci/skiff/pkg/allow"
	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/groups"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/pool/poolfile"
	"github.com/skiffci/skiff/pkg/queue/sqsqueue"
	"github.com/skiffci/skiff/pkg/secret/smsecret"
	"github.com/skiffci/skiff/pkg/store/dynamostore"
	"github.com/skiffci/skiff/pkg/telemetry"
	"github.com/skiffci/skiff/pkg/webhook"
)

// NewWebhook builds the production webhook handler from cfg: the webhook
// secret read once from Secrets Manager, the pools file, SQS, DynamoDB, and
// EMF metrics and JSON logs on stdout. It is called once per Lambda
// container, and resolves the SQS and DynamoDB endpoints then.
func NewWebhook(ctx context.Context, cfg webhook.Config, awsCfg aws.Config, logger *slog.Logger) (*webhook.Handler, error) {
	secrets, err := cfg.LoadSecrets(ctx, smsecret.Fetcher(secretsmanager.NewFromConfig(awsCfg)))
	if err != nil {
		return nil, err
	}
	pools, err := poolfile.Load(cfg.PoolsFile)
	if err != nil {
		return nil, fmt.Errorf("loading pools (%s): %w", names.EnvPoolsFile, err)
	}
	awsCfg = withoutUserAgent(awsCfg)
	ddb := newDynamoDB(awsCfg)
	states := dynamostore.NewDynamo(ddb, cfg.TableName)
	var refresh func(context.Context) ([][]byte, error)
	if cfg.SecretARN != "" {
		sm := secretsmanager.NewFromConfig(awsCfg)
		refresh = func(ctx context.Context) ([][]byte, error) { return cfg.LoadSecrets(ctx, smsecret.Fetcher(sm)) }
	}
	return webhook.New(webhook.Options{
		Secrets:  secrets,
		Router:   pools,
		Policies: pools,
		Scopes:   pools,
		// A refused job that ran on a skiff runner: recorded for skiff status.
		SecurityEvents: dynamostore.NewSecurityDynamo(ddb, cfg.TableName),
		Queue:          sqsqueue.NewSQS(newSQS(awsCfg), cfg.QueueURL),
		Store:          states,
		Runners:        dynamostore.NewLedgerDynamo(ddb, cfg.TableName),
		Lifecycle:      states,
		Counter:        telemetry.NewEMF(os.Stdout, cfg.MetricsNamespace, names.FunctionWebhook, nil),
		Logger:         logger,
		Allow:          cfg.Allow,
		Installations:  cfg.Installations,
		// Installations learnt from the installation webhook; the App's
		// webhook secret is read again when the setup page replaced it.
		Recorded:       dynamostore.NewInstallationsDynamo(ddb, cfg.TableName),
		RefreshSecrets: refresh,
		MaxBodyBytes:   cfg.MaxBodyBytes,
		JobTTL:         cfg.JobTTL,
		Deployment:     cfg.Deployment,
	})
}

// githubAndPools builds what scale-up and scale-down both start from: the
// GitHub client over the Apps whose keys the secret holds (read once per
// container), and the pools file. A secret that holds no App yet (the
// stack's placeholder, before the setup page ran) is github.ErrNoApp.
func githubAndPools(ctx context.Context, awsCfg aws.Config, keyARN string, appIDs []int64, apiURL, poolsFile string,
	logger *slog.Logger) (*github.Client, *pool.Config, []int64, error) {
	keys, err := smsecret.Fetch(ctx, secretsmanager.NewFromConfig(awsCfg), keyARN)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("loading GitHub App keys: %w", err)
	}
	apps, err := github.ParseAppKeys(appIDs, keys)
	if err != nil {
		return nil, nil, nil, err
	}
	ids := make([]int64, len(apps))
	for i, a := range apps {
		ids[i] = a.ID
	}
	gh, err := github.NewClient(apps, github.WithBaseURL(apiURL), github.WithLogger(logger))
	if err != nil {
		return nil, nil, nil, err
	}
	pools, err := poolfile.Load(poolsFile)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("loading pools (%s): %w", names.EnvPoolsFile, err)
	}
	return gh, pools, ids, nil
}

// groupKeeper keeps the pools' runner groups for a function acting as the
// App; nil when runners are registered per repository (repoScope), which
// join no group skiff keeps.
func groupKeeper(pools *pool.Config, gh *github.Client, entries []string, repoScope bool, counter telemetry.Counter,
	logger *slog.Logger) (*groups.Keeper, error) {
	if repoScope {
		return nil, nil
	}
	a, err := allow.Parse(entries)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", names.EnvAllow, err)
	}
	return groups.New(groups.Options{Pools: pools, Allow: a, GitHub: gh, Counter: counter, Logger: logger})
}
