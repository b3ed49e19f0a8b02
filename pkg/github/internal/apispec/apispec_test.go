package apispec_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/github/internal/apispec"
)

// olderExamples are published examples older than the schema: they lack
// fields GitHub added since (TOOLS.md notes the workflow_job one).
var olderExamples = map[string]string{
	"workflow_job.in_progress.1.json": "missing properties 'run_attempt', 'workflow_name', 'head_branch', 'created_at'",
	"workflow_run.completed.1.json":   "missing properties 'actor', 'path', 'triggering_actor'",
}

// TestPublishedExamplesValidate checks the validator itself on GitHub's own
// webhook examples (vendored under testdata/webhooks): they pass, except the
// older ones, which fail for exactly the fields they lack.
func TestPublishedExamplesValidate(t *testing.T) {
	t.Parallel()
	s := apispec.GitHub(t)
	files, _ := filepath.Glob(filepath.Join(testenv.Root(t), "testdata", "webhooks", "workflow_*.json"))
	if len(files) == 0 {
		t.Fatal("no vendored workflow webhook examples")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			t.Parallel()
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			parts := strings.Split(filepath.Base(f), ".")
			name := strings.ReplaceAll(parts[0]+"-"+parts[1], "_", "-")
			err = s.ValidateWebhook(name, b)
			if want, older := olderExamples[filepath.Base(f)]; older {
				if err == nil || !strings.Contains(fmt.Sprintf("%#v", err), want) {
					t.Fatalf("older example: error = %#v, want %q", err, want)
				}
				return
			}
			if err != nil {
				t.Fatalf("GitHub's example fails validation: %#v", err)
			}
		})
	}
}

// TestValidatorRejects makes sure validation can fail: wrong types, missing
// required fields, null where the description forbids it, bad formats.
func TestValidatorRejects(t *testing.T) {
	t.Parallel()
	s := apispec.GitHub(t)
	const op = "POST /orgs/{org}/actions/runners/generate-jitconfig"
	runner := `{"id":1,"name":"r","os":"linux","status":"online","busy":false,"labels":[{"name":"x"}]`
	tests := []struct {
		name   string
		status int
		body   string
		ok     bool
	}{
		{"valid", 201, `{"runner":` + runner + `},"encoded_jit_config":"abc"}`, true},
		{"nullable version", 201, `{"runner":` + runner + `,"version":null},"encoded_jit_config":"abc"}`, true},
		{"missing config", 201, `{"runner":` + runner + `}}`, false},
		{"id as string", 201, `{"runner":{"id":"1","name":"r","os":"linux","status":"online","busy":false,"labels":[]},"encoded_jit_config":"a"}`, false},
		{"null name", 201, `{"runner":{"id":1,"name":null,"os":"linux","status":"online","busy":false,"labels":[]},"encoded_jit_config":"a"}`, false},
		{"label type outside enum", 201, `{"runner":{"id":1,"name":"r","os":"l","status":"online","busy":false,"labels":[{"name":"x","type":"weird"}]},"encoded_jit_config":"a"}`, false},
		{"error body", 422, `{"message":"m","documentation_url":"u"}`, true},
		{"error body missing url", 422, `{"message":"m"}`, false},
		{"undocumented status", 418, `{}`, false},
		{"not json", 201, `{`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := s.ValidateResponse(op, tt.status, []byte(tt.body))
			if (err == nil) != tt.ok {
				t.Fatalf("ValidateResponse = %v, want ok=%v", err, tt.ok)
			}
		})
	}
	if err := s.ValidateResponse("DELETE /orgs/{org}/actions/runners/{runner_id}", 204, nil); err != nil {
		t.Errorf("empty 204: %v", err)
	}
	if err := s.ValidateResponse("DELETE /orgs/{org}/actions/runners/{runner_id}", 204, []byte(`{}`)); err == nil {
		t.Error("204 with a body accepted")
	}
	if err := s.ValidateResponse("GET /apps/{app_slug}/installations/x", 200, []byte(`{}`)); err == nil {
		t.Error("unknown operation accepted")
	}
	bad := `{"id":1,"guid":"g","delivered_at":"yesterday","redelivery":false,"duration":1,"status":"OK","status_code":200,"event":"e","action":null,"installation_id":null,"repository_id":null}`
	if err := s.ValidateResponse("GET /app/hook/deliveries", 200, []byte("["+bad+"]")); err == nil {
		t.Error("date-time format not asserted")
	}
}

