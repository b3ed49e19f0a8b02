package webhook

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provisioning"
	"github.com/skiffci/skiff/pkg/queue"
	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/telemetry"
)

// canarySecret must never appear in a log line or a response.
const canarySecret = "canary-webhook-secret-7d41a9"

var fixedNow = time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)

// faultyStore wraps the memory store with injectable failures.
type faultyStore struct {
	store.Store
	mu                sync.Mutex
	recordErr, runErr error
}

func (f *faultyStore) set(fn func(*faultyStore)) { f.mu.Lock(); fn(f); f.mu.Unlock() }

func (f *faultyStore) RecordJob(ctx context.Context, j store.Job) (bool, error) {
	f.mu.Lock()
	err := f.recordErr
	f.mu.Unlock()
	if err != nil {
		return false, err
	}
	return f.Store.RecordJob(ctx, j)
}

func (f *faultyStore) RecordRun(ctx context.Context, r store.Run) error {
	f.mu.Lock()
	err := f.runErr
	f.mu.Unlock()
	if err != nil {
		return err
	}
	return f.Store.RecordRun(ctx, r)
}

// runnersFunc adapts a function to Runners.
type runnersFunc func(ctx context.Context, name string, to provisioning.State, at time.Time, job int64) error

func (f runnersFunc) Advance(ctx context.Context, name string, to provisioning.State, at time.Time, job int64) error {
	return f(ctx, name, to, at, job)
}

func (f runnersFunc) Runner(context.Context, string) (provisioning.Runner, error) {
	return provisioning.Runner{}, store.ErrNotFound
}

// sendFunc adapts a function to queue.Sender.
type sendFunc func(context.Context, queue.Job) error

func (f sendFunc) Send(ctx context.Context, j queue.Job) error { return f(ctx, j) }

type routeErr struct{ reason string }

func (e routeErr) Error() string  { return "no pool serves these labels (" + e.reason + ")" }
func (e routeErr) Reason() string { return e.reason }

// testRouter sends every job to pool "default" unless a label says otherwise:
// "gpu" routes to pool "gpu", "ubuntu-latest" and "macos-latest" route nowhere
// (GitHub-hosted), "skiff/bad" is out of bounds.
var testRouter = RouterFunc(func(labels []string, _ string) (string, error) {
	for _, l := range labels {
		switch strings.ToLower(l) {
		case "gpu":
			return "gpu", nil
		case "macos-latest":
			return "", routeErr{"no_pool"}
		case "skiff/bad":
			return "", routeErr{"out_of_bounds"}
		}
	}
	return "default", nil
})

// openPolicies admit public repositories in every pool: most of GitHub's
// published examples are public repositories. TestVisibilityPolicy checks
// the default, which refuses them.
var openPolicies = PoliciesFunc(func(string) pool.Policy {
	return pool.Policy{Visibilities: []pool.Visibility{pool.VisibilityPublic, pool.VisibilityPrivate, pool.VisibilityInternal}}
})

