package webhook

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

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

// TestHostileInput sends signed deliveries whose names, ids and labels break
// GitHub's rules or skiff's bounds: each is refused with 400, counted and
// logged as malformed, and nothing is enqueued or recorded.
func TestHostileInput(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, event string
		body        []byte
		detail      string // in the logged detail
	}{
		{"owner with a leading hyphen", "workflow_job", hostileJob(repoNamed("-octo/app")), "owner"},
		{"owner with a trailing hyphen", "workflow_job", hostileJob(repoNamed("octo-/app")), "owner"},
		{"owner with a double hyphen", "workflow_job", hostileJob(repoNamed("oc--to/app")), "owner"},
		{"owner with an underscore", "workflow_job", hostileJob(repoNamed("octo_org/app")), "owner"},
		{"owner of 40 characters", "workflow_job", hostileJob(repoNamed(strings.Repeat("a", 40) + "/app")), "owner"},
		{"owner with a quote", "workflow_job", hostileJob(repoNamed(`oc"to/app`)), "owner"},
		{"owner with a newline", "workflow_job", hostileJob(repoNamed("octo\n/app")), "owner"},
		{"owner with a command substitution", "workflow_job", hostileJob(repoNamed("$(id)/app")), "owner"},
		{"owner in another script", "workflow_job", hostileJob(repoNamed("оcto/app")), "owner"},
		{"repository named .", "workflow_job", hostileJob(repoNamed("octo/.")), "name"},
		{"repository named ..", "workflow_job", hostileJob(repoNamed("octo/..")), "name"},
		{"repository with a slash", "workflow_job", hostileJob(repoNamed("octo/a/b")), "name"},
		{"repository with a space", "workflow_job", hostileJob(repoNamed("octo/a b")), "name"},
		{"repository with a backtick", "workflow_job", hostileJob(repoNamed("octo/`id`")), "name"},
		{"repository with a backslash", "workflow_job", hostileJob(repoNamed(`octo/a\b`)), "name"},
		{"repository of 101 characters", "workflow_job", hostileJob(repoNamed("octo/" + strings.Repeat("r", 101))), "name"},
		{"job id zero", "workflow_job", hostileJob(func(wj, _, _ map[string]any) { wj["id"] = 0 }), "workflow_job.id"},
		{"job id negative", "workflow_job", hostileJob(func(wj, _, _ map[string]any) { wj["id"] = -5 }), "workflow_job.id"},
		{"job id past 2^53", "workflow_job", hostileJob(func(wj, _, _ map[string]any) { wj["id"] = int64(1) << 60 }), "workflow_job.id"},
		{"job id past int64", "workflow_job", []byte(`{"action":"queued","workflow_job":{"id":99999999999999999999,"run_id":2},"repository":{"full_name":"o/r"}}`), "wrong type"},
		{"run id negative", "workflow_job", hostileJob(func(wj, _, _ map[string]any) { wj["run_id"] = -1 }), "workflow_job.run_id"},
		{"run attempt negative", "workflow_job", hostileJob(func(wj, _, _ map[string]any) { wj["run_attempt"] = -1 }), "run_attempt"},
		{"run attempt absurd", "workflow_job", hostileJob(func(wj, _, _ map[string]any) { wj["run_attempt"] = 1000000 }), "run_attempt"},
		{"runner id negative", "workflow_job", hostileJob(func(wj, _, _ map[string]any) { wj["runner_id"] = -3 }), "runner_id"},
		{"installation id negative", "workflow_job", hostileJob(func(_, _, root map[string]any) { root["installation"] = map[string]any{"id": -1} }), "installation.id"},
		{"101 labels", "workflow_job", hostileJob(func(wj, _, _ map[string]any) { wj["labels"] = numberedLabels(101, 3) }), "at most 100"},
		{"10,000 labels", "workflow_job", hostileJob(func(wj, _, _ map[string]any) { wj["labels"] = numberedLabels(10000, 5) }), "at most 100"},
		{"a label of 257 bytes", "workflow_job", hostileJob(func(wj, _, _ map[string]any) { wj["labels"] = numberedLabels(1, 257) }), "more than 256"},
		{"run from a malformed head repository", "workflow_run", hostileRun(func(wr, _ map[string]any) { wr["head_repository"] = map[string]any{"full_name": "some one/app"} }), "head_repository"},
		{"run id past 2^53", "workflow_run", hostileRun(func(wr, _ map[string]any) { wr["id"] = int64(1) << 62 }), "workflow_run.id"},
		{"run attempt absurd", "workflow_run", hostileRun(func(wr, _ map[string]any) { wr["run_attempt"] = 5000 }), "run_attempt"},
		{"run event of a kilobyte", "workflow_run", hostileRun(func(wr, _ map[string]any) { wr["event"] = strings.Repeat("e", 1024) }), "workflow_run.event"},
		{"run repository with a newline", "workflow_run", hostileRun(func(_, repo map[string]any) { repo["full_name"] = "octo/app\nx" }), "name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			hs := newHarness(t, nil)
			checkRefusedMalformed(t, hs, hs.deliver(tc.event, "d", tc.body), tc.detail)
		})
	}
	// The edges that are allowed.
	for _, ok := range []struct {
		name string
		body []byte
	}{
		{"owner of 39 characters, repository of 100", hostileJob(repoNamed(strings.Repeat("a", 39) + "/" + strings.Repeat("r", 100)))},
		{"dots, dashes and underscores", hostileJob(repoNamed("a-b-1/.github_x-y.z"))},
		{"100 labels of 256 bytes", hostileJob(func(wj, _, _ map[string]any) { wj["labels"] = numberedLabels(100, 256) })},
		{"run_attempt absent (older payloads)", hostileJob(func(wj, _, _ map[string]any) { delete(wj, "run_attempt") })},
		{"run_attempt 100", hostileJob(func(wj, _, _ map[string]any) { wj["run_attempt"] = 100 })},
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

// hostileJob is a queued workflow_job payload, edited by
// mutate before it is encoded.
func hostileJob(mutate func(wj, repo, root map[string]any)) []byte {
	wj := map[string]any{"id": 1, "run_id": 2, "run_attempt": 1, "labels": []string{"self-hosted"}}
	repo := map[string]any{"full_name": "octo-org/app", "visibility": "private"}
	root := map[string]any{"action": "queued", "workflow_job": wj, "repository": repo, "installation": map[string]any{"id": 5}}
	mutate(wj, repo, root)
	b, _ := json.Marshal(root)
	return b
}

// hostileRun is a requested workflow_run payload of a fork, edited by
// mutate before it is encoded.
func hostileRun(mutate func(wr, repo map[string]any)) []byte {
	wr := map[string]any{"id": 9, "run_attempt": 1, "event": "pull_request", "head_repository": map[string]any{"full_name": "someone/app"}}
	repo := map[string]any{"full_name": "octo-org/app"}
	mutate(wr, repo)
	b, _ := json.Marshal(map[string]any{"action": "requested", "workflow_run": wr, "repository": repo})
	return b
}

// repoNamed is a hostileJob edit that names the repository n.
func repoNamed(n string) func(wj, repo, root map[string]any) {
	return func(_, repo, _ map[string]any) { repo["full_name"] = n }
}

// numberedLabels is n labels, each its index padded with zeros to size
// bytes.
func numberedLabels(n, size int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%0*d", size, i)
	}
	return out
}

