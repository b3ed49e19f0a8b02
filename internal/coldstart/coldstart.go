// Package coldstart is what every skiff Lambda does before it serves: read
// its configuration from the environment, log JSON at the configured level,
// load the AWS configuration, build its service, say it is ready, and hand
// the handler to the Lambda runtime. A failure before serving is logged and
// exits 1, which Lambda reports as an init error.
package coldstart

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
)

// Function describes one Lambda: C is its configuration, S its service.
type Function[C fmt.Stringer, S any] struct {
	// Name is the function's name in its log lines.
	Name string
	// Config reads the configuration through getenv.
	Config func(getenv func(string) string) (C, error)
	// Level is the configuration's log level.
	Level func(C) slog.Level
	// Build builds the service.
	Build func(ctx context.Context, cfg C, awsCfg aws.Config, logger *slog.Logger) (S, error)
	// Handler is what the runtime invokes (a lambda.Start handler).
	Handler func(svc S, logger *slog.Logger) any
}

// Run starts f and serves until the runtime ends the process.
func Run[C fmt.Stringer, S any](f Function[C, S]) {
	if err := start(context.Background(), f); err != nil {
		slog.New(slog.NewJSONHandler(os.Stderr, nil)).Error(f.Name+" cold start failed", "err", err)
		os.Exit(1)
	}
}

func start[C fmt.Stringer, S any](ctx context.Context, f Function[C, S]) error {
	cfg, err := f.Config(os.Getenv)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewJSONHandler(os.Stdout, &slog.HandlerOptions{Level: f.Level(cfg)}))
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return err
	}
	svc, err := f.Build(ctx, cfg, awsCfg, logger)
	if err != nil {
		return err
	}
	logger.Info(f.Name+" ready", "config", cfg.String())
	lambda.Start(f.Handler(svc, logger))
	return nil
}
