package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/pool/poolfile"
)

// warmPool is a pool with a warm: section; extra is indented at the pool's level.
func warmPool(capacity, warm, extra string) string {
	return `version: 1
defaults:
  subnets: [subnet-0a1b2c3d4e5f60718]
  image: {ssm: /aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64}
` + "pools:\n  - name: a\n    labels: [x]\n    instanceTypes: [c7i.large]\n    capacity: " + capacity +
		"\n    maxRunners: 4\n" + extra + "    warm: " + warm + "\n"
}

func TestWritePlanUnpriced(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	spec := pool.Spec{Shared: pool.Shared{Pool: "x", Backend: pool.BackendEC2, Architecture: "x64", MaxLifetime: 90 * time.Minute},
		EC2: &pool.EC2{InstanceTypes: []string{"c5.large"}, Capacity: pool.CapacitySpot, DiskGiB: 30}}
	if err := writePlan(&buf, nil, spec); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"c5.large", "not in the price table", "price: unknown", "1h30m", "spot (no on-demand fallback)"} {
		if !strings.Contains(out, want) {
			t.Errorf("plan lacks %q:\n%s", want, out)
		}
	}
}

func TestWritePlanWarm(t *testing.T) {
	t.Parallel()
	cfg, err := poolfile.Parse([]byte(warmPool("on-demand", "{stopped: 1, hot: 1, timeZone: Europe/Berlin, schedules: [{days: [mon, tue, wed, thu, fri], from: \"08:00\", to: \"18:00\"}]}", "")), "pools.yaml")
	if err != nil {
		t.Fatal(err)
	}
	spec, err := cfg.Resolve([]string{"self-hosted", "x"})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := writePlan(&buf, cfg, spec); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	usd, _ := spec.WarmCostPerDay(spec.Warm)
	for _, want := range []string{"1 stopped, 1 hot", "Europe/Berlin; 50 h a week", fmt.Sprintf("warm: $%.2f per day", usd)} {
		if !strings.Contains(out, want) {
			t.Errorf("plan lacks %q:\n%s", want, out)
		}
	}
}
