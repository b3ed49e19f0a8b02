package wiring

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	sdkec2 "github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/provider/ec2"
	"github.com/skiffci/skiff/pkg/queue"
	"github.com/skiffci/skiff/pkg/queue/sqsqueue"
	"github.com/skiffci/skiff/pkg/room"
	"github.com/skiffci/skiff/pkg/scaleup"
	"github.com/skiffci/skiff/pkg/store/dynamostore"
	"github.com/skiffci/skiff/pkg/telemetry"
)

// ScaleUp is the scale-up function's service with the dead-letterer its
// answers need, built once per Lambda container.
type ScaleUp struct {
	// Service is nil while the App key secret holds no App (before the
	// setup page ran): Handle then builds it, or keeps the jobs waiting.
	Service     *scaleup.Service
	DeadLetters queue.DeadLetterer
	Counter     telemetry.Counter
	Logger      *slog.Logger

	mu    sync.Mutex
	build func(ctx context.Context) (*scaleup.Service, error)
	wait  queue.DelayedSender // the job queue; nil: jobs come back after their visibility timeout
}

// NoAppDelay is how long a job sent back to the queue waits before scale-up
// looks for the App again. Jobs exist only once the App's webhooks arrive,
// so this path is the moment around setup (or after a reset): two minutes
// keeps a job's start close to the App's arrival at one invocation per
// batch per two minutes.
const NoAppDelay = 2 * time.Minute

// MetricWaitingForApp counts jobs sent back to the queue because no App is
// stored yet.
const MetricWaitingForApp = "ScaleUpWaitingForApp"

// Handle answers a batch of deliveries. While the App key secret holds no
// App, it reads the secret again (one read per invocation: jobs arrive only
// once the App exists) and, still without one, sends every job back to the
// queue delayed by NoAppDelay, with a fresh receive count, so that nothing
// is lost and nothing is dead-lettered for waiting; one log line says why.
// A job that cannot be sent back is retried through its visibility timeout.
func (su *ScaleUp) Handle(ctx context.Context, ds []queue.Delivery) []queue.Answer {
	svc, err := su.service(ctx)
	if err == nil {
		return svc.Handle(ctx, ds)
	}
	answers := make([]queue.Answer, len(ds))
	waiting := 0
	for i, d := range ds {
		switch {
		case d.Err != nil:
			answers[i] = queue.Answer{Verdict: queue.Done, Reason: "undecodable"}
		case su.wait == nil:
			answers[i] = queue.Answer{Verdict: queue.Retry, Reason: "no_app"}
		default:
			if serr := su.wait.SendAfter(ctx, d.Job, NoAppDelay); serr != nil {
				su.Logger.Warn("sending a job back to the queue failed; it comes back after its visibility timeout",
					"job_id", d.Job.JobID, "err", serr)
				answers[i] = queue.Answer{Verdict: queue.Retry, Reason: "no_app"}
				continue
			}
			answers[i] = queue.Answer{Verdict: queue.Done, Reason: "no_app"}
			waiting++
		}
		su.Counter.Count(MetricWaitingForApp, "")
	}
	su.Logger.Warn("no GitHub App yet: jobs wait in the queue until the setup page stores one (docs/deploy.md)",
		"jobs", len(ds), "sent_back", waiting, "delay", NoAppDelay.String(), "reason", err.Error())
	return answers
}

// service returns the scale-up service, building it when the key secret
// has come to hold an App; github.ErrNoApp while it holds none.
func (su *ScaleUp) service(ctx context.Context) (*scaleup.Service, error) {
	su.mu.Lock()
	defer su.mu.Unlock()
	if su.Service != nil {
		return su.Service, nil
	}
	if su.build == nil {
		return nil, github.ErrNoApp
	}
	svc, err := su.build(ctx)
	if err != nil {
		if !errors.Is(err, github.ErrNoApp) {
			su.Logger.Error("building scale-up failed", "err", err)
		}
		return nil, err
	}
	su.Service = svc
	su.Logger.Info("GitHub App found: scale-up serves jobs")
	return svc, nil
}

