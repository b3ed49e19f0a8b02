package ghsim_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/github/ghsim"
)

// jit generates a JIT configuration for an organization runner with labels.
func jit(t *testing.T, s *ghsim.Server, tok, name string, labels ...string) string {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"name": name, "runner_group_id": 1, "labels": labels})
	req, _ := http.NewRequest("POST", s.URL()+"/orgs/acme/actions/runners/generate-jitconfig", bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+tok)
	var out struct {
		EncodedJITConfig string `json:"encoded_jit_config"`
	}
	do(t, req, http.StatusCreated, &out)
	return out.EncodedJITConfig
}

// runnerCall makes one runner-session call and returns its status and body.
// It may run on any goroutine: a transport error is reported as status 0.
func runnerCall(t *testing.T, method, url, session, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Error(err)
		return 0, nil
	}
	if session != "" {
		req.Header.Set("Authorization", "Bearer "+session)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return 0, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// connectHTTP connects cfg's runner over HTTP. It may run on any goroutine:
// a failure is reported and returns a zero session.
func connectHTTP(t *testing.T, s *ghsim.Server, cfg string) ghsim.RunnerSession {
	t.Helper()
	base, err := ghsim.BrokerURL(cfg)
	if err != nil {
		t.Error(err)
		return ghsim.RunnerSession{}
	}
	body, _ := json.Marshal(map[string]string{"encoded_jit_config": cfg})
	st, b := runnerCall(t, "POST", base+"/_sim/runner/connect", "", string(body))
	var rs ghsim.RunnerSession
	if st != http.StatusCreated || json.Unmarshal(b, &rs) != nil {
		t.Errorf("connect: %d %s", st, b)
	}
	return rs
}

func runnerURL(t *testing.T, cfg string, id int64, rest string) string {
	t.Helper()
	base, err := ghsim.BrokerURL(cfg)
	if err != nil {
		t.Error(err)
	}
	return fmt.Sprintf("%s/_sim/runner/%d%s", base, id, rest)
}

// TestRunnerSessionLifecycle: a runner connected over HTTP gets its job by
// long poll, the job runs until the runner completes it (not after its
// simulated duration), the webhooks come in GitHub's order, and the JIT
// configuration cannot be used again.
func TestRunnerSessionLifecycle(t *testing.T) {
	t.Parallel()
	s, clock, inst := newSim(t)
	s.SetWebhook(1, "http://127.0.0.1:1/hook", "secret") // nothing listens: deliveries are recorded, not received
	k, _ := keys(t)
	tok := mint(t, s, clock, inst, k)
	run, err := s.StartRun(ghsim.RunSpec{Repo: "acme/app", Jobs: []ghsim.JobSpec{{Labels: []string{"self-hosted", "x"}, Duration: time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := jit(t, s, tok, "standin-1", "x")
	rs := connectHTTP(t, s, cfg)
	if rs.RunnerName != "standin-1" || rs.Session == "" {
		t.Fatalf("session %+v", rs)
	}
	st, b := runnerCall(t, "GET", runnerURL(t, cfg, rs.RunnerID, "/job?wait=0s"), rs.Session, "")
	var job ghsim.RunnerJob
	if st != http.StatusOK || json.Unmarshal(b, &job) != nil || job.ID != run.JobIDs[0] || job.Repository != "acme/app" || job.Status != "in_progress" {
		t.Fatalf("job poll: %d %s, want job %d in progress", st, b, run.JobIDs[0])
	}
	clock.Advance(time.Hour)
	if js, _ := s.Job(job.ID); js.Status != "in_progress" || js.RunnerName != "standin-1" {
		t.Fatalf("an hour later the job is %+v, want still in progress on standin-1 (the runner decides)", js)
	}
	if st, b := runnerCall(t, "POST", runnerURL(t, cfg, rs.RunnerID, fmt.Sprintf("/job/%d/complete", job.ID)), rs.Session,
		`{"conclusion":"failure"}`); st != http.StatusNoContent {
		t.Fatalf("complete: %d %s", st, b)
	}
	if js, _ := s.Job(job.ID); js.Status != "completed" || js.Conclusion != "failure" {
		t.Fatalf("after complete: %+v", js)
	}
	base, _ := ghsim.BrokerURL(cfg)
	body, _ := json.Marshal(map[string]string{"encoded_jit_config": cfg})
	if st, _ := runnerCall(t, "POST", base+"/_sim/runner/connect", "", string(body)); st != http.StatusConflict {
		t.Errorf("second connect with the same JIT configuration: %d, want 409", st)
	}
	if st, _ := runnerCall(t, "GET", runnerURL(t, cfg, rs.RunnerID, "/job?wait=0s"), rs.Session, ""); st != http.StatusGone {
		t.Errorf("poll after the ephemeral runner's job: %d, want 410", st)
	}
	if st, _ := runnerCall(t, "POST", runnerURL(t, cfg, rs.RunnerID, "/disconnect"), rs.Session, ""); st != http.StatusNoContent {
		t.Errorf("disconnect of a removed runner: %d, want 204", st)
	}
	var got []string
	for _, d := range s.Deliveries() {
		got = append(got, d.Event+"."+d.Action)
	}
	want := "workflow_run.requested workflow_job.queued workflow_run.in_progress workflow_job.in_progress workflow_job.completed workflow_run.completed"
	if strings.Join(got, " ") != want {
		t.Errorf("webhooks %v\nwant %s", got, want)
	}
}

// TestRunnerSessionErrors: each misuse gets its own status and changes nothing.
func TestRunnerSessionErrors(t *testing.T) {
	t.Parallel()
	s, tok := newSimToken(t)
	run, err := s.StartRun(ghsim.RunSpec{Repo: "acme/app", Jobs: []ghsim.JobSpec{{Labels: []string{"x"}}}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := jit(t, s, tok, "r-busy", "x")
	rs := connectHTTP(t, s, cfg)
	idle := jit(t, s, tok, "r-idle", "y")
	base, _ := ghsim.BrokerURL(cfg)
	cases := []struct {
		name, method, path, session, body string
		want                              int
	}{
		{"connect without a body", "POST", "/_sim/runner/connect", "", ``, http.StatusBadRequest},
		{"connect with a malformed configuration", "POST", "/_sim/runner/connect", "", `{"encoded_jit_config":"bm90IGEgY29uZmln"}`, http.StatusBadRequest},
		{"connect with the same configuration again", "POST", "/_sim/runner/connect", "", `{"encoded_jit_config":"` + cfg + `"}`, http.StatusConflict},
		{"poll without a session", "GET", fmt.Sprintf("/_sim/runner/%d/job", rs.RunnerID), "", ``, http.StatusUnauthorized},
		{"poll with another runner's session", "GET", fmt.Sprintf("/_sim/runner/%d/job", rs.RunnerID), "wrong", ``, http.StatusUnauthorized},
		{"poll with a bad wait", "GET", fmt.Sprintf("/_sim/runner/%d/job?wait=soon", rs.RunnerID), rs.Session, ``, http.StatusBadRequest},
		{"complete another job", "POST", fmt.Sprintf("/_sim/runner/%d/job/%d/complete", rs.RunnerID, run.JobIDs[0]+99), rs.Session, `{}`, http.StatusConflict},
		{"complete with an unknown conclusion", "POST", fmt.Sprintf("/_sim/runner/%d/job/%d/complete", rs.RunnerID, run.JobIDs[0]), rs.Session, `{"conclusion":"skipped"}`, http.StatusUnprocessableEntity},
		{"complete with a malformed body", "POST", fmt.Sprintf("/_sim/runner/%d/job/%d/complete", rs.RunnerID, run.JobIDs[0]), rs.Session, `{`, http.StatusBadRequest},
		{"disconnect with a bad session", "POST", fmt.Sprintf("/_sim/runner/%d/disconnect", rs.RunnerID), "wrong", ``, http.StatusUnauthorized},
	}
	for _, tc := range cases {
		st, b := runnerCall(t, tc.method, base+tc.path, tc.session, tc.body)
		if st != tc.want {
			t.Errorf("%s: %d %s, want %d", tc.name, st, b, tc.want)
		}
	}
	if js, _ := s.Job(run.JobIDs[0]); js.Status != "in_progress" || js.RunnerName != "r-busy" {
		t.Errorf("after the misuses the job is %+v, want in progress on r-busy", js)
	}
	// An idle runner's poll ends empty; the session still works afterwards.
	is := connectHTTP(t, s, idle)
	if st, b := runnerCall(t, "GET", runnerURL(t, idle, is.RunnerID, "/job?wait=1ms"), is.Session, ""); st != http.StatusNoContent {
		t.Errorf("idle poll: %d %s, want 204", st, b)
	}
}

// TestRunnerSessionEndings: a disconnect mid-job fails the job, a cancel
// mid-job makes the runner's completion a conflict, and a poll already
// waiting is woken by a job dispatched to its runner.
func TestRunnerSessionEndings(t *testing.T) {
	t.Parallel()
	s, tok := newSimToken(t)

	// A poll waiting before the job exists gets it when it is dispatched.
	cfg := jit(t, s, tok, "r-wait", "w")
	rs := connectHTTP(t, s, cfg)
	polled := make(chan ghsim.RunnerJob, 1)
	pollURL := runnerURL(t, cfg, rs.RunnerID, "/job?wait=30s")
	go func() {
		req, _ := http.NewRequestWithContext(context.Background(), "GET", pollURL, nil)
		req.Header.Set("Authorization", "Bearer "+rs.Session)
		var j ghsim.RunnerJob
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = json.NewDecoder(resp.Body).Decode(&j)
			resp.Body.Close()
		}
		polled <- j
	}()
	run, err := s.StartRun(ghsim.RunSpec{Repo: "acme/app", Jobs: []ghsim.JobSpec{{Labels: []string{"w"}}, {Labels: []string{"c"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if j := <-polled; j.ID != run.JobIDs[0] {
		t.Fatalf("the waiting poll got %+v, want job %d", j, run.JobIDs[0])
	}
	if st, _ := runnerCall(t, "POST", runnerURL(t, cfg, rs.RunnerID, "/disconnect"), rs.Session, ""); st != http.StatusNoContent {
		t.Fatalf("disconnect: %d", st)
	}
	if js, _ := s.Job(run.JobIDs[0]); js.Status != "completed" || js.Conclusion != "failure" {
		t.Errorf("job of a runner that disconnected mid-job: %+v, want completed failure", js)
	}

	// A job cancelled while its runner runs it.
	cc := jit(t, s, tok, "r-cancel", "c")
	cs := connectHTTP(t, s, cc)
	if err := s.CancelJob(run.JobIDs[1]); err != nil {
		t.Fatal(err)
	}
	if st, _ := runnerCall(t, "POST", runnerURL(t, cc, cs.RunnerID, fmt.Sprintf("/job/%d/complete", run.JobIDs[1])), cs.Session, `{}`); st != http.StatusConflict {
		t.Errorf("completing a cancelled job: %d, want 409", st)
	}
	if js, _ := s.Job(run.JobIDs[1]); js.Conclusion != "cancelled" {
		t.Errorf("cancelled job: %+v", js)
	}
}

// TestRunnerSessionsConcurrent: many runners connect, poll and complete at
// once; every job runs on exactly one runner and completes once.
func TestRunnerSessionsConcurrent(t *testing.T) {
	t.Parallel()
	s, tok := newSimToken(t)
	const n = 20
	specs := make([]ghsim.JobSpec, n)
	for i := range specs {
		specs[i] = ghsim.JobSpec{Labels: []string{"conc"}}
	}
	cfgs := make([]string, n)
	for i := range cfgs {
		cfgs[i] = jit(t, s, tok, fmt.Sprintf("conc-%d", i), "conc")
	}
	run, err := s.StartRun(ghsim.RunSpec{Repo: "acme/app", Jobs: specs})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	ran := map[int64]string{}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			rs := connectHTTP(t, s, cfgs[i])
			st, b := runnerCall(t, "GET", runnerURL(t, cfgs[i], rs.RunnerID, "/job?wait=10s"), rs.Session, "")
			var j ghsim.RunnerJob
			if st != http.StatusOK || json.Unmarshal(b, &j) != nil {
				t.Errorf("runner %d: poll %d %s", i, st, b)
				return
			}
			mu.Lock()
			if other, dup := ran[j.ID]; dup {
				t.Errorf("job %d ran on %s and %s", j.ID, other, rs.RunnerName)
			}
			ran[j.ID] = rs.RunnerName
			mu.Unlock()
			if st, _ := runnerCall(t, "POST", runnerURL(t, cfgs[i], rs.RunnerID, fmt.Sprintf("/job/%d/complete", j.ID)), rs.Session, `{}`); st != http.StatusNoContent {
				t.Errorf("runner %d: complete %d", i, st)
			}
		})
	}
	wg.Wait()
	for _, id := range run.JobIDs {
		if js, _ := s.Job(id); js.Status != "completed" || js.Conclusion != "success" || ran[id] != js.RunnerName {
			t.Errorf("job %d: %+v, ran on %q", id, js, ran[id])
		}
	}
}

func TestBrokerURL(t *testing.T) {
	t.Parallel()
	s, tok := newSimToken(t)
	cfg := jit(t, s, tok, "r", "x")
	got, err := ghsim.BrokerURL(cfg)
	if err != nil || !strings.HasPrefix(s.URL(), got) || strings.Contains(got, "/api") {
		t.Errorf("BrokerURL = %q, %v; want the root of %s", got, err, s.URL())
	}
	for _, bad := range []string{"", "!!", "bm90IGEgY29uZmln", "e30="} {
		if _, err := ghsim.BrokerURL(bad); err == nil {
			t.Errorf("BrokerURL(%q) = nil error", bad)
		}
	}
}
