package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/aws/aws-lambda-go/events"

	"github.com/skiffci/skiff/pkg/instanceevents"
)

// The detail types the rules deliver (infra/skiff AddEC2Events).
const (
	detailStateChange      = "EC2 Instance State-change Notification"
	detailSpotInterruption = "EC2 Spot Instance Interruption Warning"
)

// ec2Detail is the detail of both EC2 events: the instance, and its new
// state (state changes) or the action EC2 will take (spot warnings).
type ec2Detail struct {
	InstanceID     string `json:"instance-id"`
	State          string `json:"state"`
	InstanceAction string `json:"instance-action"`
}

// eventHandler translates an EventBridge event into the service's calls,
// at the event's time. An error makes Lambda retry the (asynchronous)
// invocation: it is returned only for a store failure or an event that
// cannot be read; an event of another type is logged and dropped.
func eventHandler(svc *instanceevents.Service, logger *slog.Logger) func(context.Context, events.EventBridgeEvent) error {
	return func(ctx context.Context, ev events.EventBridgeEvent) error {
		log := logger.With("event_id", ev.ID, "detail_type", ev.DetailType)
		if ev.DetailType != detailStateChange && ev.DetailType != detailSpotInterruption {
			log.Warn("ignoring an event of an unexpected type", "source", ev.Source)
			return nil
		}
		var d ec2Detail
		if err := json.Unmarshal(ev.Detail, &d); err != nil {
			return fmt.Errorf("decoding the detail of event %s: %w", ev.ID, err)
		}
		if ev.DetailType == detailSpotInterruption {
			return svc.SpotInterruption(ctx, d.InstanceID, ev.Time)
		}
		return svc.StateChanged(ctx, d.InstanceID, d.State, ev.Time)
	}
}
