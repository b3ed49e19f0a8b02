package wiring

import (
	"context"
	"log/slog"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/skiffci/skiff/pkg/setup"
	"github.com/skiffci/skiff/pkg/setup/smstore"
)

// NewSetup builds the setup page over the stack's secrets. It is served at
// the root of its Function URL, whose address comes from each request.
func NewSetup(_ context.Context, cfg setup.Config, awsCfg aws.Config, logger *slog.Logger) (*setup.Handler, error) {
	return setup.New(setup.Options{
		Store: smstore.SecretsStore{API: secretsmanager.NewFromConfig(awsCfg), SetupARN: cfg.SetupSecretARN,
			AppKeyARN: cfg.PrivateKeyARN, WebhookSecretARN: cfg.WebhookSecretARN},
		WebhookURL: cfg.WebhookURL, GitHubURL: cfg.GitHubURL, GitHubAPIURL: cfg.GitHubAPIURL, Logger: logger,
	})
}