func mustAllow(t testing.TB, entries ...string) AllowList {
	t.Helper()
	a, err := ParseAllowList(entries)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func mustInstallations(t testing.TB, entries ...string) InstallationList {
	t.Helper()
	l, err := ParseInstallationList(entries)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

type harness struct {
	h       *Handler
	queue   *queue.Memory
	store   *faultyStore
	ledger  *store.LedgerMemory
	counter *telemetry.Memory
	logs    *testenv.SyncBuffer
	secret  []byte
}

func newHarness(t testing.TB, mutate func(*Options)) *harness {
	t.Helper()
	hs := &harness{
		queue:   &queue.Memory{},
		store:   &faultyStore{Store: memoryStore(fixedNow)},
		ledger:  store.NewLedgerMemory(func() time.Time { return fixedNow }),
		counter: &telemetry.Memory{},
		logs:    &testenv.SyncBuffer{},
		secret:  []byte(canarySecret),
	}
	o := Options{
		Secrets:       [][]byte{hs.secret},
		Router:        testRouter,
		Policies:      openPolicies,
		Queue:         hs.queue,
		Store:         hs.store,
		Runners:       hs.ledger,
		Counter:       hs.counter,
		Logger:        slog.New(slog.NewJSONHandler(hs.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Now:           func() time.Time { return fixedNow },
		Allow:         mustAllow(t, "*"),
		Installations: mustInstallations(t, "*"),
		Recorded:      store.NewInstallationsMemory(),
	}
	if mutate != nil {
		mutate(&o)
	}
	h, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	hs.h = h
	t.Cleanup(func() {
		if strings.Contains(hs.logs.String(), canarySecret) {
			t.Errorf("the webhook secret appeared in the logs")
		}
	})
	return hs
}

// deliver signs body with the harness secret and handles it.
func (hs *harness) deliver(event, delivery string, body []byte) Response {
	return hs.h.Handle(context.Background(), Request{
		Event: event, Delivery: delivery, Signature: Sign(hs.secret, body), Body: body,
	})
}

type example struct {
	file, event, action string
	body                []byte
}

func loadExamples(t testing.TB) []example {
	t.Helper()
	files, err := filepath.Glob("../../testdata/webhooks/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no vendored webhook examples (run scripts/refresh-webhook-examples.sh): %v", err)
	}
	var out []example
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		parts := strings.Split(filepath.Base(f), ".")
		out = append(out, example{file: filepath.Base(f), event: parts[0], action: parts[1], body: b})
	}
	return out
}

func examplesOf(t testing.TB, event, action string) []example {
	var out []example
	for _, e := range loadExamples(t) {
		if e.event == event && (action == "" || e.action == action) {
			out = append(out, e)
		}
	}
	if len(out) == 0 {
		t.Fatalf("no %s.%s examples", event, action)
	}
	return out
}

// TestPublishedExamples delivers every vendored GitHub example and checks
// what each one does to the queue and the store.
func TestPublishedExamples(t *testing.T) {
	t.Parallel()
	for _, ex := range loadExamples(t) {
		t.Run(ex.file, func(t *testing.T) {
			t.Parallel()
			hs := newHarness(t, nil)
			resp := hs.deliver(ex.event, "d-"+ex.file, ex.body)
			if resp.Status != http.StatusOK {
				t.Fatalf("status = %d %s, want 200", resp.Status, resp.Body)
			}
			var raw struct {
				WorkflowJob struct {
					ID         int64 `json:"id"`
					RunID2     int64 `json:"run_id"`
					RunAttempt int   `json:"run_attempt"`
					Labels     []string
					RunnerName *string `json:"runner_name"`
				} `json:"workflow_job"`
				WorkflowRun struct {
					ID    int64
					Event string
				} `json:"workflow_run"`
				Repository struct {
					FullName string `json:"full_name"`
				}
				Installation *struct{ ID int64 }
			}
			if err := json.Unmarshal(ex.body, &raw); err != nil {
				t.Fatal(err)
			}
			jobs := hs.queue.Jobs()
			switch ex.event {
			case "ping":
				if len(jobs) != 0 {
					t.Fatalf("ping enqueued %d jobs", len(jobs))
				}
			case "workflow_job":
				wj := raw.WorkflowJob
				rec, err := hs.store.Job(context.Background(), wj.ID)
				if err != nil {
					t.Fatalf("job not recorded: %v", err)
				}
				wantPool, _ := testRouter.Route(wj.Labels, raw.Repository.FullName)
				if rec.Status.String() != ex.action || rec.RunID != wj.RunID2 || rec.Repository != raw.Repository.FullName || rec.Pool != wantPool {
					t.Errorf("record = %+v", rec)
				}
				if ex.action == "queued" {
					if len(jobs) != 1 {
						t.Fatalf("queued example enqueued %d jobs, want 1", len(jobs))
					}
					j := jobs[0]
					want := queue.Job{
						JobID: wj.ID, RunID: wj.RunID2, Attempt: wj.RunAttempt, Repository: raw.Repository.FullName,
						Owner: strings.Split(raw.Repository.FullName, "/")[0], Labels: wj.Labels, Pool: wantPool,
						Visibility: "public", // GitHub's examples are public repositories
						DeliveryID: "d-" + ex.file, ReceivedAt: fixedNow,
					}
					if raw.Installation != nil {
						want.InstallationID = raw.Installation.ID
					}
					if fmt.Sprint(j) != fmt.Sprint(want) {
						t.Errorf("message = %+v\nwant      %+v", j, want)
					}
				} else if len(jobs) != 0 {
					t.Errorf("%s enqueued %d jobs, want 0", ex.action, len(jobs))
				}
				if ex.action == "in_progress" && raw.WorkflowJob.RunnerName != nil && rec.RunnerName != *raw.WorkflowJob.RunnerName {
					t.Errorf("runner name = %q, want %q", rec.RunnerName, *raw.WorkflowJob.RunnerName)
				}
			case "workflow_run":
				run, err := hs.store.Run(context.Background(), raw.WorkflowRun.ID)
				if err != nil {
					t.Fatalf("run not recorded: %v", err)
				}
				if run.Event != raw.WorkflowRun.Event || run.Event == "" || run.Repository != raw.Repository.FullName {
					t.Errorf("run = %+v, want event %q", run, raw.WorkflowRun.Event)
				}
			}
			if hs.counter.Get(MetricAccepted, "") != 1 {
				t.Errorf("accepted count = %v", hs.counter.Snapshot())
			}
		})
	}
}

func TestSignatures(t *testing.T) {
	t.Parallel()
	body := examplesOf(t, "workflow_job", "queued")[0].body
	tampered := bytes.Replace(body, []byte(`"queued"`), []byte(`"qveued"`), 1)
	const previous = "previous-secret"
	tests := []struct {
		name       string
		secrets    []string
		req        func(h *harness) Request
		wantStatus int
	}{
		{name: "valid", req: func(h *harness) Request {
			return Request{Event: "workflow_job", Delivery: "d", Signature: Sign(h.secret, body), Body: body}
		}, wantStatus: 200},
		{name: "wrong secret", req: func(*harness) Request {
			return Request{Event: "workflow_job", Delivery: "d", Signature: Sign([]byte("wrong"), body), Body: body}
		}, wantStatus: 401},
		{name: "missing header", req: func(*harness) Request {
			return Request{Event: "workflow_job", Delivery: "d", Body: body}
		}, wantStatus: 401},
		{name: "sha1 only", req: func(*harness) Request {
			return Request{Event: "workflow_job", Delivery: "d", SHA1Only: true, Body: body}
		}, wantStatus: 401},
		{name: "not hex", req: func(*harness) Request {
			return Request{Event: "workflow_job", Delivery: "d", Signature: "sha256=" + strings.Repeat("zz", 32), Body: body}
		}, wantStatus: 401},
		{name: "wrong length", req: func(*harness) Request {
			return Request{Event: "workflow_job", Delivery: "d", Signature: "sha256=abcd", Body: body}
		}, wantStatus: 401},
		{name: "sha1 prefix", req: func(h *harness) Request {
			return Request{Event: "workflow_job", Delivery: "d", Signature: strings.Replace(Sign(h.secret, body), "sha256=", "sha1=", 1), Body: body}
		}, wantStatus: 401},
		{name: "tampered body", req: func(h *harness) Request {
			return Request{Event: "workflow_job", Delivery: "d", Signature: Sign(h.secret, body), Body: tampered}
		}, wantStatus: 401},
		{name: "rotated: previous secret still verifies", secrets: []string{canarySecret, previous}, req: func(*harness) Request {
			return Request{Event: "workflow_job", Delivery: "d", Signature: Sign([]byte(previous), body), Body: body}
		}, wantStatus: 200},
		{name: "rotated: current secret verifies", secrets: []string{canarySecret, previous}, req: func(h *harness) Request {
			return Request{Event: "workflow_job", Delivery: "d", Signature: Sign(h.secret, body), Body: body}
		}, wantStatus: 200},
		{name: "rotation over: previous secret refused", req: func(*harness) Request {
			return Request{Event: "workflow_job", Delivery: "d", Signature: Sign([]byte(previous), body), Body: body}
		}, wantStatus: 401},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			hs := newHarness(t, func(o *Options) {
				if tc.secrets != nil {
					o.Secrets = nil
					for _, s := range tc.secrets {
						o.Secrets = append(o.Secrets, []byte(s))
					}
				}
			})
			resp := hs.h.Handle(context.Background(), tc.req(hs))
			if resp.Status != tc.wantStatus {
				t.Fatalf("status = %d %s, want %d", resp.Status, resp.Body, tc.wantStatus)
			}
			if tc.wantStatus == 401 {
				if n := len(hs.queue.Jobs()); n != 0 {
					t.Errorf("unverified delivery enqueued %d jobs", n)
				}
				if hs.counter.Get(MetricRejected, "signature") != 1 {
					t.Errorf("rejection not counted: %v", hs.counter.Snapshot())
				}
			}
		})
	}
}

