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
	coldstart.Run(coldstart.Function[wiring.ScaleDownConfig, *scaledown.Service]{
		Name:   "scaledown",
		Config: wiring.ScaleDownConfigFromEnv,
		Level:  func(c wiring.ScaleDownConfig) slog.Level { return c.LogLevel },
		Build:  wiring.NewScaleDown,
		Handler: func(svc *scaledown.Service, _ *slog.Logger) any {
			return func(ctx context.Context) error { _, err := svc.Reconcile(ctx); return err }
		},
	})
}
