package instanceevents

import (
	"strings"

	"github.com/skiffci/skiff/pkg/config"
	"github.com/skiffci/skiff/pkg/names"
)

// Config is the EC2-event function's configuration, read from the
// environment by ConfigFromEnv.
type Config struct {
	TableName        string // SKIFF_TABLE_NAME: the state table, which holds the ledger
	MetricsNamespace string
	MetricsPools     []string // SKIFF_METRICS_RECORDS, as scale-down reads it: their runners are the reconciler's to end
	// QueueURL (SKIFF_QUEUE_URL) is the job queue: a runner's end offers
	// the next job waiting in its pool's room there. Without it, the
	// reconciler's sweep offers waiting jobs.
	QueueURL string
}

// ConfigFromEnv reads the configuration through getenv (os.Getenv)
// and reports every missing or malformed variable by name.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	env := config.NewEnv(getenv)
	c := Config{
		TableName:        env.Required(names.EnvTableName),
		MetricsNamespace: env.String(names.EnvMetricsNamespace, names.DefaultMetricsNamespace),
		MetricsPools:     env.List(names.EnvMetricsRecords),
		QueueURL:         env.String(names.EnvQueueURL, ""),
	}
	return c, env.Err()
}

// String describes the configuration for a cold-start log line.
func (c Config) String() string {
	return strings.Join([]string{"table=" + c.TableName, "metrics_namespace=" + c.MetricsNamespace,
		"metrics_records=" + strings.Join(c.MetricsPools, ","), "queue=" + c.QueueURL}, " ")
}