func TestEncodedBodies(t *testing.T) {
	t.Parallel()
	body := examplesOf(t, "workflow_job", "queued")[0].body
	sig := Sign([]byte(canarySecret), body)
	type encoded struct {
		method  string
		headers map[string]string
		body    string
		b64     bool
	}
	post := func(headers map[string]string, b string, b64 bool) encoded { return encoded{"POST", headers, b, b64} }
	hdr := map[string]string{"x-github-event": "workflow_job", "x-github-delivery": "d1", "x-hub-signature-256": sig, "content-type": "application/json"}
	tests := []struct {
		name       string
		ev         encoded
		wantStatus int
		wantJobs   int
	}{
		{name: "plain body", ev: post(hdr, string(body), false), wantStatus: 200, wantJobs: 1},
		{name: "base64 body decoded before verifying", ev: post(hdr, base64.StdEncoding.EncodeToString(body), true), wantStatus: 200, wantJobs: 1},
		{name: "base64 body signed over its encoding is refused", ev: post(map[string]string{
			"x-github-event": "workflow_job", "x-github-delivery": "d1",
			"x-hub-signature-256": Sign([]byte(canarySecret), []byte(base64.StdEncoding.EncodeToString(body))),
		}, base64.StdEncoding.EncodeToString(body), true), wantStatus: 401},
		{name: "invalid base64", ev: post(hdr, "%%%not-base64", true), wantStatus: 400},
		{name: "mixed-case header names", ev: post(map[string]string{"X-GitHub-Event": "workflow_job", "X-GitHub-Delivery": "d1", "X-Hub-Signature-256": sig}, string(body), false), wantStatus: 200, wantJobs: 1},
		{name: "sha1 header only", ev: post(map[string]string{"x-github-event": "workflow_job", "x-github-delivery": "d1", "x-hub-signature": "sha1=00"}, string(body), false), wantStatus: 401},
		{name: "GET", ev: encoded{"GET", hdr, string(body), false}, wantStatus: 405},
		{name: "oversize base64 refused before decoding", ev: post(hdr, strings.Repeat("QUJD", DefaultMaxBodyBytes), true), wantStatus: 413},
		{name: "oversize plain", ev: post(hdr, strings.Repeat("a", DefaultMaxBodyBytes+1), false), wantStatus: 413},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			hs := newHarness(t, nil)
			resp := hs.h.HandleEncoded(context.Background(), tc.ev.method, tc.ev.headers, tc.ev.body, tc.ev.b64)
			if resp.Status != tc.wantStatus {
				t.Fatalf("status = %d %s, want %d", resp.Status, resp.Body, tc.wantStatus)
			}
			if !json.Valid([]byte(resp.Body)) {
				t.Errorf("response is not JSON: %q", resp.Body)
			}
			if n := len(hs.queue.Jobs()); n != tc.wantJobs {
				t.Errorf("enqueued %d jobs, want %d", n, tc.wantJobs)
			}
		})
	}
}

func TestMalformedAndTruncated(t *testing.T) {
	t.Parallel()
	queued := examplesOf(t, "workflow_job", "queued")[0].body
	run := examplesOf(t, "workflow_run", "requested")[0].body
	type tcase struct {
		name, event string
		body        []byte
		wantStatus  int
	}
	tests := []tcase{
		{"empty body", "workflow_job", nil, 400},
		{"not json", "workflow_job", []byte("hello"), 400},
		{"json array", "workflow_job", []byte("[1,2]"), 400},
		{"no action", "workflow_job", []byte(`{"workflow_job":{"id":1,"run_id":2},"repository":{"full_name":"o/r"}}`), 400},
		{"no job id", "workflow_job", []byte(`{"action":"queued","workflow_job":{"run_id":2},"repository":{"full_name":"o/r"}}`), 400},
		{"no run id", "workflow_job", []byte(`{"action":"queued","workflow_job":{"id":1},"repository":{"full_name":"o/r"}}`), 400},
		{"no repository", "workflow_job", []byte(`{"action":"queued","workflow_job":{"id":1,"run_id":2}}`), 400},
		{"repository without owner", "workflow_job", []byte(`{"action":"queued","workflow_job":{"id":1,"run_id":2},"repository":{"full_name":"/r"}}`), 400},
		{"id is a string", "workflow_job", []byte(`{"action":"queued","workflow_job":{"id":"1","run_id":2},"repository":{"full_name":"o/r"}}`), 400},
		{"labels not a list", "workflow_job", []byte(`{"action":"queued","workflow_job":{"id":1,"run_id":2,"labels":"gpu"},"repository":{"full_name":"o/r"}}`), 400},
		{"bad timestamp", "workflow_job", []byte(`{"action":"queued","workflow_job":{"id":1,"run_id":2,"created_at":"yesterday"},"repository":{"full_name":"o/r"}}`), 400},
		{"run without event", "workflow_run", []byte(`{"action":"requested","workflow_run":{"id":1},"repository":{"full_name":"o/r"}}`), 400},
		{"run not json", "workflow_run", []byte("{"), 400},
		{"unknown action", "workflow_job", []byte(`{"action":"exploded","workflow_job":{"id":1,"run_id":2},"repository":{"full_name":"o/r"}}`), 202},
		{"unknown event", "issues", []byte(`{"action":"opened"}`), 202},
	}
	for _, cut := range []int{1, 10, len(queued) / 3, len(queued) / 2, len(queued) - 2} {
		tests = append(tests, tcase{fmt.Sprintf("queued truncated at %d", cut), "workflow_job", queued[:cut], 400})
	}
	for _, cut := range []int{5, len(run) / 2, len(run) - 2} {
		tests = append(tests, tcase{fmt.Sprintf("run truncated at %d", cut), "workflow_run", run[:cut], 400})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			hs := newHarness(t, nil)
			resp := hs.deliver(tc.event, "d", tc.body)
			if resp.Status != tc.wantStatus {
				t.Fatalf("status = %d %s, want %d", resp.Status, resp.Body, tc.wantStatus)
			}
			if len(hs.queue.Jobs()) != 0 {
				t.Error("a malformed delivery enqueued a job")
			}
			if tc.wantStatus == 400 && !strings.Contains(hs.logs.String(), `"reason":"malformed"`) {
				t.Errorf("no log line says why: %s", hs.logs.String())
			}
		})
	}
}

func TestMissingHeaders(t *testing.T) {
	t.Parallel()
	body := examplesOf(t, "workflow_job", "queued")[0].body
	for _, tc := range []struct{ name, event, delivery string }{
		{"no event", "", "d"},
		{"no delivery", "workflow_job", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			hs := newHarness(t, nil)
			if resp := hs.deliver(tc.event, tc.delivery, body); resp.Status != 400 {
				t.Fatalf("status = %d, want 400", resp.Status)
			}
		})
	}
}

