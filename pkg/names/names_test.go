package names

import "testing"

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
