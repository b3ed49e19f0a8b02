package pool_test

import (
	"path/filepath"
	"testing"

	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/pool/poolfile"
)

// benchLabelSets is a mix of what jobs send: static labels, dynamic labels,
// and labels that resolve to no pool.
var benchLabelSets = [][]string{
	{"self-hosted", "linux", "x64"},
	{"self-hosted", "linux", "large"},
	{"self-hosted", "arm64"},
	{"self-hosted", "skiff/gpu=1"},
	{"self-hosted", "gpu", "skiff/family=g6+g5/cpu=8/spot=false/disk=200/run=1234567890"},
	{"self-hosted", "large", "skiff/cpu=32/ram=64+128"},
	{"ubuntu-latest"},
	{"self-hosted", "Linux", "X64", "skiff/pool=standard/run=42"},
}

func loadExample(tb testing.TB) *pool.Config {
	tb.Helper()
	cfg, err := poolfile.Load(filepath.Join("..", "..", "examples", "pools.yaml"))
	if err != nil {
		tb.Fatalf("loading example: %v", err)
	}
	return cfg
}

// BenchmarkResolve measures label sets resolved per second against
// examples/pools.yaml (target: at least 200,000 per second per core).
func BenchmarkResolve(b *testing.B) {
	cfg := loadExample(b)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		_, _ = cfg.ResolveRepo(benchLabelSets[i%len(benchLabelSets)], "acme/web")
		i++
	}
}

// BenchmarkRoute measures the webhook's call, which skips building the spec.
func BenchmarkRoute(b *testing.B) {
	cfg := loadExample(b)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		_, _ = cfg.Route(benchLabelSets[i%len(benchLabelSets)], "acme/web")
		i++
	}
}
