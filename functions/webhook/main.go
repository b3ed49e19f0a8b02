// Command webhook is the Lambda behind the GitHub App's webhook Function URL.
// Wiring only: the handler is built once per container by pkg/webhook.
package main

import (
	"log/slog"

	"github.com/skiffci/skiff/internal/coldstart"
	"github.com/skiffci/skiff/internal/wiring"
	"github.com/skiffci/skiff/pkg/webhook"
)

func main() {
	coldstart.Run("webhook", webhook.ConfigFromEnv, wiring.NewWebhook,
		func(h *webhook.Handler, _ *slog.Logger) any { return functionURL(h) })
}
