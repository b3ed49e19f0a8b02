package ghsim_test

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/github/ghsim"
)

// TestJITRequestBodies: the simulator reads a generate-jitconfig body as
// GitHub describes it (name, runner_group_id and labels required; labels 1 to
// 100 strings; work_folder a string) and as go-github v62 sends it
// (GenerateJITConfigRequest: work_folder omitted when empty).
func TestJITRequestBodies(t *testing.T) {
	t.Parallel()
	s, tok := newSimToken(t)
	tests := []struct {
		name string
		body string
		want int
	}{
		{"go-github shape", `{"name":"r-1","runner_group_id":1,"labels":["self-hosted","x"]}` + "\n", http.StatusCreated},
		{"with work_folder", `{"name":"r-2","runner_group_id":1,"labels":["x"],"work_folder":"_work"}`, http.StatusCreated},
		{"malformed JSON", `{"name":`, http.StatusBadRequest},
		{"empty body", ``, http.StatusBadRequest},
		{"not an object", `["r-3"]`, http.StatusUnprocessableEntity},
		{"null", `null`, http.StatusUnprocessableEntity},
		{"no name", `{"runner_group_id":1,"labels":["x"]}`, http.StatusUnprocessableEntity},
		{"empty name", `{"name":"","runner_group_id":1,"labels":["x"]}`, http.StatusUnprocessableEntity},
		{"no runner group", `{"name":"r-4","labels":["x"]}`, http.StatusUnprocessableEntity},
		{"runner group as string", `{"name":"r-5","runner_group_id":"1","labels":["x"]}`, http.StatusUnprocessableEntity},
		{"runner group fractional", `{"name":"r-6","runner_group_id":1.5,"labels":["x"]}`, http.StatusUnprocessableEntity},
		{"no labels", `{"name":"r-7","runner_group_id":1}`, http.StatusUnprocessableEntity},
		{"empty labels", `{"name":"r-8","runner_group_id":1,"labels":[]}`, http.StatusUnprocessableEntity},
		{"101 labels", `{"name":"r-9","runner_group_id":1,"labels":["x"` + strings.Repeat(`,"x"`, 100) + `]}`, http.StatusUnprocessableEntity},
		{"label not a string", `{"name":"r-10","runner_group_id":1,"labels":[1]}`, http.StatusUnprocessableEntity},
		{"work_folder not a string", `{"name":"r-11","runner_group_id":1,"labels":["x"],"work_folder":3}`, http.StatusUnprocessableEntity},
		{"unknown group", `{"name":"r-12","runner_group_id":99,"labels":["x"]}`, http.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req, _ := http.NewRequest("POST", s.URL()+"/orgs/acme/actions/runners/generate-jitconfig", strings.NewReader(tt.body))
			req.Header.Set("Authorization", "Bearer "+tok)
			req.Header.Set("Content-Type", "application/json")
			do(t, req, tt.want, nil)
		})
	}
}

// TestInstallationTokenBodies: the access_tokens body is optional and, when
// sent, an object (go-github sends {} for empty options, null for nil ones).
func TestInstallationTokenBodies(t *testing.T) {
	t.Parallel()
	s, clock, inst := newSim(t)
	k, _ := keys(t)
	tests := []struct {
		name string
		body string
		want int
	}{
		{"none", "", http.StatusCreated},
		{"empty object", "{}\n", http.StatusCreated},
		{"repositories", `{"repositories":["app"]}`, http.StatusCreated},
		{"null", "null\n", http.StatusUnprocessableEntity},
		{"array", "[]", http.StatusUnprocessableEntity},
		{"malformed", "{", http.StatusBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			now := clock.Now()
			req, _ := http.NewRequest("POST", s.URL()+"/app/installations/"+strconv.FormatInt(inst, 10)+"/access_tokens",
				strings.NewReader(tt.body))
			req.Header.Set("Authorization", "Bearer "+signJWT(t, k, "1", now.Add(-time.Minute), now.Add(9*time.Minute)))
			do(t, req, tt.want, nil)
		})
	}
}

// TestRateLimitHeaders: every answer to an installation token carries
// GitHub's x-ratelimit-limit, -remaining, -used, -reset (epoch seconds) and
// -resource; the last call of a window answers with remaining 0, the next is
// a 403 with the same headers; a secondary limit sends retry-after in whole
// seconds, rounded up.
func TestRateLimitHeaders(t *testing.T) {
	t.Parallel()
	s, clock, inst := newSim(t)
	k, _ := keys(t)
	tok := mint(t, s, clock, inst, k)
	get := func() *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", s.URL()+"/orgs/acme/actions/runners", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	s.SetRateLimit(inst, 5000, 2)
	reset := strconv.FormatInt(clock.Now().Add(time.Hour).Truncate(time.Second).Unix(), 10)
	tests := []struct {
		name                         string
		status                       int
		limit, remaining, used, rset string
	}{
		{"second to last", 200, "5000", "1", "4999", reset},
		{"last", 200, "5000", "0", "5000", reset},
		{"exhausted", 403, "5000", "0", "5000", reset},
	}
	for _, tt := range tests { // sequential: one budget
		resp := get()
		h := resp.Header
		if resp.StatusCode != tt.status || h.Get("X-RateLimit-Limit") != tt.limit || h.Get("X-RateLimit-Remaining") != tt.remaining ||
			h.Get("X-RateLimit-Used") != tt.used || h.Get("X-RateLimit-Reset") != tt.rset || h.Get("X-RateLimit-Resource") != "core" {
			t.Fatalf("%s: status %d, headers %v", tt.name, resp.StatusCode, h)
		}
	}
	s.SetFault(ghsim.OpListOrgRunners, ghsim.Fault{LimitUntil: clock.Now().Add(time.Hour), RetryAfter: 1500 * time.Millisecond})
	if resp := get(); resp.StatusCode != 403 || resp.Header.Get("Retry-After") != "2" {
		t.Fatalf("secondary limit: status %d, Retry-After %q; want 403 and 2", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}