// checkRefusedMalformed checks that resp refused the delivery with 400,
// that nothing was enqueued, and that the refusal was counted and logged
// as malformed with detail.
func checkRefusedMalformed(t *testing.T, hs *harness, resp Response, detail string) {
	t.Helper()
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
	if !strings.Contains(logs, `"reason":"malformed"`) || !strings.Contains(logs, detail) {
		t.Errorf("the log does not say why (want %q): %.2000s", detail, logs)
	}
}

// TestJSONProblem pins the words a malformed payload is logged with: where
// the JSON broke, or which field had the wrong type, never the payload.
func TestJSONProblem(t *testing.T) {
	tests := []struct {
		name, body, want string
	}{
		{"truncated", `{"action":"queued","workflow_job":{"id":1`, "truncated JSON"},
		{"not JSON", `{"action":queued}`, "invalid JSON at byte 10"},
		{"a string for an id", `{"action":"queued","workflow_job":{"id":"7"}}`, "field workflow_job.id has the wrong type"},
		{"an id past int64", `{"action":"queued","workflow_job":{"id":99999999999999999999}}`, "field workflow_job.id has the wrong type"},
		{"labels not a list", `{"action":"queued","workflow_job":{"labels":"linux"}}`, "field workflow_job.labels has the wrong type"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseWorkflowJob([]byte(tc.body))
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.Is(err, ErrMalformed) || !strings.HasSuffix(err.Error(), tc.want) {
				t.Errorf("error = %q, want ErrMalformed ending %q", err, tc.want)
			}
		})
	}
}