// TestReplayedDelivery: a replayed queued delivery is answered and counted
// as a duplicate and leaves the job's record as it was. Its message goes
// out again (the webhook keeps no delivery ids): every message names the
// same job, which scale-up claims once (pkg/scaleup's duplicate delivery
// tests), so it launches nothing twice.
func TestReplayedDelivery(t *testing.T) {
	t.Parallel()
	body := examplesOf(t, "workflow_job", "queued")[0].body
	started := examplesOf(t, "workflow_job", "in_progress")[0].body
	cases := []struct {
		name   string
		before []string // deliveries before the replay, each under its action's delivery id
		replay string   // the action whose delivery is replayed
	}{
		{"replay of queued", []string{"queued"}, "queued"},
		{"replay of queued after the job started", []string{"queued", "in_progress"}, "queued"},
		{"replay of in_progress", []string{"queued", "in_progress"}, "in_progress"},
	}
	bodies := map[string][]byte{"queued": body, "in_progress": started}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			hs := newHarness(t, nil)
			for _, action := range tc.before {
				if resp := hs.deliver("workflow_job", "d-"+action, bodies[action]); resp.Status != 200 || !strings.Contains(resp.Body, "accepted") {
					t.Fatalf("%s: %+v", action, resp)
				}
			}
			jobID := hs.queue.Jobs()[0].JobID
			recorded, err := hs.store.Job(context.Background(), jobID)
			if err != nil {
				t.Fatal(err)
			}
			dups := hs.counter.Get(MetricDuplicate, "")
			second := hs.deliver("workflow_job", "d-"+tc.replay, bodies[tc.replay])
			if second.Status != 200 || !strings.Contains(second.Body, "duplicate") {
				t.Fatalf("replay = %+v, want 200 duplicate", second)
			}
			if hs.counter.Get(MetricDuplicate, "") != dups+1 {
				t.Errorf("duplicate not counted: %v", hs.counter.Snapshot())
			}
			if after, err := hs.store.Job(context.Background(), jobID); err != nil || !reflect.DeepEqual(after, recorded) {
				t.Errorf("replay changed the record:\n%+v\nto\n%+v (%v)", recorded, after, err)
			}
			for _, j := range hs.queue.Jobs() {
				if j.JobID != jobID {
					t.Errorf("message for job %d, want only job %d", j.JobID, jobID)
				}
			}
		})
	}
}

// TestConcurrentReplays: of 32 concurrent copies of one queued delivery,
// exactly one records the job; the others are duplicates. Each enqueues the
// job, which scale-up claims once.
func TestConcurrentReplays(t *testing.T) {
	t.Parallel()
	body := examplesOf(t, "workflow_job", "queued")[0].body
	hs := newHarness(t, nil)
	var wg sync.WaitGroup
	responses := make([]Response, 32)
	for i := range responses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			responses[i] = hs.deliver("workflow_job", "racing-delivery", body)
		}()
	}
	wg.Wait()
	accepted := 0
	for _, r := range responses {
		if r.Status != 200 {
			t.Fatalf("responses = %v", responses)
		}
		if strings.Contains(r.Body, "accepted") {
			accepted++
		}
	}
	if accepted != 1 || hs.counter.Get(MetricDuplicate, "") != 31 {
		t.Errorf("%d accepted, %d duplicates; want 1 and 31", accepted, hs.counter.Get(MetricDuplicate, ""))
	}
	ids := map[int64]bool{}
	for _, j := range hs.queue.Jobs() {
		ids[j.JobID] = true
	}
	if len(ids) != 1 {
		t.Errorf("messages name %d jobs, want 1", len(ids))
	}
}

func TestOutOfOrderLifecycle(t *testing.T) {
	t.Parallel()
	const jobID, runID = 4242, 77
	ev := func(action, started, completed, runner, conclusion string) []byte {
		job := map[string]any{
			"id": jobID, "run_id": runID, "run_attempt": 1, "name": "build", "workflow_name": "CI", "head_branch": "main",
			"labels": []string{"self-hosted", "gpu"}, "created_at": "2026-11-30T07:00:00Z",
		}
		if started != "" {
			job["started_at"] = started
		}
		if completed != "" {
			job["completed_at"] = completed
		}
		if runner != "" {
			job["runner_name"], job["runner_id"] = runner, 99
		}
		if conclusion != "" {
			job["conclusion"] = conclusion
		}
		b, _ := json.Marshal(map[string]any{"action": action, "workflow_job": job, "repository": map[string]any{"full_name": "octo-org/app", "owner": map[string]string{"login": "octo-org"}}})
		return b
	}
	queued := ev("queued", "", "", "", "")
	started := ev("in_progress", "2026-11-30T07:01:00Z", "", "skiff-gpu-4242", "")
	completed := ev("completed", "2026-11-30T07:01:00Z", "2026-11-30T07:09:00Z", "skiff-gpu-4242", "success")
	orders := [][]string{
		{"queued", "in_progress", "completed"},
		{"completed", "in_progress", "queued"},
		{"in_progress", "completed", "queued"},
		{"completed", "queued", "in_progress"},
		{"queued", "completed", "in_progress", "queued"},
	}
	bodies := map[string][]byte{"queued": queued, "in_progress": started, "completed": completed}
	for _, order := range orders {
		t.Run(strings.Join(order, "→"), func(t *testing.T) {
			t.Parallel()
			hs := newHarness(t, nil)
			for i, action := range order {
				if resp := hs.deliver("workflow_job", fmt.Sprintf("d%d", i), bodies[action]); resp.Status != 200 {
					t.Fatalf("%s: status %d", action, resp.Status)
				}
			}
			rec, err := hs.store.Job(context.Background(), jobID)
			if err != nil {
				t.Fatal(err)
			}
			if rec.Status != store.StatusCompleted || rec.Conclusion != "success" || rec.RunnerName != "skiff-gpu-4242" ||
				rec.StartedAt.IsZero() || rec.CompletedAt.IsZero() || rec.QueuedAt.IsZero() || rec.Pool != "gpu" || rec.WorkflowName != "CI" {
				t.Errorf("record = %+v", rec)
			}
		})
	}
}

func TestUnmatchedLabels(t *testing.T) {
	t.Parallel()
	mk := func(labels ...string) []byte {
		b, _ := json.Marshal(map[string]any{"action": "queued", "workflow_job": map[string]any{"id": 1, "run_id": 2, "labels": labels}, "repository": map[string]any{"full_name": "o/r"}})
		return b
	}
	tests := []struct {
		name, reason string
		body         []byte
	}{
		{"GitHub-hosted", "no_pool", mk("macos-latest")},
		{"out of bounds", "out_of_bounds", mk("self-hosted", "skiff/bad")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			hs := newHarness(t, nil)
			resp := hs.deliver("workflow_job", "d", tc.body)
			if resp.Status != 202 || len(hs.queue.Jobs()) != 0 {
				t.Fatalf("status %d, %d jobs", resp.Status, len(hs.queue.Jobs()))
			}
			if hs.counter.Get(MetricUnmatched, tc.reason) != 1 {
				t.Errorf("not counted by reason: %v", hs.counter.Snapshot())
			}
			if !strings.Contains(hs.logs.String(), `"reason":"`+tc.reason+`"`) {
				t.Errorf("reason not logged: %s", hs.logs.String())
			}
			if _, err := hs.store.Job(context.Background(), 1); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("unmatched job recorded: %v", err)
			}
		})
	}
	t.Run("lifecycle of a job skiff does not serve is ignored", func(t *testing.T) {
		t.Parallel()
		hs := newHarness(t, nil)
		b, _ := json.Marshal(map[string]any{"action": "completed", "workflow_job": map[string]any{"id": 1, "run_id": 2, "labels": []string{"macos-latest"}}, "repository": map[string]any{"full_name": "o/r"}})
		if resp := hs.deliver("workflow_job", "d", b); resp.Status != 202 {
			t.Fatalf("status %d", resp.Status)
		}
		if _, err := hs.store.Job(context.Background(), 1); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("foreign job recorded: %v", err)
		}
	})
}

