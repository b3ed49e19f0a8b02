package wiring

import (
	"log/slog"
	"os"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/skiffci/skiff/pkg/config"
	"github.com/skiffci/skiff/pkg/instanceevents"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/room"
	"github.com/skiffci/skiff/pkg/store/dynamostore"
	"github.com/skiffci/skiff/pkg/telemetry"
)

// EC2EventsConfig is the EC2-event function's configuration, read from the
// environment by EC2EventsConfigFromEnv.
type EC2EventsConfig struct {
	TableName        string // SKIFF_TABLE_NAME: the state table, which holds the ledger
	LogLevel         slog.Level
	MetricsNamespace string
	MetricsPools     []string // SKIFF_METRICS_RECORDS, as scale-down reads it: their runners are the reconciler's to end
	// QueueURL (SKIFF_QUEUE_URL) is the job queue: a runner's end offers
	// the next job waiting in its pool's room there. Without it, the
	// reconciler's sweep offers waiting jobs.
	QueueURL string
}

// EC2EventsConfigFromEnv reads the configuration through getenv (os.Getenv)
// and reports every missing or malformed variable by name.
func EC2EventsConfigFromEnv(getenv func(string) string) (EC2EventsConfig, error) {
	env := config.NewEnv(getenv)
	c := EC2EventsConfig{
		TableName:        env.Required(names.EnvTableName),
		MetricsNamespace: env.String(names.EnvMetricsNamespace, names.DefaultMetricsNamespace),
		MetricsPools:     env.List(names.EnvMetricsRecords),
		QueueURL:         env.String(names.EnvQueueURL, ""),
	}
	c.LogLevel = env.LogLevel(names.EnvLogLevel)
	return c, env.Err()
}

// String describes the configuration for a cold-start log line.
func (c EC2EventsConfig) String() string {
	return strings.Join([]string{"table=" + c.TableName, "log_level=" + c.LogLevel.String(), "metrics_namespace=" + c.MetricsNamespace,
		"metrics_records=" + strings.Join(c.MetricsPools, ","), "queue=" + c.QueueURL}, " ")
}

// NewEC2Events builds the production EC2-event service: the runner ledger
// in DynamoDB, EMF metrics on stdout, and the given logger.
func NewEC2Events(cfg EC2EventsConfig, awsCfg aws.Config, logger *slog.Logger) (*instanceevents.Service, error) {
	ddb := newDynamoDB(awsCfg)
	dl := dynamostore.NewLedgerDynamo(ddb, cfg.TableName)
	counter := telemetry.NewEMF(os.Stdout, cfg.MetricsNamespace, names.FunctionEC2Events, nil)
	var ledger instanceevents.Ledger = dl
	if cfg.QueueURL != "" {
		rm, err := dynamoRoom(ddb, sqs.NewFromConfig(awsCfg), cfg.TableName, cfg.QueueURL, nil, dl, counter, nil, logger)
		if err != nil {
			return nil, err
		}
		ledger = WakingEvents{Ledger: room.Ledger{Ledger: dl, Room: rm}, Interruptions: dl}
	}
	return instanceevents.New(instanceevents.Options{
		Ledger:      ledger,
		Counter:     counter,
		Logger:      logger,
		RecordPools: cfg.MetricsPools,
	})
}
