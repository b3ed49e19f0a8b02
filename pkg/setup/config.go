package setup

import (
	"log/slog"
	"strings"

	"github.com/skiffci/skiff/pkg/config"
	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/names"
)

// Config is the setup function's configuration, read from the
// environment by ConfigFromEnv; docs/configuration.md lists the variables.
type Config struct {
	SetupSecretARN   string // SKIFF_SETUP_SECRET_ARN: the one-time setup secret
	PrivateKeyARN    string // SKIFF_GITHUB_PRIVATE_KEY_ARN: where the App's key lands
	WebhookSecretARN string // SKIFF_WEBHOOK_SECRET_ARN: where its webhook secret lands
	WebhookURL       string // SKIFF_WEBHOOK_URL: the webhook function's URL
	GitHubURL        string // SKIFF_GITHUB_URL
	GitHubAPIURL     string // SKIFF_GITHUB_API_URL
	LogLevel         slog.Level
}

// ConfigFromEnv reads the configuration through getenv and reports
// every missing or malformed variable by name.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	env := config.NewEnv(getenv)
	c := Config{
		SetupSecretARN:   env.Required(names.EnvSetupSecretARN),
		PrivateKeyARN:    env.Required(names.EnvGitHubPrivateKeyARN),
		WebhookSecretARN: env.Required(names.EnvWebhookSecretARN),
		WebhookURL:       env.Required(names.EnvWebhookURL),
		GitHubURL:        env.String(names.EnvGitHubURL, "https://github.com"),
		GitHubAPIURL:     env.String(names.EnvGitHubAPIURL, github.DefaultBaseURL),
	}
	// The webhook URL's shape (https) is checked when the page is built.
	c.LogLevel = env.LogLevel(names.EnvLogLevel)
	return c, env.Err()
}

// String describes the configuration for a cold-start log line, without secrets.
func (c Config) String() string {
	return strings.Join([]string{"setup_secret=" + c.SetupSecretARN, "app_key=" + c.PrivateKeyARN,
		"webhook_secret=" + c.WebhookSecretARN, "webhook_url=" + c.WebhookURL, "github=" + c.GitHubURL,
		"github_api=" + c.GitHubAPIURL}, " ")
}
