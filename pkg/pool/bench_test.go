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
	benchLabelMix(b, func(cfg *pool.Config, labels []string) { _, _ = cfg.ResolveRepo(labels, "acme/web") })
}

// BenchmarkRoute measures the webhook's call, which skips building the spec.
func BenchmarkRoute(b *testing.B) {
	benchLabelMix(b, func(cfg *pool.Config, labels []string) { _, _ = cfg.Route(labels, "acme/web") })
}

// benchLabelMix calls call with examples/pools.yaml and each of
// benchLabelSets in turn, once per iteration.
func benchLabelMix(b *testing.B, call func(cfg *pool.Config, labels []string)) {
	cfg := loadExample(b)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		call(cfg, benchLabelSets[i%len(benchLabelSets)])
		i++
	}
}
