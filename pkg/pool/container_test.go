package pool_test

import (
	"strings"
	"testing"

	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/pool/poolfile"
)

func TestContainerSection(t *testing.T) {
	t.Parallel()
	const head = "version: 1\npools:\n  - name: boxes\n    labels: [self-hosted, linux, x64]\n    dynamic: {maxCpu: 16, maxRamGiB: 64, maxGpus: 2}\n    container:\n"
	for _, tc := range []struct {
		name    string
		section string
		sizes   pool.Sizes
		limits  string
		warn    string
	}{
		{"numbers and quantities", "      image: r:1\n      cpu: 2\n      memory: 8Gi\n", pool.Sizes{}, "--cpus=2 --memory=8Gi --pids-limit=4096", ""},
		{"a fraction of a CPU", "      image: r:1\n      cpu: \"0.5\"\n", pool.Sizes{}, "--cpus=0.5 --pids-limit=4096", ""},
		{"sizes raise the limits", "      image: r:1\n      cpu: 2\n      memory: 8Gi\n", pool.Sizes{VCPU: 4, MemoryGiB: 16}, "--cpus=4 --memory=16Gi --pids-limit=4096", ""},
		{"sizes never lower them", "      image: r:1\n      cpu: 8\n      memory: 32Gi\n", pool.Sizes{VCPU: 4, MemoryGiB: 16}, "--cpus=8 --memory=32Gi --pids-limit=4096", ""},
		{"GPUs from the label", "      image: r:1\n      gpus: all\n", pool.Sizes{GPUs: 2}, "--pids-limit=4096 --gpus=2", ""},
		{"host network warns", "      image: r:1\n      network: host\n      pids: 100\n", pool.Sizes{}, "--pids-limit=100", "host's network"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := poolfile.Parse([]byte(head+tc.section), "pools.yaml")
			if err != nil {
				t.Fatal(err)
			}
			c := cfg.Pools[0].Container
			if c == nil || cfg.Pools[0].Backend != pool.BackendContainer {
				t.Fatalf("pool backend %s, container %+v", cfg.Pools[0].Backend, c)
			}
			l, err := c.Limits(tc.sizes)
			if err != nil || l.String() != tc.limits {
				t.Errorf("Limits(%+v) = %q, %v; want %q", tc.sizes, l.String(), err, tc.limits)
			}
			var warned string
			for _, d := range cfg.Warnings {
				warned += d.Message
			}
			if tc.warn == "" && warned != "" || tc.warn != "" && !strings.Contains(warned, tc.warn) {
				t.Errorf("warnings %q, want %q", warned, tc.warn)
			}
		})
	}
}

func TestContainerSectionRefused(t *testing.T) {
	t.Parallel()
	const head = "version: 1\npools:\n  - name: boxes\n    labels: [self-hosted]\n    container:\n"
	for _, tc := range []struct{ name, section string }{
		{"no image", "      cpu: 2\n"},
		{"a relative mount", "      image: r:1\n      mounts: [{source: opt, target: /opt}]\n"},
		{"a memory that is no quantity", "      image: r:1\n      memory: lots\n"},
		{"an unknown key", "      image: r:1\n      privileged: true\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := poolfile.Parse([]byte(head+tc.section), "pools.yaml"); err == nil {
				t.Error("Parse accepted it")
			}
		})
	}
}
