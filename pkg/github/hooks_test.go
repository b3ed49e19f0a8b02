package github_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/github/ghsim"
)

type received struct {
	event, action, guid string
	jobID               int64
}

// receiver is a webhook endpoint that checks signatures and records events.
type receiver struct {
	mu      sync.Mutex
	got     []received
	badSig  int
	failing int // answer 500 to this many deliveries
}

func newReceiver(t *testing.T, secret string) (*receiver, string) {
	rc := &receiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write(body)
		rc.mu.Lock()
		defer rc.mu.Unlock()
		if !hmac.Equal([]byte(r.Header.Get("X-Hub-Signature-256")), []byte("sha256="+hex.EncodeToString(mac.Sum(nil)))) {
			rc.badSig++
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if rc.failing > 0 {
			rc.failing--
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		var p struct {
			Action      string `json:"action"`
			WorkflowJob struct {
				ID int64 `json:"id"`
			} `json:"workflow_job"`
		}
		_ = json.Unmarshal(body, &p)
		rc.got = append(rc.got, received{r.Header.Get("X-GitHub-Event"), p.Action, r.Header.Get("X-GitHub-Delivery"), p.WorkflowJob.ID})
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(srv.Close)
	return rc, srv.URL
}

func (rc *receiver) events() []string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []string
	for _, r := range rc.got {
		s := r.event + "." + r.action
		if r.jobID != 0 {
			s += fmt.Sprintf("#%d", r.jobID)
		}
		out = append(out, s)
	}
	return out
}

// TestWebhookOrder checks GitHub's order of events for a run of two jobs,
// one of them cancelled while queued.
func TestWebhookOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	rc, url := newReceiver(t, "s3cret")
	e.sim.SetWebhook(e.appID, url, "s3cret")
	ctx := ctxT(t)
	run, err := e.sim.StartRun(ghsim.RunSpec{Repo: "acme/app", Jobs: []ghsim.JobSpec{
		{Name: "build", Labels: []string{"self-hosted", "linux"}, Duration: 3 * time.Minute},
		{Name: "gpu", Labels: []string{"self-hosted", "gpu"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	a, b := run.JobIDs[0], run.JobIDs[1]
	e.connectOrgRunner(ctx, t, "r1", "LINUX")
	if err := e.sim.CancelJob(b); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(3 * time.Minute)
	e.sim.Step()
	want := []string{
		"workflow_run.requested",
		fmt.Sprintf("workflow_job.queued#%d", a), fmt.Sprintf("workflow_job.queued#%d", b),
		"workflow_run.in_progress", fmt.Sprintf("workflow_job.in_progress#%d", a),
		fmt.Sprintf("workflow_job.completed#%d", b),
		fmt.Sprintf("workflow_job.completed#%d", a), "workflow_run.completed",
	}
	if got := rc.events(); !slices.Equal(got, want) {
		t.Fatalf("events:\n got %v\nwant %v", got, want)
	}
	if rc.badSig != 0 {
		t.Fatalf("%d deliveries with a bad signature", rc.badSig)
	}
	st, _ := e.sim.Job(b)
	if st.Conclusion != "cancelled" {
		t.Fatalf("cancelled job = %+v", st)
	}
}

// TestHookDeliveriesRedelivery: dropped deliveries and deliveries the
// receiver refused are listed as failures and redelivered with their GUID.
func TestHookDeliveriesRedelivery(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	rc, url := newReceiver(t, "s3cret")
	e.sim.AddApp(ghsim.AppConfig{ID: e.appID, PublicKey: &testKey(t, 0).PublicKey, WebhookURL: url, WebhookSecret: "s3cret"})
	ctx := ctxT(t)
	e.sim.SetFault(ghsim.OpWebhook, ghsim.Fault{FailNext: 2})
	rc.failing = 1
	for range 60 { // 60 runs × 2 events: more than one page of 100
		if _, err := e.sim.StartRun(ghsim.RunSpec{Repo: "acme/app", Jobs: []ghsim.JobSpec{{Labels: []string{"x"}}}}); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(time.Second)
	}
	all, err := e.client.ListHookDeliveries(ctx, e.appID, github.DeliveryQuery{})
	if err != nil || len(all) != 120 {
		t.Fatalf("ListHookDeliveries = %d, %v; want 120 over two pages", len(all), err)
	}
	if e.sim.Requests(ghsim.OpListHookDeliveries) != 2 {
		t.Fatalf("%d list requests, want 2 pages", e.sim.Requests(ghsim.OpListHookDeliveries))
	}
	for i := 1; i < len(all); i++ {
		if all[i].ID >= all[i-1].ID {
			t.Fatal("deliveries not newest first")
		}
	}
	failed, err := e.client.ListHookDeliveries(ctx, e.appID, github.DeliveryQuery{Status: "failure"})
	if err != nil || len(failed) != 3 {
		t.Fatalf("failures = %+v, %v; want 2 dropped + 1 refused", failed, err)
	}
	guids := map[string]bool{}
	for _, d := range failed {
		if !d.Failed() || d.Redelivery || d.InstallationID != e.inst {
			t.Fatalf("failure %+v", d)
		}
		guids[d.GUID] = true
		if err := e.client.RedeliverHookDelivery(ctx, e.appID, d.ID); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]bool{}
	for _, r := range rc.got {
		if guids[r.guid] {
			got[r.guid] = true
		}
	}
	if len(got) != 3 {
		t.Fatalf("%d of 3 failed deliveries arrived after redelivery", len(got))
	}
	if f, _ := e.client.ListHookDeliveries(ctx, e.appID, github.DeliveryQuery{Status: "failure"}); len(f) != 3 {
		t.Fatalf("failures after redelivery = %d, want the 3 originals still listed", len(f))
	}
	recent, err := e.client.ListHookDeliveries(ctx, e.appID, github.DeliveryQuery{Since: t0.Add(50 * time.Second)})
	if err != nil || len(recent) != 2*10+3 { // 10 runs since then, plus the 3 redeliveries
		t.Fatalf("since filter = %d deliveries, %v", len(recent), err)
	}
	limited, err := e.client.ListHookDeliveries(ctx, e.appID, github.DeliveryQuery{Limit: 5})
	if err != nil || len(limited) != 5 {
		t.Fatalf("limit = %d, %v", len(limited), err)
	}
	if err := e.client.RedeliverHookDelivery(ctx, e.appID, 1); err == nil {
		t.Fatal("redelivering an unknown delivery succeeded")
	}
}
