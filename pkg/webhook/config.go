package webhook

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/skiffci/skiff/pkg/allow"
	"github.com/skiffci/skiff/pkg/config"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/secret"
)

// Config is the webhook function's configuration. ConfigFromEnv documents
// each variable; docs/configuration.md lists them all.
type Config struct {
	SecretARN        string           // SKIFF_WEBHOOK_SECRET_ARN
	Secrets          [][]byte         // SKIFF_WEBHOOK_SECRET (+ _PREVIOUS), for local use
	QueueURL         string           // SKIFF_QUEUE_URL
	TableName        string           // SKIFF_TABLE_NAME
	PoolsFile        string           // SKIFF_POOLS_FILE
	Allow            allow.List       // SKIFF_ALLOW
	Installations    InstallationList // SKIFF_ALLOWED_INSTALLATIONS
	Deployment       string           // SKIFF_DEPLOYMENT
	MaxBodyBytes     int
	JobTTL           time.Duration
	MetricsNamespace string
}

// ConfigFromEnv reads the configuration through getenv (os.Getenv), and
// reports every missing or malformed variable by name. The webhook secret
// is required, from Secrets Manager or the environment: without one the
// function refuses to start.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	env := config.NewEnv(getenv)
	c := Config{
		SecretARN:        env.String("SKIFF_WEBHOOK_SECRET_ARN", ""),
		QueueURL:         env.Required("SKIFF_QUEUE_URL"),
		TableName:        env.Required("SKIFF_TABLE_NAME"),
		PoolsFile:        env.String("SKIFF_POOLS_FILE", config.DefaultPoolsFile(getenv)),
		MaxBodyBytes:     env.Int("SKIFF_MAX_BODY_BYTES", DefaultMaxBodyBytes),
		JobTTL:           env.Duration("SKIFF_JOB_TTL", DefaultJobTTL),
		MetricsNamespace: env.String("SKIFF_METRICS_NAMESPACE", "Skiff"),
		// Its runners' names carry it: a job that ran on one of them is
		// checked again (detect).
		Deployment: env.Deployment(),
	}
	// The job record's conditional write dedupes deliveries: no delivery
	// ids are kept, so a horizon for them would be a setting that does
	// nothing.
	if v := env.Raw(names.EnvDeliveryTTL); v != "" {
		env.Fail("%s=%s is no longer read: the webhook keeps no delivery ids (the job record, kept SKIFF_JOB_TTL, dedupes redeliveries); remove it", names.EnvDeliveryTTL, v)
	}
	if cur := env.Raw("SKIFF_WEBHOOK_SECRET"); cur != "" {
		c.Secrets = append(c.Secrets, []byte(cur))
		if prev := env.Raw("SKIFF_WEBHOOK_SECRET_PREVIOUS"); prev != "" {
			c.Secrets = append(c.Secrets, []byte(prev))
		}
	} else if env.Raw("SKIFF_WEBHOOK_SECRET_PREVIOUS") != "" {
		env.Fail("SKIFF_WEBHOOK_SECRET_PREVIOUS is set without SKIFF_WEBHOOK_SECRET")
	}
	switch {
	case c.SecretARN == "" && len(c.Secrets) == 0:
		env.Fail("no webhook secret: set SKIFF_WEBHOOK_SECRET_ARN (Secrets Manager) or SKIFF_WEBHOOK_SECRET (local use); skiff does not accept unsigned webhooks")
	case c.SecretARN != "" && len(c.Secrets) > 0:
		env.Fail("SKIFF_WEBHOOK_SECRET_ARN and SKIFF_WEBHOOK_SECRET are both set: keep one")
	}
	// The allow-list fails closed: unset or empty, the function refuses to
	// start rather than serve everyone (or silently no one).
	allowed, err := allow.Parse(env.List("SKIFF_ALLOW"))
	switch {
	case err != nil:
		env.Fail("SKIFF_ALLOW: %v", err)
	case allowed.Empty():
		env.Fail("SKIFF_ALLOW is empty: skiff would refuse every repository; list owners and owner/name repositories (comma-separated), or * for every owner the App is installed on")
	}
	c.Allow = allowed
	// The installation pin is optional: unset, the installations recorded
	// from the installation webhook are served (and no others).
	installations, err := ParseInstallationList(env.List("SKIFF_ALLOWED_INSTALLATIONS"))
	if err != nil {
		env.Fail("SKIFF_ALLOWED_INSTALLATIONS: %v", err)
	}
	c.Installations = installations
	return c, env.Err()
}

// LoadSecrets returns the accepted webhook secrets: from the environment
// when given there, else read once through fetch (Secrets Manager in AWS).
func (c Config) LoadSecrets(ctx context.Context, fetch secret.Fetcher) ([][]byte, error) {
	if len(c.Secrets) > 0 {
		return c.Secrets, nil
	}
	v, err := fetch(ctx, c.SecretARN)
	if err != nil {
		return nil, fmt.Errorf("loading webhook secret: %w", err)
	}
	s, err := secret.WebhookSecrets(v)
	if err != nil {
		return nil, fmt.Errorf("loading webhook secret %s: %w", c.SecretARN, err)
	}
	return s, nil
}

// String describes the configuration for a cold-start log line, without
// any secret.
func (c Config) String() string {
	src := "env"
	if c.SecretARN != "" {
		src = c.SecretARN
	}
	return strings.Join([]string{
		"queue=" + c.QueueURL, "table=" + c.TableName, "pools=" + c.PoolsFile, "secret_source=" + src,
		fmt.Sprintf("max_body_bytes=%d", c.MaxBodyBytes), "job_ttl=" + c.JobTTL.String(),
	}, " ")
}
