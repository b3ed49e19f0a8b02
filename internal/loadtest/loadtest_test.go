package loadtest_test

import (
	"crypto/rand"
	"encoding/binary"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/skiffci/skiff/internal/loadtest"
	"github.com/skiffci/skiff/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// The environment that reruns or scales a run:
//
//	SKIFF_SEED=<n>            run that seed only (printed by every failure)
//	SKIFF_LOADTEST_JOBS=<n>   TestLoad's job count (make loadtest: 1000)
//	SKIFF_LOADTEST_STORE=<s>  memory, dynalite or moto
//	SKIFF_LOADTEST_LOG=<file> the services' JSON logs
//	SKIFF_LOADTEST_MAX_JOB_CHECKS=<n>  the reconciler's job reads per pass (default: production's)
func envSeed(t *testing.T) (uint64, bool) {
	s := os.Getenv("SKIFF_SEED")
	if s == "" {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("SKIFF_SEED=%q: %v", s, err)
	}
	return n, true
}

func randomSeed() uint64 {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return uint64(binary.LittleEndian.Uint32(b[:]))
}

func config(t *testing.T, jobs int, seed uint64, store loadtest.Store) loadtest.Config {
	cfg := loadtest.Config{Jobs: jobs, Seed: seed, Store: store, Faults: loadtest.DefaultFaults}
	if s := os.Getenv("SKIFF_LOADTEST_STORE"); s != "" {
		cfg.Store = loadtest.Store(s)
	}
	cfg.MaxJobChecks, _ = strconv.Atoi(os.Getenv("SKIFF_LOADTEST_MAX_JOB_CHECKS"))
	if p := os.Getenv("SKIFF_LOADTEST_LOG"); p != "" {
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Close() })
		cfg.Log = f
	}
	return cfg
}

// judge fails t with every broken invariant and the command that reruns the seed.
func judge(t *testing.T, rep loadtest.Report, rerun string) {
	t.Helper()
	t.Log("\n" + rep.String())
	if len(rep.Failures) == 0 {
		return
	}
	const most = 20
	shown := rep.Failures[:min(most, len(rep.Failures))]
	t.Errorf("seed %d (rerun: SKIFF_SEED=%d %s): %d invariant failures:\n  %s", rep.Seed, rep.Seed, rerun, len(rep.Failures),
		strings.Join(shown, "\n  "))
}

// TestFaultHarness runs 100 jobs through the whole pipeline under every
// fault, with a fixed seed and a random one (SKIFF_SEED runs one seed).
// The store is memory (fast enough for make test); SKIFF_LOADTEST_STORE=moto
// runs the DynamoDB adapters through the SDK against moto (make loadtest
// does). dynalite cannot serve: the ledger's Reserve is a transaction.
func TestFaultHarness(t *testing.T) {
	t.Parallel()
	seeds := []uint64{20261201, randomSeed()}
	if s, ok := envSeed(t); ok {
		seeds = seeds[:1]
		seeds[0] = s
	}
	for _, seed := range seeds {
		t.Run("seed="+strconv.FormatUint(seed, 10), func(t *testing.T) {
			rep := loadtest.Run(t, config(t, 100, seed, loadtest.StoreMemory))
			judge(t, rep, "go test -run 'TestFaultHarness' ./internal/loadtest")
		})
	}
}

// TestPlantedBugs shows the harness can fail: each planted bug is caught.
func TestPlantedBugs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ plant, want string }{
		{loadtest.PlantBusyBlind, "terminated while its runner"},
		{loadtest.PlantLoseReplacements, ": lost"},
		{loadtest.PlantIgnoreClaims, ": lost"}, // its claim writes conflict: the jobs are retried, never launched
	} {
		t.Run(tc.plant, func(t *testing.T) {
			t.Parallel()
			cfg := config(t, 60, 7, loadtest.StoreMemory)
			cfg.Plant = tc.plant
			rep := loadtest.Run(t, cfg)
			for _, f := range rep.Failures {
				if strings.Contains(f, tc.want) {
					t.Logf("planted %s caught (seed %d, %d failures): %s", tc.plant, rep.Seed, len(rep.Failures), f)
					return
				}
			}
			t.Fatalf("seed %d: the planted bug %s went unnoticed (no failure says %q): %q\n%s", rep.Seed, tc.plant, tc.want,
				rep.Failures, rep)
		})
	}
}

// TestLoad is make loadtest: SKIFF_LOADTEST_JOBS jobs (skipped without it).
func TestLoad(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("SKIFF_LOADTEST_JOBS"))
	if n <= 0 {
		t.Skip("set SKIFF_LOADTEST_JOBS (make loadtest runs 1,000 jobs)")
	}
	seed, ok := envSeed(t)
	if !ok {
		seed = randomSeed()
	}
	cfg := config(t, n, seed, loadtest.StoreMemory)
	cfg.Progress = os.Stdout
	rep := loadtest.Run(t, cfg)
	judge(t, rep, "LOADTEST_JOBS="+strconv.Itoa(n)+" LOADTEST_STORE="+string(cfg.Store)+" make loadtest")
}
