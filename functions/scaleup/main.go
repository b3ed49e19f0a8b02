// Command scaleup is the job queue's SQS-triggered Lambda; wiring only, the service is pkg/scaleup.
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
		slog.New(slog.NewJSONHandler(os.Stderr, nil)).Error("scaleup cold start failed", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	cfg, err := wiring.ScaleUpConfigFromEnv(os.Getenv)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewJSONHandler(os.Stdout, &slog.HandlerOptions{Level: cfg.LogLevel}))
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return err
	}
	su, err := wiring.NewScaleUp(ctx, cfg, awsCfg, logger)
	if err != nil {
		return err
	}
	logger.Info("scaleup ready", "config", cfg.String())
	lambda.Start(sqsHandler(su))
	return nil
}
