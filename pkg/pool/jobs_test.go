package pool_test

import (
	"strings"
	"testing"

	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/pool/poolfile"
)

// TestJobSource: jobs defaults to the webhook; a listener pool with the
// dynamic label keeps the webhook and validate says so; the listener
// refuses registration: token, and jobs takes only its two values.
func TestJobSource(t *testing.T) {
	t.Parallel()
	const head = "version: 1\npools:\n  - name: p\n    labels: [self-hosted, gpu]\n    process: {}\n"
	tests := []struct {
		name, extra string
		want        pool.JobSource
		warn, err   string
	}{
		{"default", "", pool.JobsWebhook, "", ""},
		{"listener", "    jobs: listener\n", pool.JobsListener, "", ""},
		{"listener with the dynamic label", "    jobs: listener\n    dynamic: {}\n", pool.JobsListener, `pool "p" keeps the webhook`, ""},
		{"listener with a registration token", "    jobs: listener\n    registration: token\n", "", "", "register just in time in the scale set"},
		{"an unknown source", "    jobs: poll\n", "", "", "jobs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := poolfile.Parse([]byte(head+tt.extra), "pools.yaml")
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("Parse: %v, want an error with %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.Pool("p").Jobs; got != tt.want {
				t.Errorf("Jobs = %q, want %q", got, tt.want)
			}
			var warned []string
			for _, d := range cfg.Warnings {
				warned = append(warned, d.Message)
			}
			all := strings.Join(warned, "\n")
			switch {
			case tt.warn != "" && !strings.Contains(all, tt.warn):
				t.Errorf("warnings %q, want one with %q", all, tt.warn)
			case tt.warn == "" && strings.Contains(all, "keeps the webhook"):
				t.Errorf("warnings %q, want none about the listener", all)
			}
		})
	}
}
