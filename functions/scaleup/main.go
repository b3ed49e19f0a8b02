// Command scaleup is the job queue's SQS-triggered Lambda; wiring only, the service is pkg/scaleup.
package main

import (
	"log/slog"

	"github.com/skiffci/skiff/internal/coldstart"
	"github.com/skiffci/skiff/internal/wiring"
	"github.com/skiffci/skiff/pkg/scaleup"
)

func main() {
	coldstart.Run(coldstart.Function[scaleup.Config, *wiring.ScaleUp]{
		Name:    "scaleup",
		Config:  scaleup.ConfigFromEnv,
		Level:   func(c scaleup.Config) slog.Level { return c.LogLevel },
		Build:   wiring.NewScaleUp,
		Handler: func(su *wiring.ScaleUp, _ *slog.Logger) any { return sqsHandler(su) },
	})
}
