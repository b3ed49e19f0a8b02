// Command scaleup is the job queue's SQS-triggered Lambda; wiring only, the service is pkg/scaleup.
package main

import (
	"log/slog"

	"github.com/skiffci/skiff/internal/coldstart"
	"github.com/skiffci/skiff/internal/wiring"
	"github.com/skiffci/skiff/pkg/scaleup"
)

func main() {
	coldstart.Run("scaleup", scaleup.ConfigFromEnv, wiring.NewScaleUp,
		func(su *wiring.ScaleUp, _ *slog.Logger) any { return sqsHandler(su) })
}
