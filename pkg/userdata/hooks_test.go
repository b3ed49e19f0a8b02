package userdata

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skiffci/skiff/internal/testenv"
)

// TestJobHooks runs the hooks as the runner would (bash -e <path>) against the metadata
// mock and an EC2 stand-in that checks the SigV4 signature and records CreateTags.
func TestJobHooks(t *testing.T) {
	t.Parallel()
	imds := startIMDS(t)
	tests := []struct {
		hook, tagKey string
		status       int
	}{
		{"job-started.sh", "skiff:job-started", http.StatusOK},
		{"job-completed.sh", "skiff:job-completed", http.StatusOK},
		{"job-started.sh", "skiff:job-started", http.StatusInternalServerError}, // must not fail the job
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s answered %d", tt.hook, tt.status), func(t *testing.T) {
			t.Parallel()
			ec2 := startEC2TagsAnswering(t, tt.status)

			dir := t.TempDir()
			src := filepath.Join(testenv.Root(t), "userdata")
			// The boot script installs hooks/job.sh under both names.
			for f, from := range map[string]string{"lib.sh": "lib.sh", "hooks/job-started.sh": "hooks/job.sh", "hooks/job-completed.sh": "hooks/job.sh"} {
				b, err := os.ReadFile(filepath.Join(src, from))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o755); err != nil {
					t.Fatal(err)
				}
				testenv.WriteExecutable(t, filepath.Join(dir, f), b)
			}
			env := fmt.Sprintf("SKIFF_IMDS=%s\nSKIFF_INSTANCE_ID=i-1234567890abcdef0\nSKIFF_API_REGION=us-east-1\nSKIFF_EC2_ENDPOINT=%s\n", imds, ec2.url)
			if err := os.WriteFile(filepath.Join(dir, "instance.env"), []byte(env), 0o644); err != nil {
				t.Fatal(err)
			}
			before := time.Now().UTC().Truncate(time.Second)
			out, err := exec.Command("bash", "-e", filepath.Join(dir, "hooks", tt.hook)).CombinedOutput()
			if err != nil {
				t.Fatalf("the hook failed, which would fail the job: %v\n%s", err, out)
			}
			forms := ec2.calls()
			if len(forms) != 1 {
				t.Fatalf("CreateTags calls = %d, want 1\n%s", len(forms), out)
			}
			f := forms[0]
			if f.Get("Action") != "CreateTags" || f.Get("ResourceId.1") != "i-1234567890abcdef0" || f.Get("Tag.1.Key") != tt.tagKey {
				t.Errorf("CreateTags form = %v", f)
			}
			if at, err := time.Parse(time.RFC3339, f.Get("Tag.1.Value")); err != nil || at.Before(before) || at.After(time.Now().Add(time.Second)) {
				t.Errorf("tag value %q is not the current UTC time (%v)", f.Get("Tag.1.Value"), err)
			}
			// The hook leaves the idle watchdog's marker, even when tagging fails.
			if mark, _ := os.ReadFile(filepath.Join(dir, "job_started")); len(mark) == 0 {
				t.Errorf("%s left no job_started marker for the idle watchdog", tt.hook)
			}
			if failed := strings.Contains(string(out), "could not tag"); failed != (tt.status != http.StatusOK) {
				t.Errorf("hook output %q: want a warning only when EC2 failed", out)
			}
		})
	}
}