func TestAllowList(t *testing.T) {
	t.Parallel()
	body := examplesOf(t, "workflow_job", "queued")[0].body   // Codertocat/Hello-World
	run := examplesOf(t, "workflow_run", "requested")[0].body // octo-org/octo-repo
	tests := []struct {
		name      string
		entries   []string
		event     string
		body      []byte
		wantState int
	}{
		{"empty refuses all", nil, "workflow_job", body, 403},
		{"empty refuses runs", nil, "workflow_run", run, 403},
		{"star allows every owner", []string{"*"}, "workflow_job", body, 200},
		{"star beside entries allows every owner", []string{"octo-org", "*"}, "workflow_job", body, 200},
		{"owner allowed", []string{"codertocat"}, "workflow_job", body, 200},
		{"repository allowed", []string{"Codertocat/Hello-World"}, "workflow_job", body, 200},
		{"other owner refused", []string{"octo-org"}, "workflow_job", body, 403},
		{"other repository of the owner refused", []string{"Codertocat/other"}, "workflow_job", body, 403},
		{"run refused", []string{"codertocat"}, "workflow_run", run, 403},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			allow, err := ParseAllowList(tc.entries)
			if err != nil {
				t.Fatal(err)
			}
			hs := newHarness(t, func(o *Options) { o.Allow = allow })
			resp := hs.deliver(tc.event, "d", tc.body)
			if resp.Status != tc.wantState {
				t.Fatalf("status = %d, want %d", resp.Status, tc.wantState)
			}
			if tc.wantState == 403 && (len(hs.queue.Jobs()) != 0 || !strings.Contains(hs.logs.String(), "allow-list")) {
				t.Errorf("refusal enqueued or was not logged: %s", hs.logs.String())
			}
		})
	}
	for _, bad := range []string{"/x", "a/b/c", "a/", " / ", "-a", "a--b", "a/..", "a/b c", "**", strings.Repeat("a", 40)} {
		if _, err := ParseAllowList([]string{bad}); err == nil {
			t.Errorf("ParseAllowList(%q) accepted a malformed entry", bad)
		}
	}
}

func TestFailuresAnswer503AndCanBeRedelivered(t *testing.T) {
	t.Parallel()
	queued := examplesOf(t, "workflow_job", "queued")[0].body
	started := examplesOf(t, "workflow_job", "in_progress")[0].body
	run := examplesOf(t, "workflow_run", "requested")[0].body
	boom := errors.New("connection reset by peer")

	t.Run("queue down", func(t *testing.T) {
		t.Parallel()
		hs := newHarness(t, nil)
		hs.queue.SetErr(boom)
		resp := hs.deliver("workflow_job", "d1", queued)
		if resp.Status != 503 || strings.Contains(resp.Body, "connection reset") {
			t.Fatalf("response = %+v", resp)
		}
		hs.queue.SetErr(nil)
		if resp := hs.deliver("workflow_job", "d1", queued); resp.Status != 200 || len(hs.queue.Jobs()) != 1 {
			t.Fatalf("redelivery: %+v, %d jobs", resp, len(hs.queue.Jobs()))
		}
		if hs.counter.Get(MetricFailed, "queue") != 1 {
			t.Errorf("failure not counted: %v", hs.counter.Snapshot())
		}
	})
	t.Run("a job the queue refuses as invalid is not retried", func(t *testing.T) {
		t.Parallel()
		hs := newHarness(t, func(o *Options) {
			o.Queue = sendFunc(func(context.Context, queue.Job) error {
				return fmt.Errorf("%w: message body is 70000 bytes", queue.ErrInvalidJob)
			})
		})
		if resp := hs.deliver("workflow_job", "d6", queued); resp.Status != 400 {
			t.Fatalf("status = %d, want 400", resp.Status)
		}
		if hs.counter.Get(MetricRejected, "malformed") != 1 || !strings.Contains(hs.logs.String(), "cannot be queued") {
			t.Errorf("refusal not counted or logged: %v", hs.counter.Snapshot())
		}
		if resp := hs.deliver("workflow_job", "d6", queued); resp.Status != 400 {
			t.Errorf("redelivery = %+v, want 400 again", resp)
		}
	})
	t.Run("store down for lifecycle", func(t *testing.T) {
		t.Parallel()
		hs := newHarness(t, nil)
		hs.store.set(func(f *faultyStore) { f.recordErr = boom })
		if resp := hs.deliver("workflow_job", "d2", started); resp.Status != 503 {
			t.Fatalf("status = %d", resp.Status)
		}
		hs.store.set(func(f *faultyStore) { f.recordErr = nil })
		if resp := hs.deliver("workflow_job", "d2", started); resp.Status != 200 {
			t.Fatalf("redelivery status = %d", resp.Status)
		}
	})
	t.Run("store down for run", func(t *testing.T) {
		t.Parallel()
		hs := newHarness(t, nil)
		hs.store.set(func(f *faultyStore) { f.runErr = boom })
		if resp := hs.deliver("workflow_run", "d3", run); resp.Status != 503 {
			t.Fatalf("status = %d", resp.Status)
		}
	})
	t.Run("runner ledger down for lifecycle", func(t *testing.T) {
		t.Parallel()
		hs := newHarness(t, func(o *Options) {
			o.Runners = runnersFunc(func(context.Context, string, provisioning.State, time.Time, int64) error { return boom })
		})
		if resp := hs.deliver("workflow_job", "d4", started); resp.Status != 503 {
			t.Fatalf("status = %d, want 503", resp.Status)
		}
	})
	t.Run("queued record failing after enqueue is not a failure", func(t *testing.T) {
		t.Parallel()
		hs := newHarness(t, nil)
		hs.store.set(func(f *faultyStore) { f.recordErr = boom })
		if resp := hs.deliver("workflow_job", "d5", queued); resp.Status != 200 || len(hs.queue.Jobs()) != 1 {
			t.Fatalf("status = %d, %d jobs", resp.Status, len(hs.queue.Jobs()))
		}
	})
}

