package github

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	gh "github.com/google/go-github/v62/github"
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
	ctx, rq := asApp(ctx, "list_hook_deliveries", a)
	v := url.Values{"per_page": {strconv.Itoa(perPage)}}
	if q.Status != "" {
		v.Set("status", q.Status)
	}
	var all []HookDelivery
	walk := newPageWalk(fmt.Sprintf("hook deliveries of App %d", a.ID), "")
	for {
		// Apps.ListHookDeliveries takes ListCursorOptions, which has no status
		// filter in v62: the same request with it, into go-github's type.
		var page []*gh.HookDelivery
		resp, err := c.do(ctx, rq, http.MethodGet, "app/hook/deliveries?"+v.Encode(), nil, &page)
		if err != nil {
			return nil, fmt.Errorf("listing hook deliveries of App %d: %w", a.ID, err)
		}
		for _, d := range page {
			if !walk.fresh(d.GetID()) {
				continue
			}
			hd := deliveryFrom(d)
			if !q.Since.IsZero() && hd.DeliveredAt.Before(q.Since) {
				return all, nil
			}
			all = append(all, hd)
			if q.Limit > 0 && len(all) >= q.Limit {
				return all, nil
			}
		}
		more, err := walk.next(len(page), 0, resp.Cursor) // no total_count here
		if err != nil {
			return nil, err
		}
		if !more {
			return all, nil
		}
		v.Set("cursor", resp.Cursor)
	}
}

// RedeliverHookDelivery asks GitHub to deliver a webhook delivery again
// (POST /app/hook/deliveries/{delivery_id}/attempts, as the App).
func (c *Client) RedeliverHookDelivery(ctx context.Context, appID, deliveryID int64) error {
	a, err := c.app(appID)
	if err != nil {
		return err
	}
	ctx, rq := asApp(ctx, "redeliver_hook_delivery", a)
	_, _, err = c.gh.Apps.RedeliverHookDelivery(ctx, deliveryID)
	var accepted *gh.AcceptedError
	if err != nil && !errors.As(err, &accepted) { // 202 Accepted is GitHub's success answer
		return fmt.Errorf("redelivering hook delivery %d of App %d: %w", deliveryID, a.ID, callError(rq, err))
	}
	return nil
}
