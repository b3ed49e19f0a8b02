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

func config(t *testing.T, jobs int, seed uint64, store loadtest.Store, records bool) loadtest.Config {
	cfg := loadtest.Config{Jobs: jobs, Seed: seed, Store: store, MetricsRecords: records, Faults: loadtest.DefaultFaults}
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

// configurations are the two the harness runs: metrics records off, as
// deployed by default, and on.
var configurations = []struct {
	name    string
	records bool
}{{"records=off", false}, {"records=on", true}}

// TestFaultHarness runs 100 jobs through the whole pipeline under every
// fault: a fixed seed in both configurations, and a random one in the
// configuration its parity picks (SKIFF_SEED runs one seed, in both).
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
	for n, seed := range seeds {
		for i, c := range configurations {
			if n > 0 && uint64(i) != seed%2 {
				continue
			}
			t.Run("seed="+strconv.FormatUint(seed, 10)+"/"+c.name, func(t *testing.T) {
				rep := loadtest.Run(t, config(t, 100, seed, loadtest.StoreMemory, c.records))
				judge(t, rep, "go test -run 'TestFaultHarness/seed=[0-9]*/"+c.name+"' ./internal/loadtest")
				checkStarts(t, rep)
			})
		}
	}
}

// checkStarts: with metrics records on, the report's start table counts
// every record once, each a cold, stopped or hot start or, for a runner
// the reconciler linked to its instance (scale-up's launch report lost),
// of no kind; each kind's rows count no more jobs than ran on machines
// that started so (the harness's count, which the run checked against
// every record). Skiff's share (queued → launch requested) is a job's only
// when its runner was requested for it: a job another job's runner took
// (GitHub gives a runner any job its labels fit) has none, so the share
// covers some jobs, never more than a row's, and no job's share exceeds
// its queued → assigned. Off, the table is empty. Either way jobs took
// warm machines, and more started cold than warm.
func checkStarts(t *testing.T, rep loadtest.Report) {
	t.Helper()
	warm := rep.StartKinds[string(loadtest.Stopped)] + rep.StartKinds[string(loadtest.Hot)]
	if rep.Warm.Taken == 0 || rep.StartKinds[string(loadtest.Cold)] <= warm {
		t.Errorf("start kinds %v, %s: want warm machines taken and more cold starts than warm ones", rep.StartKinds, rep.Warm)
	}
	if !rep.MetricsRecords {
		if len(rep.Starts) != 0 {
			t.Errorf("metrics records off, and a start table %+v", rep.Starts)
		}
		return
	}
	jobs, shares := 0, 0
	byKind := map[string]int{}
	for _, r := range rep.Starts {
		jobs += r.Jobs
		shares += r.Skiff.N
		byKind[r.Kind] += r.Jobs
		if r.Total.N != r.Jobs || r.Skiff.N > r.Jobs || r.Total.Max < r.Skiff.Max {
			t.Errorf("start row %+v: want every job with queued → assigned, skiff's share for at most as many, none longer than the longest wait", r)
		}
	}
	for kind, n := range byKind {
		if kind != "" && n > rep.StartKinds[kind] {
			t.Errorf("start table counts %d %q starts, and %d jobs ran on machines that started so (%v)", n, kind, rep.StartKinds[kind], rep.StartKinds)
		}
	}
	if shares == 0 && jobs > 0 {
		t.Errorf("no job has skiff's share of its start: %+v", rep.Starts)
	}
	if jobs != rep.Completed {
		t.Errorf("start table counts %d jobs, want the %d completed (every record has its start)", jobs, rep.Completed)
	}
}

