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
	coldstart.Run(coldstart.Function[wiring.EC2EventsConfig, *instanceevents.Service]{
		Name:   "ec2events",
		Config: wiring.EC2EventsConfigFromEnv,
		Level:  func(c wiring.EC2EventsConfig) slog.Level { return c.LogLevel },
		Build: func(_ context.Context, cfg wiring.EC2EventsConfig, awsCfg aws.Config, logger *slog.Logger) (*instanceevents.Service, error) {
			return wiring.NewEC2Events(cfg, awsCfg, logger)
		},
		Handler: func(svc *instanceevents.Service, logger *slog.Logger) any { return eventHandler(svc, logger) },
	})
}
