// Command ec2events receives EC2 state changes and spot interruption warnings
// from EventBridge; wiring only, the service is pkg/instanceevents.
package main

import (
	"context"
	"log/slog"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/skiffci/skiff/internal/coldstart"
	"github.com/skiffci/skiff/internal/wiring"
	"github.com/skiffci/skiff/pkg/instanceevents"
)

func main() {
	coldstart.Run(coldstart.Function[instanceevents.Config, *instanceevents.Service]{
		Name:   "ec2events",
		Config: instanceevents.ConfigFromEnv,
		Level:  func(c instanceevents.Config) slog.Level { return c.LogLevel },
		Build: func(_ context.Context, cfg instanceevents.Config, awsCfg aws.Config, logger *slog.Logger) (*instanceevents.Service, error) {
			return wiring.NewEC2Events(cfg, awsCfg, logger)
		},
		Handler: func(svc *instanceevents.Service, logger *slog.Logger) any { return eventHandler(svc, logger) },
	})
}
