package wiring

import (
	"log/slog"
	"os"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/skiffci/skiff/pkg/config"
	"github.com/skiffci/skiff/pkg/instanceevents"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/telemetry"
)

// EC2EventsConfig is the EC2-event function's configuration, read from the
// environment by EC2EventsConfigFromEnv.
type EC2EventsConfig struct {
	TableName        string // SKIFF_TABLE_NAME: the state table, which holds the ledger
	LogLevel         slog.Level
	MetricsNamespace string
	MetricsPools     []string // SKIFF_METRICS_RECORDS, as scale-down reads it: their runners are the reconciler's to end
}

// EC2EventsConfigFromEnv reads the configuration through getenv (os.Getenv)
// and reports every missing or malformed variable by name.
func EC2EventsConfigFromEnv(getenv func(string) string) (EC2EventsConfig, error) {
	env := config.NewEnv(getenv)
	c := EC2EventsConfig{
		TableName:        env.Required(names.EnvTableName),
		MetricsNamespace: env.String(names.EnvMetricsNamespace, names.DefaultMetricsNamespace),
		MetricsPools:     env.List(names.EnvMetricsRecords),
	}
	c.LogLevel = env.LogLevel(names.EnvLogLevel)
	return c, env.Err()
}

// String describes the configuration for a cold-start log line.
func (c EC2EventsConfig) String() string {
	return strings.Join([]string{"table=" + c.TableName, "log_level=" + c.LogLevel.String(), "metrics_namespace=" + c.MetricsNamespace,
		"metrics_records=" + strings.Join(c.MetricsPools, ",")}, " ")
}

// NewEC2Events builds the production EC2-event service: the runner ledger
// in DynamoDB, EMF metrics on stdout, and the given logger.
func NewEC2Events(cfg EC2EventsConfig, awsCfg aws.Config, logger *slog.Logger) (*instanceevents.Service, error) {
	return instanceevents.New(instanceevents.Options{
		Ledger:      store.NewLedgerDynamo(dynamodb.NewFromConfig(awsCfg), cfg.TableName),
		Counter:     telemetry.NewEMF(os.Stdout, cfg.MetricsNamespace, names.FunctionEC2Events, nil),
		Logger:      logger,
		RecordPools: cfg.MetricsPools,
	})
}
