// Command scaledown is the reconciler's Lambda, run every minute by an
// EventBridge schedule; wiring only, the service is pkg/scaledown.
package main

import (
	"context"
	"log/slog"

	"github.com/skiffci/skiff/internal/coldstart"
	"github.com/skiffci/skiff/internal/wiring"
	"github.com/skiffci/skiff/pkg/scaledown"
)

func main() {
	coldstart.Run(coldstart.Function[scaledown.Config, *wiring.ScaleDown]{
		Name:   "scaledown",
		Config: scaledown.ConfigFromEnv,
		Level:  func(c scaledown.Config) slog.Level { return c.LogLevel },
		Build:  wiring.NewScaleDown,
		Handler: func(sd *wiring.ScaleDown, _ *slog.Logger) any {
			return func(ctx context.Context) error { return sd.Reconcile(ctx) }
		},
	})
}
