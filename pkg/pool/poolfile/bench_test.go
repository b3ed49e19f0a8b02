package poolfile

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skiffci/skiff/pkg/pool"
)

func loadExample(tb testing.TB) *pool.Config {
	tb.Helper()
	cfg, err := Load(filepath.Join("..", "..", "..", "examples", "pools.yaml"))
	if err != nil {
		tb.Fatalf("loading example: %v", err)
	}
	return cfg
}

// ambiguousYAML is pkg/pool's test file of pools that overlap.
var ambiguousYAML = func() string {
	data, err := os.ReadFile(filepath.Join("..", "testdata", "ambiguous.yaml"))
	if err != nil {
		panic(err)
	}
	return string(data)
}()

// hundredPools renders a realistic 100-pool file: defaults, distinct labels,
// scopes, instance lists, requirements and dynamic bounds.
func hundredPools() []byte {
	var b strings.Builder
	b.WriteString(`version: 1
defaults:
  subnets: [subnet-0a1b2c3d4e5f60718, subnet-0b2c3d4e5f6071829]
  image:
    ssm: /aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64
  maxLifetime: 6h
  tags: {cost-center: ci}
pools:
  - name: standard
    labels: [self-hosted, linux, x64]
    instanceTypes: [c7i.large, c6i.large]
`)
	for i := 1; i < 100; i++ {
		switch i % 3 {
		case 0:
			fmt.Fprintf(&b, `  - name: team-%d
    labels: [team-%d, build]
    scope:
      owners: [org-%d]
      repositories: [acme/repo-%d]
    runnerGroup: team-%d
    instanceTypes: [c7i.2xlarge, c6i.2xlarge, m7i.2xlarge, m6i.2xlarge]
    capacity: spot
    diskGiB: 80
    maxRunners: 25
    dynamic:
      maxCpu: 32
      maxRamGiB: 128
      maxDiskGiB: 400
      families: [c7i, m7i]
`, i, i, i, i, i)
		case 1:
			fmt.Fprintf(&b, `  - name: gpu-%d
    labels: [gpu-%d]
    image:
      ssm: /aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-amazon-linux-2023/latest/ami-id
    requirements:
      vcpu: {min: 4, max: 64}
      memoryGiB: {min: 16}
      gpu: {count: {min: 1, max: 4}, manufacturer: nvidia}
      families: [g6, g5, g6e]
    dynamic: {maxGpus: 4, maxCpu: 64, families: [g6, g5]}
`, i, i)
		default:
			fmt.Fprintf(&b, `  - name: arm-%d
    labels: [arm-%d]
    architecture: arm64
    image: {ssm: /aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-arm64}
    instanceTypes: [c7g.large, m7g.large]
    maxLifetime: 1h30m
`, i, i)
		}
	}
	return []byte(b.String())
}

// BenchmarkLoad100Pools measures parsing, schema validation, semantic checks
// and indexing of a 100-pool file (target: at most 5 ms).
func BenchmarkLoad100Pools(b *testing.B) {
	data := hundredPools()
	if _, err := Parse(data, "hundred.yaml"); err != nil {
		b.Fatalf("parsing: %v", err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(data, "hundred.yaml"); err != nil {
			b.Fatal(err)
		}
	}
}

func TestHundredPoolsLoads(t *testing.T) {
	t.Parallel()
	cfg, err := Parse(hundredPools(), "hundred.yaml")
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if len(cfg.Pools) != 100 {
		t.Fatalf("got %d pools, want 100", len(cfg.Pools))
	}
	if len(cfg.Warnings) != 0 {
		t.Errorf("warnings: %v", cfg.Warnings)
	}
	if got, err := cfg.Route([]string{"self-hosted", "gpu-97", "skiff/gpu=2"}, "acme/x"); err != nil || got != "gpu-97" {
		t.Errorf("Route = %q, %v; want gpu-97", got, err)
	}
}
