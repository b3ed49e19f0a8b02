package wiring

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	sdkec2 "github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/metrics/cwpeaks"
	"github.com/skiffci/skiff/pkg/metrics/recordstore"
	"github.com/skiffci/skiff/pkg/metrics/writer"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/provider/ec2"
	"github.com/skiffci/skiff/pkg/provider/ec2/ec2prices"
	"github.com/skiffci/skiff/pkg/queue/sqsqueue"
	"github.com/skiffci/skiff/pkg/room"
	"github.com/skiffci/skiff/pkg/scaledown"
	"github.com/skiffci/skiff/pkg/store/dynamostore"
	"github.com/skiffci/skiff/pkg/telemetry"
	"github.com/skiffci/skiff/pkg/userdata"
)

// ScaleDown is the reconciler of a Lambda container. Its service is built
// once the App key secret holds an App: until then (a fresh stack, before
// the setup page ran) each pass reads the secret again and does nothing
// else, with one log line; there is nothing to reconcile without an App.
type ScaleDown struct {
	mu     sync.Mutex
	svc    *scaledown.Service
	build  func(ctx context.Context) (*scaledown.Service, error)
	logger *slog.Logger
}

// Reconcile runs one pass, or reports that no App is stored yet (nil error:
// the schedule's retry would change nothing).
func (sd *ScaleDown) Reconcile(ctx context.Context) error {
	sd.mu.Lock()
	if sd.svc == nil {
		svc, err := sd.build(ctx)
		switch {
		case errors.Is(err, github.ErrNoApp):
			sd.mu.Unlock()
			sd.logger.Warn("no GitHub App yet: nothing to reconcile until the setup page stores one (docs/deploy.md)")
			return nil
		case err != nil:
			sd.mu.Unlock()
			return err
		}
		sd.svc = svc
		sd.logger.Info("GitHub App found: scale-down reconciles")
	}
	svc := sd.svc
	sd.mu.Unlock()
	_, err := svc.Reconcile(ctx)
	return err
}

// NewScaleDown builds the production reconciler: the App keys from Secrets
// Manager, the pools file, DynamoDB (ledger, claims, job records, metrics
// records), the EC2 provider (list and terminate only), the job queue for
// replacements, CloudWatch for peaks when metrics records are on, and EMF
// metrics and JSON logs on stdout. Without an App yet, the service is built
// at the first pass that finds one.
func NewScaleDown(ctx context.Context, cfg scaledown.Config, awsCfg aws.Config, logger *slog.Logger) (*ScaleDown, error) {
	sd := &ScaleDown{logger: logger, build: func(ctx context.Context) (*scaledown.Service, error) {
		return newScaleDownService(ctx, cfg, awsCfg, logger)
	}}
	svc, err := sd.build(ctx)
	switch {
	case errors.Is(err, github.ErrNoApp):
		logger.Warn("no GitHub App yet: scale-down waits for the setup page", "secret", cfg.PrivateKeyARN)
	case err != nil:
		return nil, err
	}
	sd.svc = svc
	return sd, nil
}

func newScaleDownService(ctx context.Context, cfg scaledown.Config, awsCfg aws.Config, logger *slog.Logger) (*scaledown.Service, error) {
	gh, pools, appIDs, err := githubAndPools(ctx, awsCfg, cfg.PrivateKeyARN, cfg.AppIDs, cfg.GitHubAPIURL, cfg.PoolsFile, logger)
	if err != nil {
		return nil, err
	}
	ddb := newDynamoDB(awsCfg)
	launches := dynamostore.NewLaunchDynamo(ddb, cfg.TableName)
	ledger := dynamostore.NewLedgerDynamo(ddb, cfg.TableName)
	records := dynamostore.NewDynamo(ddb, cfg.TableName)
	counter := telemetry.NewEMF(os.Stdout, cfg.MetricsNamespace, names.FunctionScaleDown, nil)
	// List and Terminate need no registration table; only the warm
	// machines' launches write to it (without one, a warm launch fails and
	// is logged). List tags each runner with the runner version its AMI's
	// tag names.
	ec2Client := sdkec2.NewFromConfig(awsCfg)
	var regs ec2.Registrations = noRegistrations{}
	if cfg.RegistrationTable != "" {
		regs = ec2.NewRegistrationTable(ddb, cfg.RegistrationTable)
	}
	prov, err := ec2.NewProvider(ec2.ProviderOptions{API: ec2Client, Images: ec2Client, Registrations: regs,
		Capacity: failedCapacity(ddb, cfg.TableName), Partition: cfg.Partition, Region: cfg.Region, Account: cfg.Account, Deployment: cfg.Deployment,
		LaunchTemplatePrefix: cfg.LaunchTemplatePrefix, RootDevice: cfg.RootDevice, Counter: counter, Logger: logger})
	if err != nil {
		return nil, err
	}
	var mw writer.MetricsWriter = writer.NoMetrics{}
	if len(cfg.MetricsPools) > 0 {
		mw = &writer.RecordWriter{Pools: cfg.MetricsPools, Jobs: records, Ledger: ledger,
			Peaks: cwpeaks.New(cloudwatch.NewFromConfig(awsCfg), cwpeaks.WithAccount(cfg.Partition, cfg.Region, cfg.Account)), Out: recordstore.New(ddb, cfg.MetricsTable),
			CloudProvider: prov.Name(), Region: cfg.Region, Prices: ec2prices.Prices, Counter: counter, Logger: logger}
	}
	var scopes []github.Scope
	for _, s := range cfg.Scopes {
		o, r, _ := strings.Cut(s, "/")
		scopes = append(scopes, github.Scope{Owner: o, Repo: r})
	}
	var redeliver []int64
	if cfg.Redeliver {
		redeliver = appIDs
	}
	sqsc := sqs.NewFromConfig(awsCfg)
	gauges := telemetry.NewEMFGauges(os.Stdout, cfg.MetricsNamespace, names.FunctionScaleDown, nil)
	rm, err := dynamoRoom(ddb, sqsc, cfg.TableName, cfg.QueueURL, pools, ledger, counter, gauges, logger)
	if err != nil {
		return nil, err
	}
	runners, err := runnerFreshness(ddb, cfg.TableName, pools, gh, cfg.GitHubAPIURL, gauges, counter, logger)
	if err != nil {
		return nil, err
	}
	var keeper scaledown.GroupKeeper = scaledown.NoGroups{}
	if k, err := groupKeeper(pools, gh, cfg.Allow, cfg.RepoScope, counter, logger); err != nil {
		return nil, err
	} else if k != nil {
		keeper = k
	}
	return scaledown.New(scaledown.Options{Pools: pools, Ledger: room.Ledger{Ledger: ledger, Room: rm}, Claims: launches,
		Jobs: records, Provider: prov, Room: rm, Groups: keeper, Runners: runners,
		GitHub: gh, Queue: sqsqueue.NewSQS(sqsc, cfg.QueueURL), Metrics: mw, Counter: counter, Logger: logger,
		Scopes: scopes, RepoScope: cfg.RepoScope, Apps: redeliver, MaxReplacements: cfg.MaxReplacements,
		MaxGitHubCalls:   cfg.MaxGitHubCalls,
		RerunInterrupted: cfg.RerunInterrupted, Deployment: cfg.Deployment})
}

// noRegistrations is the registration table of a provider that never
// launches (scale-down lists and terminates only).
type noRegistrations struct{}

func (noRegistrations) Put(context.Context, userdata.Registration) error {
	return fmt.Errorf("no registration table (%s): the reconciler launches no warm machine", names.EnvRegistrationTable)
}
