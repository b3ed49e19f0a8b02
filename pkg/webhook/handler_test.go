package webhook

import (
	"context"
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
	"github.com/skiffci/skiff/pkg/allow"
	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/pool"
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

func (f *faultyStore) RecordJob(ctx context.Context, j store.JobRecord) (bool, error) {
	f.mu.Lock()
	err := f.recordErr
	f.mu.Unlock()
	if err != nil {
		return false, err
	}
	return f.Store.RecordJob(ctx, j)
}

func (f *faultyStore) RecordRun(ctx context.Context, r store.RunRecord) error {
	f.mu.Lock()
	err := f.runErr
	f.mu.Unlock()
	if err != nil {
		return err
	}
	return f.Store.RecordRun(ctx, r)
}

// runnersFunc adapts a function to Runners.
type runnersFunc func(ctx context.Context, name string, to ledger.State, at time.Time, job int64) error

func (f runnersFunc) Advance(ctx context.Context, name string, to ledger.State, at time.Time, job int64) error {
	return f(ctx, name, to, at, job)
}

func (f runnersFunc) Runner(context.Context, string) (ledger.Runner, error) {
	return ledger.Runner{}, store.ErrNotFound
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

func mustAllow(t testing.TB, entries ...string) allow.List {
	t.Helper()
	a, err := allow.Parse(entries)
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
	ledger  *ledger.Memory
	counter *telemetry.Memory
	logs    *testenv.SyncBuffer
	secret  []byte
}

func newHarness(t testing.TB, mutate func(*Options)) *harness {
	t.Helper()
	hs := &harness{
		queue:   &queue.Memory{},
		store:   &faultyStore{Store: memoryStore(fixedNow)},
		ledger:  ledger.NewMemory(func() time.Time { return fixedNow }),
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
			var raw exampleFields
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
				checkExampleJob(t, hs, ex, raw)
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

// exampleFields are the fields of a published example that say what its
// delivery must record and enqueue.
type exampleFields struct {
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

// checkExampleJob checks what the delivered workflow_job example ex did:
// its job recorded with its action, pool and runner, and one message
// enqueued for a queued action, none for another.
func checkExampleJob(t *testing.T, hs *harness, ex example, raw exampleFields) {
	t.Helper()
	jobs := hs.queue.Jobs()
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
			o.Runners = runnersFunc(func(context.Context, string, ledger.State, time.Time, int64) error { return boom })
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
		Runners: ledger.NewMemory(nil)}
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

// memoryStore is an in-memory store whose records expire by the test's clock.
func memoryStore(now time.Time) *store.Memory {
	m := store.NewMemory()
	m.SetClock(func() time.Time { return now })
	return m
}
