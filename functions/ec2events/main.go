// Command ec2events receives EC2 state changes and spot interruption warnings
// from EventBridge; wiring only, the service is pkg/instanceevents.
package main

import (
	"github.com/skiffci/skiff/internal/coldstart"
	"github.com/skiffci/skiff/internal/wiring"
	"github.com/skiffci/skiff/pkg/instanceevents"
)

func main() {
	coldstart.Run("ec2events", instanceevents.ConfigFromEnv, wiring.NewEC2Events, eventHandler)
}
