package scaledown

import (
	"context"
	"time"

	"github.com/skiffci/skiff/pkg/github"
)

// redeliver asks GitHub to deliver again the App's failed deliveries of the
// last hour that failed on our side (5xx, timeouts), once each: a delivery
// whose GUID already has a redelivery, or a success, is left alone; a 4xx
// is the webhook's own refusal and never redelivered.
func (p *pass) redeliver(ctx context.Context) {
	for _, app := range p.s.o.Apps {
		if p.late(ctx) {
			return
		}
		ds, err := p.s.o.GitHub.ListHookDeliveries(ctx, app, github.DeliveryQuery{Status: "failure",
			Since: p.now.Add(-p.s.o.RedeliverWindow), Limit: 100})
		p.ghCalls.Add(1)
		if err != nil {
			p.fail("listing hook deliveries", err, "app_id", app)
			continue
		}
		retried := p.s.redeliveredSince(p.now.Add(-p.s.o.RedeliverWindow))
		for _, d := range ds {
			if d.Redelivery {
				retried[d.GUID] = true
			}
		}
		n := 0
		for _, d := range ds {
			class := ""
			switch {
			case d.Redelivery || retried[d.GUID]:
			case d.StatusCode == 0:
				class = "timeout"
			case d.StatusCode >= 500:
				class = "5xx"
			}
			if class == "" {
				continue
			}
			if n >= p.s.o.MaxRedeliveries {
				p.defer1("redeliveries", "app_id", app)
				break
			}
			n++
			retried[d.GUID] = true
			p.ghCalls.Add(1)
			if err := p.s.o.GitHub.RedeliverHookDelivery(ctx, app, d.ID); err != nil {
				p.fail("redelivering", err, "delivery_id", d.GUID)
				continue
			}
			p.s.rememberRedelivery(d.GUID, p.now)
			p.count(MetricRedeliveries, class)
			p.log.Info("redelivered a failed webhook delivery", "delivery_id", d.GUID, "status_code", d.StatusCode, "event", d.Event)
			p.rep.Redeliveries++
		}
	}
}

// redeliveredSince returns the GUIDs redelivered since since, forgetting
// older ones.
func (s *Service) redeliveredSince(since time.Time) map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]bool, len(s.redelivered))
	for guid, at := range s.redelivered {
		if at.Before(since) {
			delete(s.redelivered, guid)
			continue
		}
		out[guid] = true
	}
	return out
}

func (s *Service) rememberRedelivery(guid string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.redelivered == nil {
		s.redelivered = map[string]time.Time{}
	}
	s.redelivered[guid] = at
}
