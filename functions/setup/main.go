// Command setup is the Lambda behind the setup page's Function URL: it
// creates the GitHub App (pkg/setup) and stores it in the stack's secrets.
// Wiring only.
package main

import (
	"log/slog"

	"github.com/skiffci/skiff/internal/coldstart"
	"github.com/skiffci/skiff/internal/wiring"
	"github.com/skiffci/skiff/pkg/setup"
)

func main() {
	coldstart.Run("setup", setup.ConfigFromEnv, wiring.NewSetup,
		func(h *setup.Handler, _ *slog.Logger) any { return functionURL(h) })
}