func TestPing(t *testing.T) {
	t.Parallel()
	hs := newHarness(t, nil)
	if resp := hs.deliver("ping", "p", examplesOf(t, "ping", "")[0].body); resp.Status != 200 {
		t.Fatalf("status = %d", resp.Status)
	}
}

func TestNewFailsClosed(t *testing.T) {
	t.Parallel()
	base := Options{Secrets: [][]byte{[]byte("s")}, Router: testRouter, Queue: &queue.Memory{}, Store: memoryStore(fixedNow),
		Runners: store.NewLedgerMemory(nil)}
	tests := []struct {
		name   string
		mutate func(*Options)
	}{
		{"no secret", func(o *Options) { o.Secrets = nil }},
		{"empty secret", func(o *Options) { o.Secrets = [][]byte{{}} }},
		{"no router", func(o *Options) { o.Router = nil }},
		{"no queue", func(o *Options) { o.Queue = nil }},
		{"no store", func(o *Options) { o.Store = nil }},
		{"no runner ledger", func(o *Options) { o.Runners = nil }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := base
			tc.mutate(&o)
			if _, err := New(o); err == nil {
				t.Fatal("New accepted an incomplete configuration")
			}
		})
	}
	if _, err := New(base); err != nil {
		t.Fatal(err)
	}
}

// TestSecretNeverLogged runs every kind of delivery, good and bad, with a
// canary secret and a debug-level logger, and checks no output carries it.
func TestSecretNeverLogged(t *testing.T) {
	t.Parallel()
	hs := newHarness(t, nil)
	for i, ex := range loadExamples(t) {
		for _, sig := range []string{Sign(hs.secret, ex.body), Sign([]byte("wrong"), ex.body), "", "sha256=" + canarySecret} {
			resp := hs.h.Handle(context.Background(), Request{Event: ex.event, Delivery: fmt.Sprint(i), Signature: sig, Body: ex.body})
			if strings.Contains(resp.Body, canarySecret) {
				t.Fatalf("response carries the secret: %s", resp.Body)
			}
		}
	}
	logs := hs.logs.String()
	if strings.Contains(logs, canarySecret) {
		t.Fatal("the secret reached the logs")
	}
	if !strings.Contains(logs, `"delivery_id"`) {
		t.Fatal("the logs were not captured, so the check proves nothing")
	}
}

func TestLogFields(t *testing.T) {
	t.Parallel()
	hs := newHarness(t, nil)
	hs.deliver("workflow_job", "delivery-42", examplesOf(t, "workflow_job", "queued")[0].body)
	var line map[string]any
	for _, l := range strings.Split(strings.TrimSpace(hs.logs.String()), "\n") {
		if strings.Contains(l, "workflow_job accepted") {
			_ = json.Unmarshal([]byte(l), &line)
		}
	}
	for _, k := range []string{"delivery_id", "event", "action", "job_id", "repository", "pool"} {
		if _, ok := line[k]; !ok {
			t.Errorf("log line lacks %s: %v", k, line)
		}
	}
}

// TestLogLinesBounded sends hostile but signed deliveries and checks that no
// log line they cause is larger than maxLogLine: a job's labels, names and
// error details are outside input and must not blow up the logs.
func TestLogLinesBounded(t *testing.T) {
	t.Parallel()
	const maxLogLine = 4 << 10
	mk := func(repo string, labels []string) []byte {
		b, _ := json.Marshal(map[string]any{"action": "queued",
			"workflow_job": map[string]any{"id": 1, "run_id": 2, "run_attempt": 1, "labels": labels},
			"repository":   map[string]any{"full_name": repo, "private": true}, "installation": map[string]any{"id": 7}})
		return b
	}
	many := make([]string, 10000)
	for i := range many {
		many[i] = fmt.Sprintf("label-%05d", i)
	}
	many[0] = "macos-latest" // routes nowhere, so the labels are logged
	long := make([]string, 100)
	for i := range long {
		long[i] = strings.Repeat(string(rune('a'+i%26)), 256)
	}
	tests := []struct {
		name string
		body []byte
	}{
		{"10,000 distinct labels", mk("o/r", many)},
		{"100 labels of 256 bytes routing nowhere", mk("o/r", append([]string{"macos-latest"}, long[:99]...))},
		{"100 labels of 256 bytes accepted", mk("o/r", long)},
		{"a huge repository name", mk("o/"+strings.Repeat("r", 100000), []string{"self-hosted"})},
		{"a huge label out of bounds", mk("o/r", []string{"skiff/bad", strings.Repeat("x", 60000)})},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			hs := newHarness(t, nil)
			hs.deliver("workflow_job", "d", tc.body)
			lines := strings.Split(strings.TrimSpace(hs.logs.String()), "\n")
			if len(lines) == 0 || lines[0] == "" {
				t.Fatal("no log line: the check proves nothing")
			}
			for _, l := range lines {
				if len(l) > maxLogLine {
					t.Errorf("a log line of %d bytes (limit %d): %.200s…", len(l), maxLogLine, l)
				}
			}
		})
	}
}

func TestInstallations(t *testing.T) {
	t.Parallel()
	queued1 := examplesOf(t, "workflow_job", "queued")[0].body // installation 3456996
	queued2 := examplesOf(t, "workflow_job", "queued")[1].body // installation 23154469
	noInst := examplesOf(t, "workflow_job", "in_progress")[0].body
	if bytes.Contains(noInst, []byte(`"installation"`)) {
		t.Fatal("fixture changed: workflow_job.in_progress.1 should name no installation")
	}
	tests := []struct {
		name    string
		entries []string
		body    []byte
		want    int
	}{
		{"listed", []string{"3456996"}, queued1, 200},
		{"one of several", []string{"1", "23154469"}, queued2, 200},
		{"not listed", []string{"3456996"}, queued2, 403},
		{"none named, list given", []string{"3456996"}, noInst, 403},
		{"star allows every installation", []string{"*"}, queued2, 200},
		{"star allows a delivery naming none", []string{"*"}, noInst, 200},
		{"empty refuses all", nil, queued1, 403},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			hs := newHarness(t, func(o *Options) { o.Installations = mustInstallations(t, tc.entries...) })
			resp := hs.deliver("workflow_job", "d", tc.body)
			if resp.Status != tc.want {
				t.Fatalf("status = %d %s, want %d", resp.Status, resp.Body, tc.want)
			}
			if tc.want == 403 {
				if len(hs.queue.Jobs()) != 0 || hs.counter.Get(MetricRejected, "installation") != 1 ||
					!strings.Contains(hs.logs.String(), "SKIFF_ALLOWED_INSTALLATIONS") {
					t.Errorf("refusal enqueued, or was not counted and logged: %v\n%s", hs.counter.Snapshot(), hs.logs.String())
				}
			}
		})
	}
	for _, bad := range []string{"0", "-1", "abc", "1.5", "9007199254740992"} {
		if _, err := ParseInstallationList([]string{bad}); err == nil {
			t.Errorf("ParseInstallationList(%q) accepted a malformed entry", bad)
		}
	}
}

