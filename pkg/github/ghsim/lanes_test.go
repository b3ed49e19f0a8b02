package ghsim_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/github/ghsim"
)

// TestWebhookLanesOverlap: with WebhookLanes, the deliveries of different
// jobs are in flight at once. The receiver holds the first job's delivery
// until another job's arrives: on lanes, that one comes meanwhile and both
// are answered 200; one at a time, the first would wait out the
// simulator's webhook client (its timeout only ends the test's wait, it
// is not what is measured) and fail.
func TestWebhookLanesOverlap(t *testing.T) {
	t.Parallel()
	other := make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	first := int64(0)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var p struct {
			WorkflowJob *struct{ ID int64 } `json:"workflow_job"`
		}
		_ = json.Unmarshal(body, &p)
		if p.WorkflowJob == nil {
			return
		}
		mu.Lock()
		if first == 0 {
			first = p.WorkflowJob.ID
		}
		held := first == p.WorkflowJob.ID
		mu.Unlock()
		if held {
			<-other
			return
		}
		once.Do(func() { close(other) })
	}))
	t.Cleanup(hook.Close)
	s := ghsim.New(ghsim.Options{WebhookLanes: 4, WebhookClient: &http.Client{Timeout: 5 * time.Second}})
	t.Cleanup(s.Close)
	k, _ := keys(t)
	s.AddApp(ghsim.AppConfig{ID: 1, PublicKey: &k.PublicKey, WebhookURL: hook.URL, WebhookSecret: "s"})
	s.AddRepo("acme", "app")
	s.Install(1, "acme")
	if _, err := s.StartRun(ghsim.RunSpec{Repo: "acme/app", Jobs: []ghsim.JobSpec{{Labels: []string{"x"}}, {Labels: []string{"x"}}}}); err != nil {
		t.Fatal(err)
	}
	for _, d := range s.Deliveries() {
		if d.Event == "workflow_job" && d.StatusCode != http.StatusOK {
			t.Errorf("delivery %d (%s %s) answered %d: the jobs' deliveries did not overlap", d.ID, d.Event, d.Action, d.StatusCode)
		}
	}
}

// TestAppUpdatedWhileDelivering: a test may update an App (AddApp with its
// ID) while the simulator delivers its webhooks; a delivery reads the App
// under the lock. Under the race detector (make test runs this package
// with it) a read outside the lock fails here; without it the test checks
// that every delivery names the App.
func TestAppUpdatedWhileDelivering(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	hookIDs := map[string]int{}
	hook := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hookIDs[r.Header.Get("X-GitHub-Hook-ID")]++
		mu.Unlock()
	}))
	t.Cleanup(hook.Close)
	s := ghsim.New(ghsim.Options{WebhookLanes: 4})
	t.Cleanup(s.Close)
	k, _ := keys(t)
	cfg := ghsim.AppConfig{ID: 1, PublicKey: &k.PublicKey, WebhookURL: hook.URL, WebhookSecret: "s"}
	s.AddApp(cfg)
	s.AddRepo("acme", "app")
	s.Install(1, "acme")
	var wg sync.WaitGroup
	wg.Go(func() {
		for range 40 {
			if _, err := s.StartRun(ghsim.RunSpec{Repo: "acme/app", Jobs: []ghsim.JobSpec{{Labels: []string{"x"}}}}); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Go(func() {
		for range 1000 {
			s.AddApp(cfg)
		}
	})
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(hookIDs) != 1 || hookIDs["1"] == 0 {
		t.Errorf("deliveries by X-GitHub-Hook-ID: %v, want all of App 1's", hookIDs)
	}
}
