package pool

import "strings"

// Listed reports whether the pool named name is in list, a setting's list
// of pool names (case-insensitive) where "*" stands for every pool, as
// SKIFF_METRICS_RECORDS and SKIFF_RERUN_INTERRUPTED are.
func Listed(list []string, name string) bool {
	for _, p := range list {
		if p == "*" || strings.EqualFold(p, name) {
			return true
		}
	}
	return false
}
