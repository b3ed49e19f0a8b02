package github

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
)

func (c *Client) app(appID int64) (*appState, error) {
	if appID == 0 && len(c.apps) == 1 {
		return c.apps[0], nil
	}
	a := c.appByID[appID]
	if a == nil {
		return nil, fmt.Errorf("github: App %d is not configured", appID)
	}
	return a, nil
}

// ListHookDeliveries lists the deliveries of an App's webhook, newest first,
// following GitHub's cursor pagination (GET /app/hook/deliveries, as the App).
// appID may be 0 when a single App is configured.
func (c *Client) ListHookDeliveries(ctx context.Context, appID int64, q DeliveryQuery) ([]HookDelivery, error) {
	a, err := c.app(appID)
	if err != nil {
		return nil, err
	}
	v := url.Values{"per_page": {"100"}}
	if q.Status != "" {
		v.Set("status", q.Status)
	}
	var all []HookDelivery
	rq := &request{op: "list_hook_deliveries", method: "GET", path: "/app/hook/deliveries", query: v, auth: authApp, app: a}
	err = c.paginate(ctx, rq, func(resp *response) (bool, error) {
		var page []HookDelivery
		if err := decode(rq.op, resp, &page); err != nil {
			return false, err
		}
		for _, d := range page {
			if !q.Since.IsZero() && d.DeliveredAt.Before(q.Since) {
				return false, nil
			}
			all = append(all, d)
			if q.Limit > 0 && len(all) >= q.Limit {
				return false, nil
			}
		}
		return len(page) > 0, nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing hook deliveries of App %d: %w", a.ID, err)
	}
	return all, nil
}

// RedeliverHookDelivery asks GitHub to deliver a webhook delivery again
// (POST /app/hook/deliveries/{delivery_id}/attempts, as the App).
func (c *Client) RedeliverHookDelivery(ctx context.Context, appID, deliveryID int64) error {
	a, err := c.app(appID)
	if err != nil {
		return err
	}
	rq := &request{op: "redeliver_hook_delivery", method: "POST",
		path: "/app/hook/deliveries/" + strconv.FormatInt(deliveryID, 10) + "/attempts", auth: authApp, app: a}
	if _, err := c.send(ctx, rq); err != nil {
		return fmt.Errorf("redelivering hook delivery %d of App %d: %w", deliveryID, a.ID, err)
	}
	return nil
}
