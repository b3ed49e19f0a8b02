package pool

import (
	"strings"
	"testing"
	"time"
)

func TestCandidatesAndPrice(t *testing.T) {
	t.Parallel()
	spec := Spec{EC2: &EC2{InstanceTypes: []string{"c7i.large", "c5.large", "m7i.large"}}}
	c := spec.Candidates()
	if len(c) != 3 || c[0].VCPU != 2 || c[1].Name != "c5.large" || c[1].VCPU != 0 {
		t.Fatalf("candidates = %+v", c)
	}
	lo, hi, unpriced := spec.PriceRange()
	if lo != 0.08925 || hi != 0.1008 || unpriced != 1 {
		t.Errorf("PriceRange = %v, %v, %d", lo, hi, unpriced)
	}
	req := Spec{Shared: Shared{Architecture: "x64"}, EC2: &EC2{Requirements: &Requirements{VCPU: Range{4, 4}, MemoryGiB: Range{Min: 16},
		GPU: &GPURequirements{Count: Range{1, 1}, Models: []string{"l4", "a10g"}}, Families: []string{"g6", "g5", "g6e"}}}}
	var names []string
	for _, it := range req.Candidates() {
		names = append(names, it.Name)
	}
	if got := strings.Join(names, ","); got != "g6.xlarge,g5.xlarge" {
		t.Errorf("requirement candidates = %s, want cheapest first without l40s", got)
	}
}

func TestFormatDuration(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{6 * time.Hour: "6h", 90 * time.Minute: "1h30m", 45 * time.Minute: "45m", 0: "0m"} {
		if got := FormatDuration(d); got != want {
			t.Errorf("FormatDuration(%v) = %q, want %q", d, got, want)
		}
	}
}
