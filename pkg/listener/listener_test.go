package listener

import (
	"testing"
	"time"
)

// TestDecisions: the listener's small pure choices.
func TestDecisions(t *testing.T) {
	t.Parallel()
	conclusions := []struct{ result, want string }{
		{"succeeded", "success"}, {"SucceededWithIssues", "success"}, {"failed", "failure"},
		{"canceled", "cancelled"}, {"abandoned", "cancelled"}, {"skipped", "skipped"},
	}
	for _, c := range conclusions {
		t.Run("result "+c.result, func(t *testing.T) {
			if got := conclusion(c.result); got != c.want {
				t.Errorf("conclusion(%q) = %q, want %q", c.result, got, c.want)
			}
		})
	}
	backoffs := []struct {
		n    int
		want time.Duration
	}{{1, time.Second}, {2, 2 * time.Second}, {5, 16 * time.Second}, {6, 30 * time.Second}, {60, 30 * time.Second}}
	for _, b := range backoffs {
		if got := backoff(b.n); got != b.want {
			t.Errorf("backoff(%d) = %s, want %s", b.n, got, b.want)
		}
	}
	labels := []struct {
		name string
		a, b []string
		same bool
	}{
		{"same, other order and case", []string{"self-hosted", "GPU"}, []string{"gpu", "self-hosted"}, true},
		{"one more", []string{"self-hosted"}, []string{"self-hosted", "gpu"}, false},
		{"another", []string{"self-hosted", "cpu"}, []string{"self-hosted", "gpu"}, false},
	}
	for _, l := range labels {
		t.Run("labels "+l.name, func(t *testing.T) {
			if got := sameLabels(l.a, l.b); got != l.same {
				t.Errorf("sameLabels(%v, %v) = %v", l.a, l.b, got)
			}
		})
	}
}
