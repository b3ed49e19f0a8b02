package ghsim

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/skiffci/skiff/pkg/github"
)

type simDelivery struct {
	id          int64
	guid        string
	app         *simApp
	event       string
	action      string
	instID      int64
	repoID      int64
	lane        int64 // what keeps its order: the job's id, else the run's
	payload     []byte
	redelivery  bool
	sent        bool
	deliveredAt time.Time
	statusCode  int
	status      string
	duration    float64
}

// Delivery is one webhook delivery the simulator made (or tried to).
type Delivery struct {
	ID          int64
	GUID        string // X-GitHub-Delivery
	AppID       int64
	Event       string // X-GitHub-Event
	Action      string
	Redelivery  bool
	Sent        bool // false while queued
	StatusCode  int  // the receiver's answer; 502 when dropped or unreachable
	DeliveredAt time.Time
	Payload     []byte
}

// Deliveries returns every webhook delivery in the order they were queued.
func (s *Server) Deliveries() []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Delivery, len(s.deliveries))
	for i, d := range s.deliveries {
		out[i] = Delivery{ID: d.id, GUID: d.guid, AppID: d.app.ID, Event: d.event, Action: d.action,
			Redelivery: d.redelivery, Sent: d.sent, StatusCode: d.statusCode, DeliveredAt: d.deliveredAt,
			Payload: d.payload}
	}
	return out
}