// TestVisibilityPolicy runs the handler with the default policies, which
// admit private and internal repositories only.
func TestVisibilityPolicy(t *testing.T) {
	t.Parallel()
	mk := func(action string, repo map[string]any) []byte {
		repo["full_name"] = "octo-org/app"
		b, _ := json.Marshal(map[string]any{"action": action,
			"workflow_job": map[string]any{"id": 11, "run_id": 22, "run_attempt": 1, "labels": []string{"self-hosted"}},
			"repository":   repo})
		return b
	}
	tests := []struct {
		name   string
		body   []byte
		want   int
		reason string // counted under WebhookUnmatched
	}{
		{"private by visibility", mk("queued", map[string]any{"visibility": "private", "private": true}), 200, ""},
		{"internal", mk("queued", map[string]any{"visibility": "internal", "private": true}), 200, ""},
		{"private by the private flag alone (older GHES)", mk("queued", map[string]any{"private": true}), 200, ""},
		{"public", mk("queued", map[string]any{"visibility": "public", "private": false}), 202, "public_repository"},
		{"public by the private flag alone", mk("queued", map[string]any{"private": false}), 202, "public_repository"},
		{"visibility unknown counts as public", mk("queued", map[string]any{}), 202, "public_repository"},
		{"visibility field wins over private", mk("queued", map[string]any{"visibility": "public", "private": true}), 202, "public_repository"},
		{"lifecycle of a refused public job is ignored", mk("in_progress", map[string]any{"visibility": "public"}), 202, ""},
	}
	for _, ex := range examplesOf(t, "workflow_job", "queued") {
		tests = append(tests, struct {
			name   string
			body   []byte
			want   int
			reason string
		}{"published example " + ex.file, ex.body, 202, "public_repository"})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			hs := newHarness(t, func(o *Options) { o.Policies = nil })
			resp := hs.deliver("workflow_job", "d", tc.body)
			if resp.Status != tc.want {
				t.Fatalf("status = %d %s, want %d", resp.Status, resp.Body, tc.want)
			}
			if tc.want != 200 {
				if n := len(hs.queue.Jobs()); n != 0 {
					t.Errorf("refused job enqueued %d messages", n)
				}
				if _, err := hs.store.Job(context.Background(), 11); !errors.Is(err, store.ErrNotFound) {
					t.Errorf("refused job recorded: %v", err)
				}
			}
			if tc.reason != "" {
				if hs.counter.Get(MetricUnmatched, tc.reason) != 1 {
					t.Errorf("not counted as %s: %v", tc.reason, hs.counter.Snapshot())
				}
				if !strings.Contains(hs.logs.String(), `"reason":"`+tc.reason+`"`) {
					t.Errorf("reason not logged: %s", hs.logs.String())
				}
			}
		})
	}
}

