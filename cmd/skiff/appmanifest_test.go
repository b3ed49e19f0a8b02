package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestAppManifest(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStderr string
	}{
		{"app-manifest", []string{"--webhook-url", "https://abc123.lambda-url.us-east-1.on.aws/"}, exitOK, ""},
		{"app-manifest-org", []string{"--webhook-url", "https://abc123.lambda-url.us-east-1.on.aws/", "--org", "Acme"}, exitOK, ""},
		{"missing url", nil, exitUsage, "--webhook-url is required"},
		{"http url", []string{"--webhook-url", "http://example.com/hook"}, exitUsage, "want the https URL"},
		{"bad org", []string{"--webhook-url", "https://example.com/", "--org", "a/b"}, exitUsage, "not a GitHub organisation"},
		{"stray argument", []string{"--webhook-url", "https://example.com/", "extra"}, exitUsage, "unexpected argument"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			code := run(append([]string{"app-manifest"}, tc.args...), &stdout, &stderr)
			if code != tc.wantCode {
				t.Fatalf("exit %d, want %d; stderr: %s", code, tc.wantCode, stderr.String())
			}
			if tc.wantStderr != "" {
				if !strings.Contains(stderr.String(), tc.wantStderr) {
					t.Errorf("stderr %q lacks %q", stderr.String(), tc.wantStderr)
				}
				return
			}
			golden(t, tc.name, stdout.String())
		})
	}
}

// TestAppManifestGrantsExactlyWhatSkiffNeeds pins the permissions and
// events independently of the golden file.
func TestAppManifestGrantsExactlyWhatSkiffNeeds(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	if code := run([]string{"app-manifest", "--webhook-url", "https://x.lambda-url.eu-west-1.on.aws/"}, &stdout, &stderr); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var m map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	perms, _ := json.Marshal(m["default_permissions"])
	if got, want := string(perms), `{"actions":"read","metadata":"read","organization_self_hosted_runners":"write"}`; got != want {
		t.Errorf("permissions %s, want %s", got, want)
	}
	events, _ := json.Marshal(m["default_events"])
	if got, want := string(events), `["workflow_job","workflow_run"]`; got != want {
		t.Errorf("events %s, want %s", got, want)
	}
	if m["public"] != false {
		t.Errorf("public = %v", m["public"])
	}
	hook, _ := m["hook_attributes"].(map[string]any)
	if hook["url"] != "https://x.lambda-url.eu-west-1.on.aws/" || hook["active"] != true {
		t.Errorf("hook_attributes = %v", hook)
	}
}
