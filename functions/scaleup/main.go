// Command scaleup is the job queue's SQS-triggered Lambda; wiring only, the service is pkg/scaleup.
package main

import (
	"log/slog"

	"github.com/skiffci/skiff/internal/coldstart"
	"github.com/skiffci/skiff/internal/wiring"
)

func main() {
	coldstart.Run(coldstart.Function[wiring.ScaleUpConfig, *wiring.ScaleUp]{
		Name:    "scaleup",
		Config:  wiring.ScaleUpConfigFromEnv,
		Level:   func(c wiring.ScaleUpConfig) slog.Level { return c.LogLevel },
		Build:   wiring.NewScaleUp,
		Handler: func(su *wiring.ScaleUp, _ *slog.Logger) any { return sqsHandler(su) },
	})
}