// TestHostileInput sends signed deliveries whose names, ids and labels break
// GitHub's rules or skiff's bounds: each is refused with 400, counted and
// logged as malformed, and nothing is enqueued or recorded.
func TestHostileInput(t *testing.T) {
	t.Parallel()
	job := func(mutate func(wj, repo, root map[string]any)) []byte {
		wj := map[string]any{"id": 1, "run_id": 2, "run_attempt": 1, "labels": []string{"self-hosted"}}
		repo := map[string]any{"full_name": "octo-org/app", "visibility": "private"}
		root := map[string]any{"action": "queued", "workflow_job": wj, "repository": repo, "installation": map[string]any{"id": 5}}
		mutate(wj, repo, root)
		b, _ := json.Marshal(root)
		return b
	}
	run := func(mutate func(wr, repo map[string]any)) []byte {
		wr := map[string]any{"id": 9, "run_attempt": 1, "event": "pull_request", "head_repository": map[string]any{"full_name": "someone/app"}}
		repo := map[string]any{"full_name": "octo-org/app"}
		mutate(wr, repo)
		b, _ := json.Marshal(map[string]any{"action": "requested", "workflow_run": wr, "repository": repo})
		return b
	}
	name := func(n string) func(wj, repo, root map[string]any) {
		return func(_, repo, _ map[string]any) { repo["full_name"] = n }
	}
	labels := func(n, size int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("%0*d", size, i)
		}
		return out
	}
	tests := []struct {
		name, event string
		body        []byte
		detail      string // in the logged detail
	}{
		{"owner with a leading hyphen", "workflow_job", job(name("-octo/app")), "owner"},
		{"owner with a trailing hyphen", "workflow_job", job(name("octo-/app")), "owner"},
		{"owner with a double hyphen", "workflow_job", job(name("oc--to/app")), "owner"},
		{"owner with an underscore", "workflow_job", job(name("octo_org/app")), "owner"},
		{"owner of 40 characters", "workflow_job", job(name(strings.Repeat("a", 40) + "/app")), "owner"},
		{"owner with a quote", "workflow_job", job(name(`oc"to/app`)), "owner"},
		{"owner with a newline", "workflow_job", job(name("octo\n/app")), "owner"},
		{"owner with a command substitution", "workflow_job", job(name("$(id)/app")), "owner"},
		{"owner in another script", "workflow_job", job(name("оcto/app")), "owner"},
		{"repository named .", "workflow_job", job(name("octo/.")), "name"},
		{"repository named ..", "workflow_job", job(name("octo/..")), "name"},
		{"repository with a slash", "workflow_job", job(name("octo/a/b")), "name"},
		{"repository with a space", "workflow_job", job(name("octo/a b")), "name"},
		{"repository with a backtick", "workflow_job", job(name("octo/`id`")), "name"},
		{"repository with a backslash", "workflow_job", job(name(`octo/a\b`)), "name"},
		{"repository of 101 characters", "workflow_job", job(name("octo/" + strings.Repeat("r", 101))), "name"},
		{"job id zero", "workflow_job", job(func(wj, _, _ map[string]any) { wj["id"] = 0 }), "workflow_job.id"},
		{"job id negative", "workflow_job", job(func(wj, _, _ map[string]any) { wj["id"] = -5 }), "workflow_job.id"},
		{"job id past 2^53", "workflow_job", job(func(wj, _, _ map[string]any) { wj["id"] = int64(1) << 60 }), "workflow_job.id"},
		{"job id past int64", "workflow_job", []byte(`{"action":"queued","workflow_job":{"id":99999999999999999999,"run_id":2},"repository":{"full_name":"o/r"}}`), "wrong type"},
		{"run id negative", "workflow_job", job(func(wj, _, _ map[string]any) { wj["run_id"] = -1 }), "workflow_job.run_id"},
		{"run attempt negative", "workflow_job", job(func(wj, _, _ map[string]any) { wj["run_attempt"] = -1 }), "run_attempt"},
		{"run attempt absurd", "workflow_job", job(func(wj, _, _ map[string]any) { wj["run_attempt"] = 1000000 }), "run_attempt"},
		{"runner id negative", "workflow_job", job(func(wj, _, _ map[string]any) { wj["runner_id"] = -3 }), "runner_id"},
		{"installation id negative", "workflow_job", job(func(_, _, root map[string]any) { root["installation"] = map[string]any{"id": -1} }), "installation.id"},
		{"101 labels", "workflow_job", job(func(wj, _, _ map[string]any) { wj["labels"] = labels(101, 3) }), "at most 100"},
		{"10,000 labels", "workflow_job", job(func(wj, _, _ map[string]any) { wj["labels"] = labels(10000, 5) }), "at most 100"},
		{"a label of 257 bytes", "workflow_job", job(func(wj, _, _ map[string]any) { wj["labels"] = labels(1, 257) }), "more than 256"},
		{"run from a malformed head repository", "workflow_run", run(func(wr, _ map[string]any) { wr["head_repository"] = map[string]any{"full_name": "some one/app"} }), "head_repository"},
		{"run id past 2^53", "workflow_run", run(func(wr, _ map[string]any) { wr["id"] = int64(1) << 62 }), "workflow_run.id"},
		{"run attempt absurd", "workflow_run", run(func(wr, _ map[string]any) { wr["run_attempt"] = 5000 }), "run_attempt"},
		{"run event of a kilobyte", "workflow_run", run(func(wr, _ map[string]any) { wr["event"] = strings.Repeat("e", 1024) }), "workflow_run.event"},
		{"run repository with a newline", "workflow_run", run(func(_, repo map[string]any) { repo["full_name"] = "octo/app\nx" }), "name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			hs := newHarness(t, nil)
			resp := hs.deliver(tc.event, "d", tc.body)
			if resp.Status != 400 {
				t.Fatalf("status = %d %s, want 400", resp.Status, resp.Body)
			}
			if len(hs.queue.Jobs()) != 0 {
				t.Error("a malformed delivery enqueued a job")
			}
			if hs.counter.Get(MetricRejected, "malformed") != 1 {
				t.Errorf("not counted as malformed: %v", hs.counter.Snapshot())
			}
			logs := hs.logs.String()
			if !strings.Contains(logs, `"reason":"malformed"`) || !strings.Contains(logs, tc.detail) {
				t.Errorf("the log does not say why (want %q): %.2000s", tc.detail, logs)
			}
		})
	}
	// The edges that are allowed.
	for _, ok := range []struct {
		name string
		body []byte
	}{
		{"owner of 39 characters, repository of 100", job(name(strings.Repeat("a", 39) + "/" + strings.Repeat("r", 100)))},
		{"dots, dashes and underscores", job(name("a-b-1/.github_x-y.z"))},
		{"100 labels of 256 bytes", job(func(wj, _, _ map[string]any) { wj["labels"] = labels(100, 256) })},
		{"run_attempt absent (older payloads)", job(func(wj, _, _ map[string]any) { delete(wj, "run_attempt") })},
		{"run_attempt 100", job(func(wj, _, _ map[string]any) { wj["run_attempt"] = 100 })},
	} {
		t.Run("allowed: "+ok.name, func(t *testing.T) {
			t.Parallel()
			hs := newHarness(t, nil)
			if resp := hs.deliver("workflow_job", "d", ok.body); resp.Status != 200 {
				t.Fatalf("status = %d %s, want 200\n%s", resp.Status, resp.Body, hs.logs.String())
			}
		})
	}
}

// TestRunRecordsForkFacts checks that a workflow_run delivery records what
// the fork policy needs: the head repository, whether it is a fork of the
// repository, and who triggered the run.
func TestRunRecordsForkFacts(t *testing.T) {
	t.Parallel()
	mk := func(head any, event string) []byte {
		wr := map[string]any{"id": 31, "run_attempt": 1, "event": event, "name": "CI",
			"actor": map[string]any{"login": "author"}, "triggering_actor": map[string]any{"login": "retrier"}}
		if head != nil {
			wr["head_repository"] = head
		}
		b, _ := json.Marshal(map[string]any{"action": "requested", "workflow_run": wr,
			"repository": map[string]any{"full_name": "Octo-Org/App", "visibility": "private"}})
		return b
	}
	tests := []struct {
		name     string
		body     []byte
		wantHead string
		wantFork bool
	}{
		{"push in the repository", mk(map[string]any{"full_name": "Octo-Org/App", "fork": false}, "push"), "Octo-Org/App", false},
		{"same repository, other case", mk(map[string]any{"full_name": "octo-org/app", "fork": true}, "pull_request"), "octo-org/app", false},
		{"pull request from a fork", mk(map[string]any{"full_name": "stranger/app", "fork": true}, "pull_request"), "stranger/app", true},
		{"pull_request_target from a fork", mk(map[string]any{"full_name": "stranger/app", "fork": true}, "pull_request_target"), "stranger/app", true},
		{"head repository deleted", mk(nil, "pull_request"), "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			hs := newHarness(t, nil)
			if resp := hs.deliver("workflow_run", "d", tc.body); resp.Status != 200 {
				t.Fatalf("status = %d %s", resp.Status, resp.Body)
			}
			run, err := hs.store.Run(context.Background(), 31)
			if err != nil {
				t.Fatal(err)
			}
			if run.HeadRepository != tc.wantHead || run.FromFork != tc.wantFork || run.Actor != "retrier" {
				t.Errorf("run = %+v, want head %q fork %v actor retrier", run, tc.wantHead, tc.wantFork)
			}
			// What scale-up will hand to the pure decision.
			trigger := &pool.Trigger{Event: run.Event, Fork: run.FromFork}
			err = pool.DefaultPolicy.Admit(pool.Facts{Visibility: pool.VisibilityPrivate, Trigger: trigger})
			if got := pool.Reason(err) == pool.ReasonForkPullRequest; got != tc.wantFork {
				t.Errorf("default policy refuses = %v (%v), want %v", got, err, tc.wantFork)
			}
		})
	}
}

// memoryStore is an in-memory store whose records expire by the test's clock.
func memoryStore(now time.Time) *store.Memory {
	m := store.NewMemory()
	m.SetClock(func() time.Time { return now })
	return m
}
