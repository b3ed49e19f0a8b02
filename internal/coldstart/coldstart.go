// Package coldstart is what every skiff Lambda does before it serves: read
// its configuration and the log level from the environment, log JSON at that
// level, load the AWS configuration, build its service, say it is ready, and
// hand the handler to the Lambda runtime. A failure before serving is logged
// and exits 1, which Lambda reports as an init error.
package coldstart

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"

	"github.com/skiffci/skiff/pkg/config"
	"github.com/skiffci/skiff/pkg/names"
)

// Run starts the function called name and serves until the runtime ends the
// process: readConfig reads its configuration (C) through getenv, build
// builds its service (S), and handler is what the runtime invokes (a
// lambda.Start handler).
func Run[C fmt.Stringer, S, H any](name string,
	readConfig func(getenv func(string) string) (C, error),
	build func(ctx context.Context, cfg C, awsCfg aws.Config, logger *slog.Logger) (S, error),
	handler func(svc S, logger *slog.Logger) H,
) {
	ctx := context.Background()
	cfg, level, err := settings(os.Getenv, readConfig)
	if err != nil {
		fail(name, err)
	}
	logger := slog.New(slog.NewJSONHandler(os.Stdout, &slog.HandlerOptions{Level: level}))
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		fail(name, err)
	}
	svc, err := build(ctx, cfg, awsCfg, logger)
	if err != nil {
		fail(name, err)
	}
	logger.Info(name+" ready", "config", cfg.String(), "log_level", level.String())
	lambda.Start(handler(svc, logger))
}

// settings reads the function's configuration and the log level every
// function shares (names.EnvLogLevel: debug, info, warn or error; info when
// unset), and reports every bad setting of both at once.
func settings[C any](getenv func(string) string, readConfig func(func(string) string) (C, error)) (C, slog.Level, error) {
	env := config.NewEnv(getenv)
	level := env.LogLevel(names.EnvLogLevel)
	cfg, err := readConfig(getenv)
	return cfg, level, errors.Join(err, env.Err())
}

func fail(name string, err error) {
	slog.New(slog.NewJSONHandler(os.Stderr, nil)).Error(name+" cold start failed", "err", err)
	os.Exit(1)
}
