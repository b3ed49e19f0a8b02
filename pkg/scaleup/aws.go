package scaleup

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	sdkec2 "github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/skiffci/skiff/pkg/ec2"
	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/telemetry"
)

// NewAWS builds the production service from cfg: the GitHub Apps' keys read
// once from Secrets Manager, the pools file, DynamoDB (store and
// registration table), EC2, the dead-letter queue, and EMF metrics and JSON
// logs on stdout. It is called once per Lambda container, so the GitHub
// client's token, runner group and registration token caches live as long
// as the container.
func NewAWS(ctx context.Context, cfg Config, awsCfg aws.Config, logger *slog.Logger) (*Service, error) {
	apps, err := cfg.LoadApps(ctx, secretsmanager.NewFromConfig(awsCfg))
	if err != nil {
		return nil, err
	}
	gh, err := github.NewClient(apps, github.WithBaseURL(cfg.GitHubAPIURL), github.WithLogger(logger))
	if err != nil {
		return nil, err
	}
	pools, err := pool.Load(cfg.PoolsFile)
	if err != nil {
		return nil, fmt.Errorf("loading pools (SKIFF_POOLS_FILE): %w", err)
	}
	ddb := dynamodb.NewFromConfig(awsCfg)
	o := cfg.Options()
	o.Pools = pools
	o.Launches = store.NewLaunchDynamo(ddb, cfg.TableName)
	o.EC2 = ec2.NewLauncher(sdkec2.NewFromConfig(awsCfg))
	o.GitHub = gh
	o.Registrations = NewRegistrationTable(ddb, cfg.RegistrationTable)
	o.DeadLetters = NewSQSDeadLetters(sqs.NewFromConfig(awsCfg), cfg.DeadLetterURL)
	o.Counter = telemetry.NewEMF(os.Stdout, cfg.MetricsNamespace, "scaleup", nil)
	o.Timings = telemetry.NewEMFTimings(os.Stdout, cfg.MetricsNamespace, "scaleup", nil)
	o.Logger = logger
	return New(o)
}
