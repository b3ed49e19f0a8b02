package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/pool/poolfile"
	"github.com/skiffci/skiff/pkg/provider"
)

// endedLister is a provider whose List shows runners that ended.
type endedLister struct {
	provider.Provider
	ended []provider.Instance
}

func (e endedLister) List(context.Context, provider.Filter) ([]provider.Instance, error) {
	return e.ended, nil
}

// TestReportEndedOnce: the watch reports each ended runner to the ledger
// once, though the provider keeps listing it (for an hour): at every end,
// reporting all of them again made the ledger's writes grow with the
// square of the runners.
func TestReportEndedOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	poolsFile := filepath.Join(dir, "pools.yaml")
	if err := os.WriteFile(poolsFile, []byte("version: 1\npools:\n  - name: cpu\n    labels: [self-hosted]\n    process: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := &testenv.SyncBuffer{}
	l, err := New(Config{DataDir: filepath.Join(dir, "data"), PoolsFile: poolsFile, Listen: "127.0.0.1:0", Provider: "dry-run",
		AppIDs: []int64{77}, AppKeys: testenv.KeyPEM(),
		WebhookSecret: "s", Allow: []string{"acme"}, Installations: []string{"*"}},
		slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	t.Cleanup(func() { _ = l.Close(ctx) })
	lister := endedLister{Provider: l.Provider}
	for i := range 3 {
		lister.ended = append(lister.ended, provider.Instance{ID: fmt.Sprintf("proc-%d", i), Pool: "cpu", State: provider.Terminated})
	}
	l.Provider = lister
	reports := func() int {
		return strings.Count(logs.String(), `"msg":"not a skiff runner's instance"`)
	}
	if n := l.reportEnded(ctx); n != 3 || reports() != 3 {
		t.Fatalf("first look: %d ended, %d reports; want 3 and 3", n, reports())
	}
	lister.ended = append(lister.ended, provider.Instance{ID: "proc-3", Pool: "cpu", State: provider.Terminated})
	l.Provider = lister
	if n := l.reportEnded(ctx); n != 1 || reports() != 4 {
		t.Errorf("second look: %d ended, %d reports in all; want 1 new and 4 (each end reported once):\n%s", n, reports(),
			bytes.TrimSpace([]byte(logs.String())))
	}
}

// TestNeedSandbox: local mode refuses to start when a pool's runners need
// a sandbox the machine cannot give, naming those pools, and starts when
// every pool opted out or the sandbox works.
func TestNeedSandbox(t *testing.T) {
	t.Parallel()
	cfg, err := poolfile.Parse([]byte("version: 1\npools:\n  - name: lab\n    labels: [lab]\n    process: {}\n"+
		"  - name: trusted\n    labels: [trusted]\n    process: {sandbox: none}\n  - name: cloud\n    labels: [cloud]\n"+
		"    instanceTypes: [c7i.large]\n    subnets: [subnet-0a1b2c3d4e5f60718]\n    image: {ami: ami-0123456789abcdef0}\n"), "pools.yaml")
	if err != nil {
		t.Fatal(err)
	}
	optedOut := &pool.Config{Pools: []*pool.Pool{cfg.Pool("trusted")}}
	noBwrap := errors.New("bubblewrap (bwrap) is not installed here")
	cases := []struct {
		name  string
		pools *pool.Config
		why   error
		want  string // in the refusal; "" when it starts
	}{
		{"no sandbox, pools that need one", cfg, noBwrap, "pools [lab cloud] need a sandbox"},
		{"no sandbox, every pool opted out", optedOut, noBwrap, ""},
		{"a working sandbox", cfg, nil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := needSandbox(tc.pools, tc.why)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("needSandbox = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, tc.why)):
				t.Errorf("needSandbox = %v, want a refusal saying %q and why", err, tc.want)
			}
		})
	}
}
