package scaledown_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/scaledown"
)

// TestRedeliverFailedDeliveries: the App's deliveries that failed on our
// side (5xx) are redelivered once each, at most MaxRedeliveries a pass (the
// rest on the next pass); a delivery the webhook refused with a 4xx is
// never redelivered, nor is one whose redelivery succeeded, on any later
// pass.
func TestRedeliverFailedDeliveries(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 3, func(o *scaledown.Options) { o.MaxRedeliveries = 2 })
	var mu sync.Mutex
	seen := map[string]int{} // delivery GUID → times received
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		guid := r.Header.Get("X-GitHub-Delivery")
		seen[guid]++
		switch {
		case r.Header.Get("X-GitHub-Event") == "workflow_run":
			rw.WriteHeader(http.StatusBadRequest) // the webhook's own refusal: final
		case seen[guid] == 1:
			rw.WriteHeader(http.StatusServiceUnavailable) // the first try of each job event fails
		}
	}))
	t.Cleanup(srv.Close)
	w.sim.SetWebhook(42, srv.URL, "s")
	for range 3 {
		if _, err := w.sim.StartRun(ghsim.RunSpec{Repo: "acme/app", Jobs: []ghsim.JobSpec{{Labels: []string{"self-hosted", "linux", "x64"}}}}); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	counts := []int{}
	for range 4 {
		w.clock.Advance(time.Minute)
		rep, err := w.down.Reconcile(ctx)
		if err != nil {
			t.Fatal(err)
		}
		counts = append(counts, rep.Redeliveries)
	}
	if want := []int{2, 1, 0, 0}; !slices.Equal(counts, want) {
		t.Errorf("redeliveries per pass %v, want %v", counts, want)
	}
	if n := w.sim.Requests(ghsim.OpRedeliverHookDelivery); n != 3 {
		t.Errorf("%d redelivery requests, want 3 (one per failed job event)", n)
	}
	mu.Lock()
	defer mu.Unlock()
	for guid, n := range seen {
		if n > 2 {
			t.Errorf("delivery %s received %d times", guid, n)
		}
	}
	if got := w.counter.Get(scaledown.MetricRedeliveries, "5xx"); got != 3 {
		t.Errorf("%v redeliveries counted as 5xx, want 3", got)
	}
}
