package names

import (
	"math"
	"strings"
	"testing"
)

func TestLaunchTemplate(t *testing.T) {
	t.Parallel()
	cases := []struct{ prefix, pool, want string }{
		{"", "gpu-a10", "skiff-gpu-a10"},
		{"skiff-", "cpu", "skiff-cpu"},
		{"prod-skiff-", "cpu", "prod-skiff-cpu"},
	}
	for _, tc := range cases {
		got := LaunchTemplate(tc.prefix, tc.pool)
		if got != tc.want {
			t.Errorf("LaunchTemplate(%q, %q) = %q, want %q", tc.prefix, tc.pool, got, tc.want)
		}
		pool, ok := PoolOfLaunchTemplate(tc.prefix, got)
		if !ok || pool != tc.pool {
			t.Errorf("PoolOfLaunchTemplate(%q, %q) = %q, %v", tc.prefix, got, pool, ok)
		}
	}
	if _, ok := PoolOfLaunchTemplate("skiff-", "other-cpu"); ok {
		t.Error("a template without the prefix was taken for a pool's")
	}
}

func TestRunnerNames(t *testing.T) {
	t.Parallel()
	long := "a-very-long-deployment-name-of-forty-ch" // 39
	cases := []struct {
		name       string
		deployment string
		job        int64
		gen        int
		want       string
	}{
		{name: "a deployment", deployment: "skiff-ci", job: 123, gen: 2, want: "skiff-skiff-ci-123-2"},
		{name: "no deployment", job: 123, gen: 2, want: "skiff-123-2"},
		{name: "a deployment ending in digits", deployment: "ci-2", job: 7, gen: 1, want: "skiff-ci-2-7-1"},
		// Its first 15 characters and the first 8 hex digits of its
		// SHA-256 (computed apart from this code: Python's hashlib).
		{name: "a long deployment, cut and hashed", deployment: long, job: 9, gen: 1, want: "skiff-a-very-long-dep-e09ea976-9-1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := RunnerName(tc.deployment, tc.job, tc.gen)
			if got != tc.want {
				t.Errorf("RunnerName = %q, want %q", got, tc.want)
			}
			if !OwnRunner(tc.deployment, got) {
				t.Errorf("OwnRunner(%q, %q) = false", tc.deployment, got)
			}
			if !strings.HasPrefix(got, RunnerPrefix(tc.deployment, tc.job)) {
				t.Errorf("%q does not start with RunnerPrefix %q", got, RunnerPrefix(tc.deployment, tc.job))
			}
		})
	}
	// The longest name fits GitHub's bound.
	if n := RunnerName(strings.Repeat("a", MaxDeploymentLen), math.MaxInt64, 9999); len(n) > MaxRunnerNameLen {
		t.Errorf("%q is %d characters, over GitHub's %d", n, len(n), MaxRunnerNameLen)
	}
	// Whose runner is it: read from the end, so no deployment owns
	// another's, however their ids overlap.
	owns := []struct {
		deployment, runner string
		want               bool
	}{
		{"ci", "skiff-ci-12-1", true},
		{"ci", "skiff-ci-2-12-1", false}, // ci-2's
		{"ci-2", "skiff-ci-2-12-1", true},
		{"ci-2", "skiff-ci-12-1", false},
		{"ci", "skiff-12-1", false},  // no deployment's
		{"", "skiff-12-1", true},     // ... which is what a deployment-less part owns
		{"", "skiff-ci-12-1", false}, // and no more
		{"ci", "skiff-ci-12-x", false},
		{"ci", "skiff-ci-12-", false},
		{"ci", "skiff-ci", false},
		{"ci", "other-ci-12-1", false},
		{long, RunnerName(long+"x", 12, 1), false}, // same cut, another hash
	}
	for _, o := range owns {
		if got := OwnRunner(o.deployment, o.runner); got != o.want {
			t.Errorf("OwnRunner(%q, %q) = %v, want %v", o.deployment, o.runner, got, o.want)
		}
	}
}
