// Command scaledown is the reconciler's Lambda, run every minute by an
// EventBridge schedule; wiring only, the service is pkg/scaledown.
package main

import (
	"log/slog"

	"github.com/skiffci/skiff/internal/coldstart"
	"github.com/skiffci/skiff/internal/wiring"
	"github.com/skiffci/skiff/pkg/scaledown"
)

func main() {
	coldstart.Run("scaledown", scaledown.ConfigFromEnv, wiring.NewScaleDown,
		func(sd *wiring.ScaleDown, _ *slog.Logger) any { return sd.Reconcile })
}
