// Command ec2events receives EC2 state changes and spot interruption warnings
// from EventBridge; wiring only, the service is pkg/instanceevents.
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
		slog.New(slog.NewJSONHandler(os.Stderr, nil)).Error("ec2events cold start failed", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	cfg, err := wiring.EC2EventsConfigFromEnv(os.Getenv)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewJSONHandler(os.Stdout, &slog.HandlerOptions{Level: cfg.LogLevel}))
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return err
	}
	svc, err := wiring.NewEC2Events(cfg, awsCfg, logger)
	if err != nil {
		return err
	}
	logger.Info("ec2events ready", "config", cfg.String())
	lambda.Start(eventHandler(svc, logger))
	return nil
}
