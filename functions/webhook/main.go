// Command webhook is the Lambda behind the GitHub App's webhook Function URL.
// Wiring only: the handler is built once per container by pkg/webhook.
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"

	"github.com/skiffci/skiff/internal/wiring"
	"github.com/skiffci/skiff/pkg/webhook"
)

func main() {
	if err := run(context.Background()); err != nil {
		slog.New(slog.NewJSONHandler(os.Stderr, nil)).Error("webhook cold start failed", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	cfg, err := webhook.ConfigFromEnv(os.Getenv)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewJSONHandler(os.Stdout, &slog.HandlerOptions{Level: cfg.LogLevel}))
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return err
	}
	h, err := wiring.NewWebhook(ctx, cfg, awsCfg, logger)
	if err != nil {
		return err
	}
	logger.Info("webhook ready", "config", cfg.String())
	lambda.Start(functionURL(h))
	return nil
}