// TestValidateRequestAndHeader checks the request-body and header checks
// themselves on bodies and values GitHub's description allows and refuses.
func TestValidateRequestAndHeader(t *testing.T) {
	t.Parallel()
	s := apispec.GitHub(t)
	const jit = "POST /orgs/{org}/actions/runners/generate-jitconfig"
	const token = "POST /app/installations/{installation_id}/access_tokens"
	const list = "GET /orgs/{org}/actions/runners"
	tests := []struct {
		name  string
		check func() error
		ok    bool
	}{
		{"jit body", func() error { return s.ValidateRequest(jit, []byte(`{"name":"r","runner_group_id":1,"labels":["x"]}`)) }, true},
		{"jit body with work_folder", func() error {
			return s.ValidateRequest(jit, []byte(`{"name":"r","runner_group_id":1,"labels":["x"],"work_folder":"_work"}`))
		}, true},
		{"jit without runner_group_id", func() error { return s.ValidateRequest(jit, []byte(`{"name":"r","labels":["x"]}`)) }, false},
		{"jit with empty labels", func() error { return s.ValidateRequest(jit, []byte(`{"name":"r","runner_group_id":1,"labels":[]}`)) }, false},
		{"jit with string group", func() error {
			return s.ValidateRequest(jit, []byte(`{"name":"r","runner_group_id":"1","labels":["x"]}`))
		}, false},
		{"jit without body", func() error { return s.ValidateRequest(jit, nil) }, false},
		{"token without body", func() error { return s.ValidateRequest(token, nil) }, true},
		{"token with {}", func() error { return s.ValidateRequest(token, []byte("{}\n")) }, true},
		{"token with null", func() error { return s.ValidateRequest(token, []byte("null\n")) }, false},
		{"GET without body", func() error { return s.ValidateRequest(list, nil) }, true},
		{"GET with a body", func() error { return s.ValidateRequest(list, []byte(`{}`)) }, false},
		{"reset as epoch seconds", func() error { return s.ValidateHeader("x-rate-limit-reset", "1790000000") }, true},
		{"reset as a date", func() error { return s.ValidateHeader("x-rate-limit-reset", "Mon, 30 Nov 2026 10:00:00 GMT") }, false},
		{"remaining as a number", func() error { return s.ValidateHeader("x-rate-limit-remaining", "0") }, true},
		{"limit empty", func() error { return s.ValidateHeader("x-rate-limit-limit", "") }, false},
		{"unknown header", func() error { return s.ValidateHeader("x-nope", "1") }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if err := tt.check(); (err == nil) != tt.ok {
				t.Fatalf("err = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

// TestExamples: the description's own examples come back as JSON that its
// schemas accept, and the Link header's example names a next page.
func TestExamples(t *testing.T) {
	t.Parallel()
	s := apispec.GitHub(t)
	for _, op := range []string{
		"GET /orgs/{org}/actions/runners",
		"GET /orgs/{org}/actions/runner-groups",
		"GET /app/hook/deliveries",
	} {
		b, err := s.Example(op, 200)
		if err != nil {
			t.Fatalf("%s: %v", op, err)
		}
		if err := s.ValidateResponse(op, 200, b); err != nil {
			t.Errorf("%s: the description's example does not validate: %v", op, err)
		}
	}
	if _, err := s.Example("GET /orgs/{org}/actions/runners", 418); err == nil {
		t.Error("an undocumented status has an example")
	}
	link, err := s.HeaderExample("link")
	if err != nil || !strings.Contains(link, `rel="next"`) {
		t.Fatalf("link example = %q, %v", link, err)
	}
	if _, err := s.HeaderExample("no-such-header"); err == nil {
		t.Error("an unknown header has an example")
	}
}