// TestSameSeedSameReport: one seed gives one run. Two runs of a seed give
// the same report, byte for byte, but for the figures of the machine
// (wall time, memory). Scale-up's pick of a ready warm machine is not
// seeded (see the package doc): this seed's reports never showed it (24
// runs); seed 78's did once in three (a late stop event counted once more).
func TestSameSeedSameReport(t *testing.T) {
	t.Parallel()
	seed := uint64(20261202)
	if s, ok := envSeed(t); ok {
		seed = s
	}
	var reps [2]string
	for i := range reps {
		rep := loadtest.Run(t, config(t, 60, seed, loadtest.StoreMemory, true))
		// Wall time and memory are the machine's; the SDK's retries of EC2
		// requests are partly the transport's (a 200 answer the client
		// fails to read is sent again), so they are reported, not compared.
		rep.Wall, rep.PeakHeap, rep.MaxRSS, rep.EmulatorRSS, rep.EC2Retries = 0, 0, 0, 0, 0
		reps[i] = rep.String() + strings.Join(rep.Failures, "\n")
	}
	if reps[0] != reps[1] {
		t.Errorf("seed %d: two runs, two reports:\n%s\n----\n%s", seed, reps[0], reps[1])
	}
}

// TestPlantedBugs shows the harness can fail: each planted bug is caught.
func TestPlantedBugs(t *testing.T) {
	t.Parallel()
	const asked = "reconciler asked GitHub to delete runner"
	for _, tc := range []struct {
		plant string
		want  []string // in one failure
		seed  uint64   // the run's seed (0: 7)
	}{
		// Each busy signal ignored alone: the reconciler asks to delete a
		// probe's runner that signal showed busy (GitHub refuses).
		{loadtest.PlantIgnoreBusyFlag, []string{asked, "GitHub's busy flag"}, 0},
		{loadtest.PlantIgnoreLedgerStart, []string{asked, "the ledger's job start"}, 0},
		{loadtest.PlantIgnoreHookTag, []string{asked, "its job-started tag"}, 0},
		{loadtest.PlantIgnoreRefusal, []string{"terminated while its runner"}, 0},
		// Most interrupted runners ran another job than their own (left to
		// the reconciler either way); 60 jobs of seed 16 have one that ran
		// its own, in a run whose re-run waits for its other jobs (so do
		// seeds 22 and 26).
		{loadtest.PlantEndInterrupted, []string{"which a spot interruption ended"}, 16},
		{loadtest.PlantLoseReplacements, []string{": lost"}, 0},
		{loadtest.PlantIgnoreClaims, []string{": lost"}, 0}, // its claim writes conflict: the jobs are retried, never launched
		// The warm record stays offered after its take: the next job takes
		// the same machine.
		{loadtest.PlantTakeWithoutEnd, []string{"handed to job", "still live"}, 0},
	} {
		t.Run(tc.plant, func(t *testing.T) {
			t.Parallel()
			seed := tc.seed
			if seed == 0 {
				seed = 7
			}
			cfg := config(t, 60, seed, loadtest.StoreMemory, false)
			cfg.Plant = tc.plant
			rep := loadtest.Run(t, cfg)
			for _, f := range rep.Failures {
				if containsAll(f, tc.want) {
					t.Logf("planted %s caught (seed %d, %d failures): %s", tc.plant, rep.Seed, len(rep.Failures), f)
					return
				}
			}
			t.Fatalf("seed %d: the planted bug %s went unnoticed (no failure says %q): %q\n%s", rep.Seed, tc.plant, tc.want,
				rep.Failures, rep)
		})
	}
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// TestLoad is make loadtest: SKIFF_LOADTEST_JOBS jobs in both
// configurations, one after the other (skipped without it).
func TestLoad(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("SKIFF_LOADTEST_JOBS"))
	if n <= 0 {
		t.Skip("set SKIFF_LOADTEST_JOBS (make loadtest runs 1,000 jobs)")
	}
	seed, ok := envSeed(t)
	if !ok {
		seed = randomSeed()
	}
	for _, c := range configurations {
		t.Run(c.name, func(t *testing.T) {
			cfg := config(t, n, seed, loadtest.StoreMemory, c.records)
			cfg.Progress = os.Stdout
			rep := loadtest.Run(t, cfg)
			judge(t, rep, "LOADTEST_JOBS="+strconv.Itoa(n)+" LOADTEST_STORE="+string(cfg.Store)+" make loadtest")
		})
	}
}