func (s *Server) guidLocked() string {
	b := make([]byte, 16)
	for i := range b {
		b[i] = byte(s.rng.Uint32())
	}
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// webhookLocked queues an event for every App installed on the run's owner
// that has a webhook URL, each delivery with its own GUID (redeliveries keep
// it). j is nil for workflow_run events.
func (s *Server) webhookLocked(run *simRun, event, action string, j *simJob) {
	for _, in := range s.installsOfLocked(run.repo.owner) {
		if in.app.WebhookURL == "" {
			continue
		}
		guid := s.guidLocked()
		p := obj{"action": action, "repository": s.repoJSON(run.repo), "sender": s.userJSON(run.actor),
			"installation": obj{"id": in.id, "node_id": nodeID("Installation", in.id)}}
		if run.repo.owner.typ == "Organization" {
			p["organization"] = s.orgJSON(run.repo.owner)
		}
		if j != nil {
			p["workflow_job"] = s.jobJSON(j)
		} else {
			p["workflow_run"] = s.runJSON(run)
			p["workflow"] = s.workflowJSON(run)
		}
		body, _ := json.Marshal(p)
		d := &simDelivery{id: s.nextID(), guid: guid, app: in.app, event: event, action: action,
			instID: in.id, repoID: run.repo.id, lane: run.id, payload: body}
		if j != nil {
			d.lane = j.id
		}
		s.enqueueLocked(d)
	}
}

func (s *Server) installsOfLocked(a *simAccount) []*simInstall {
	var out []*simInstall
	for _, in := range s.installs {
		if in.account == a {
			out = append(out, in)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

func (s *Server) enqueueLocked(d *simDelivery) {
	s.deliveries = append(s.deliveries, d)
	s.dmu.Lock()
	s.outbox = append(s.outbox, d)
	s.dmu.Unlock()
}

// pump sends queued deliveries, in order on each lane (Options.WebhookLanes).
// Only one goroutine pumps; a delivery queued meanwhile (even by the
// receiver calling back into the simulator) is sent by the pumping
// goroutine, so nothing deadlocks and each job's order is GitHub's.
func (s *Server) pump() {
	s.dmu.Lock()
	if s.pumping {
		s.dmu.Unlock()
		return
	}
	s.pumping = true
	for len(s.outbox) > 0 {
		batch := s.outbox
		s.outbox = nil
		s.dmu.Unlock()
		s.sendLanes(batch)
		s.dmu.Lock()
	}
	s.pumping = false
	s.dmu.Unlock()
}

// sendLanes sends a batch of deliveries: with one lane, one at a time in
// order; else each lane's in order, the lanes at once.
func (s *Server) sendLanes(batch []*simDelivery) {
	n := max(1, s.opts.WebhookLanes)
	lanes := make([][]*simDelivery, n)
	for _, d := range batch {
		i := uint64(d.lane) % uint64(n)
		lanes[i] = append(lanes[i], d)
	}
	var wg sync.WaitGroup
	for _, lane := range lanes {
		if len(lane) == 0 {
			continue
		}
		wg.Go(func() {
			for _, d := range lane {
				s.send(d)
			}
		})
	}
	wg.Wait()
}

func (s *Server) send(d *simDelivery) {
	s.mu.Lock()
	drop := false
	if f := s.faults[OpWebhook]; f != nil {
		if f.FailNext > 0 {
			f.FailNext--
			drop = true
		} else if f.ErrorRate > 0 && s.rng.Float64() < f.ErrorRate {
			drop = true
		}
	}
	// The App's fields are read here, under the lock: AddApp may update
	// the App while the delivery is on its way.
	target, secret, appID := d.app.WebhookURL, d.app.WebhookSecret, d.app.ID
	s.mu.Unlock()
	start := time.Now()
	code, status := http.StatusBadGateway, "failed to connect"
	if !drop {
		code, status = s.post(target, secret, appID, d)
	}
	s.mu.Lock()
	d.sent, d.statusCode, d.status = true, code, status
	d.deliveredAt = s.now()
	d.duration = time.Since(start).Seconds()
	s.mu.Unlock()
}

func (s *Server) post(target, secret string, appID int64, d *simDelivery) (int, string) {
	req, err := http.NewRequest(http.MethodPost, target, bytes.NewReader(d.payload))
	if err != nil {
		return http.StatusBadGateway, "failed to connect"
	}
	h := req.Header
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", "GitHub-Hookshot/ghsim")
	h.Set("X-GitHub-Event", d.event)
	h.Set("X-GitHub-Delivery", d.guid)
	h.Set("X-GitHub-Hook-ID", strconv.FormatInt(appID, 10))
	h.Set("X-GitHub-Hook-Installation-Target-Type", "integration")
	h.Set("X-GitHub-Hook-Installation-Target-ID", strconv.FormatInt(appID, 10))
	if secret != "" {
		h.Set(github.SignatureHeader, github.SignWebhook([]byte(secret), d.payload))
	}
	resp, err := s.hookHC.Do(req)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return http.StatusGatewayTimeout, "timed out"
		}
		return http.StatusBadGateway, "failed to connect"
	}
	resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp.StatusCode, "OK"
	}
	return resp.StatusCode, fmt.Sprintf("Invalid HTTP Response: %d", resp.StatusCode)
}

func (s *Server) deliveryJSON(d *simDelivery) obj {
	var action any
	if d.action != "" {
		action = d.action
	}
	return obj{"id": d.id, "guid": d.guid, "delivered_at": ts(d.deliveredAt), "redelivery": d.redelivery,
		"duration": d.duration, "status": d.status, "status_code": d.statusCode, "event": d.event,
		"action": action, "installation_id": d.instID, "repository_id": d.repoID, "throttled_at": nil}
}

func (s *Server) listHookDeliveries(c *call) {
	q := c.r.URL.Query()
	per, err := strconv.Atoi(q.Get("per_page"))
	if err != nil || per <= 0 {
		per = 30
	}
	per = min(per, 100)
	cursor, _ := strconv.ParseInt(q.Get("cursor"), 10, 64)
	status := q.Get("status")
	if status != "" && status != "success" && status != "failure" {
		c.json(http.StatusUnprocessableEntity, obj{"message": "Validation Failed", "documentation_url": docsURL,
			"errors": []obj{{"resource": "Delivery", "field": "status", "code": "invalid"}}})
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []obj
	more := false
	last := int64(0)
	for i := len(s.deliveries) - 1; i >= 0; i-- {
		d := s.deliveries[i]
		if d.app != c.app || !d.sent || (cursor != 0 && d.id >= cursor) {
			continue
		}
		failed := d.statusCode >= 400 && d.statusCode <= 599
		if (status == "failure" && !failed) || (status == "success" && (d.statusCode < 200 || d.statusCode > 399)) {
			continue
		}
		if len(out) == per {
			more = true
			break
		}
		out = append(out, s.deliveryJSON(d))
		last = d.id
	}
	if more {
		v := url.Values{"per_page": {strconv.Itoa(per)}, "cursor": {strconv.FormatInt(last, 10)}}
		if status != "" {
			v.Set("status", status)
		}
		c.w.Header().Set("Link", fmt.Sprintf(`<%s%s?%s>; rel="next"`, s.webBase, c.r.URL.Path, v.Encode()))
	}
	if out == nil {
		out = []obj{}
	}
	c.json(http.StatusOK, out)
}

func (s *Server) redeliverHookDelivery(c *call) {
	id, _ := strconv.ParseInt(c.r.PathValue("delivery_id"), 10, 64)
	s.mu.Lock()
	defer s.mu.Unlock()
	var orig *simDelivery
	for _, d := range s.deliveries {
		if d.id == id && d.app == c.app {
			orig = d
		}
	}
	if orig == nil {
		c.fail(http.StatusNotFound, "Not Found")
		return
	}
	d := &simDelivery{id: s.nextID(), guid: orig.guid, app: orig.app, event: orig.event, action: orig.action,
		instID: orig.instID, repoID: orig.repoID, lane: orig.lane, payload: orig.payload, redelivery: true}
	s.enqueueLocked(d)
	c.json(http.StatusAccepted, obj{})
}