// NewScaleUp builds the production scale-up: the GitHub Apps' keys read once
// from Secrets Manager, the pools file, DynamoDB (launch state and the
// registration table), the EC2 provider, the dead-letter queue, and EMF
// metrics and JSON logs on stdout. The GitHub client's token, runner group
// and registration token caches live as long as the container. While the key
// secret holds no App, it returns a ScaleUp without a Service, which keeps
// jobs waiting (Handle) and looks for the App at every invocation.
func NewScaleUp(ctx context.Context, cfg scaleup.Config, awsCfg aws.Config, logger *slog.Logger) (*ScaleUp, error) {
	counter := telemetry.NewEMF(os.Stdout, cfg.MetricsNamespace, names.FunctionScaleUp, nil)
	su := &ScaleUp{DeadLetters: sqsqueue.NewSQSDeadLetters(sqs.NewFromConfig(awsCfg), cfg.DeadLetterURL),
		Counter: counter, Logger: logger}
	if cfg.QueueURL != "" {
		su.wait = sqsqueue.NewSQS(sqs.NewFromConfig(awsCfg), cfg.QueueURL)
	}
	su.build = func(ctx context.Context) (*scaleup.Service, error) {
		return newScaleUpService(ctx, cfg, awsCfg, counter, logger)
	}
	svc, err := su.build(ctx)
	switch {
	case errors.Is(err, github.ErrNoApp):
		logger.Warn("no GitHub App yet: scale-up keeps jobs in the queue until the setup page stores one", "secret", cfg.PrivateKeyARN)
		return su, nil
	case err != nil:
		return nil, err
	}
	su.Service = svc
	return su, nil
}

func newScaleUpService(ctx context.Context, cfg scaleup.Config, awsCfg aws.Config, counter telemetry.Counter, logger *slog.Logger) (*scaleup.Service, error) {
	gh, pools, _, err := githubAndPools(ctx, awsCfg, cfg.PrivateKeyARN, cfg.AppIDs, cfg.GitHubAPIURL, cfg.PoolsFile, logger)
	if err != nil {
		return nil, err
	}
	ddb := newDynamoDB(awsCfg)
	launches := dynamostore.NewLaunchDynamo(ddb, cfg.TableName)
	prov, err := ec2.NewProvider(ec2.ProviderOptions{
		API: sdkec2.NewFromConfig(awsCfg), Registrations: ec2.NewRegistrationTable(ddb, cfg.RegistrationTable), Capacity: failedCapacity(ddb, cfg.TableName),
		Partition: cfg.Partition, Region: cfg.Region, Account: cfg.Account, Deployment: cfg.Deployment,
		LaunchTemplatePrefix: cfg.LaunchTemplatePrefix, RootDevice: cfg.RootDevice, MaxPlaces: cfg.MaxPlaces,
		CapacityMemoryFor: cfg.CapacityMemory, RegistrationTTL: cfg.RegistrationTTL, RegistrationTimeout: cfg.RegistrationTimeout,
		Counter: counter, Logger: logger,
	})
	if err != nil {
		return nil, err
	}
	var led ledger.Ledger = dynamostore.NewLedgerDynamo(ddb, cfg.TableName)
	records := dynamostore.NewDynamo(ddb, cfg.TableName)
	var waiter scaleup.Waiter = scaleup.NoRoom{}
	if cfg.QueueURL != "" {
		rm, err := dynamoRoom(ddb, sqs.NewFromConfig(awsCfg), cfg.TableName, cfg.QueueURL, pools, led, counter, nil, logger)
		if err != nil {
			return nil, err
		}
		led, waiter = room.Ledger{Ledger: led, Room: rm}, rm
	}
	var keeper scaleup.GroupKeeper = scaleup.NoGroups{}
	if k, err := groupKeeper(pools, gh, cfg.Allow, cfg.Scope == scaleup.ScopeRepo, counter, logger); err != nil {
		return nil, err
	} else if k != nil {
		keeper = k
	}
	runners, err := runnerFreshness(ddb, cfg.TableName, pools, gh, cfg.GitHubAPIURL, nil, counter, logger)
	if err != nil {
		return nil, err
	}
	return scaleup.New(scaleup.Options{
		Pools: pools, Launches: launches, Ledger: led, Jobs: records, Room: waiter,
		Provider: prov, GitHub: gh, Groups: keeper, Runners: runners,
		Counter: counter, Timings: telemetry.NewEMFTimings(os.Stdout, cfg.MetricsNamespace, names.FunctionScaleUp, nil),
		Logger: logger, Scope: cfg.Scope, GitHubURL: cfg.GitHubURL, CheckQueued: cfg.CheckQueued,
		MaxAttempts: cfg.MaxAttempts, MaxLaunchSize: cfg.MaxLaunchSize, ClaimLease: cfg.ClaimLease, LaunchBudget: cfg.LaunchBudget,
		RegistrationTimeout: cfg.RegistrationTimeout, Deployment: cfg.Deployment,
	})
}
