// Command scaledown is the reconciler's Lambda, run every minute by an
// EventBridge schedule; wiring only, the service is pkg/scaledown.
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"

	"github.com/skiffci/skiff/internal/wiring"
)

func main() {
	if err := run(context.Background()); err != nil {
		slog.New(slog.NewJSONHandler(os.Stderr, nil)).Error("scaledown cold start failed", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	cfg, err := wiring.ScaleDownConfigFromEnv(os.Getenv)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewJSONHandler(os.Stdout, &slog.HandlerOptions{Level: cfg.LogLevel}))
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return err
	}
	svc, err := wiring.NewScaleDown(ctx, cfg, awsCfg, logger)
	if err != nil {
		return err
	}
	logger.Info("scaledown ready", "config", cfg.String())
	lambda.Start(func(ctx context.Context) error { _, err := svc.Reconcile(ctx); return err })
	return nil
}
