// Package loadtest is skiff's end-to-end fault harness: Run drives N
// workflow jobs through the whole pipeline in one process, on a simulated
// clock, under seeded faults, and checks that skiff keeps its promises.
//
// What runs, and through what:
//
//	GitHub        the simulator (pkg/github/ghsim) over HTTP; the services
//	              call it through the real client (pkg/github)
//	webhook       pkg/webhook behind its own HTTP server; the simulator's
//	              signed deliveries reach it through a proxy that plays the
//	              network (duplicates, late and reordered deliveries)
//	queue         the in-memory queue (SQS semantics: visibility timeout,
//	              receive counts, redrive after MaxReceiveCount), on the
//	              simulated clock
//	scale-up      pkg/scaleup, invoked per batch of 10 as the SQS event
//	              source does, answers completed by queue.CompleteBatch as
//	              functions/scaleup completes them
//	waiting room  pkg/room over the store's room: the jobs scale-up cannot
//	              launch now (max_runners, no capacity) wait there and are
//	              offered again by a runner's end (scale-up's release, the
//	              EC2 events, the reconciler), the reconciler's sweep, the
//	              backoff's delayed tries and the place's probes
//	EC2           pkg/provider/ec2's provider through the AWS SDK over HTTP to the
//	              EC2 fake's Query-protocol front (pkg/provider/ec2/ec2fake)
//	store         memory, dynalite or moto (Config.Store): the production
//	              DynamoDB adapters through the SDK with an emulator
//	runners       simulated instances: boot, read and delete their
//	              registration, connect (JIT) to the simulator, take a job,
//	              tag themselves through the hooks, power off after it; warm
//	              ones (the large pool's warm: section) prepare, tag
//	              themselves ready, wait stopped or hot for their job's
//	              registration, and boot again when a job starts them
//	EC2 events    pkg/instanceevents, fed state changes and spot warnings
//	              late, duplicated and out of order
//	scale-down    pkg/scaledown every simulated minute, with redelivery,
//	              re-runs of interrupted jobs and, with Config.MetricsRecords,
//	              metrics records (on both it and the EC2 events, as the
//	              stack sets them)
//
// One seed gives one run: the workload, every fault, and the order of the
// services' concurrent calls, which run one at a time in an order drawn
// from the seed (fanout.Seeded; production runs them concurrently). All
// but one draw: which ready warm machine a warm start takes is scale-up's
// own random pick (pkg/scaleup/warm.go, not seeded). The machines are
// alike, and a handed machine acts in the order of its handover (its
// boot drawn then), so the pick seldom shows in a report; it can (a late
// stop event of the machine taken, counted once more or less).
//
// The invariants and faults are listed on Config and in docs/development.md.
package loadtest

import (
	"fmt"
	"io"

	"github.com/skiffci/skiff/pkg/metrics"
	"sort"
	"strings"
	"time"
)

// Config configures one run. Zero values take the documented defaults.
type Config struct {
	// Jobs is how many jobs GitHub queues (default 100).
	Jobs int
	// Seed seeds the workload, every fault and the order of the services'
	// concurrent calls.
	Seed uint64
	// MetricsRecords turns the opt-in metrics records on (the stack's
	// RunnerMetrics): scale-down writes them, and the EC2 events leave every
	// runner to it. Off, as deployed by default, the EC2 events end runners.
	MetricsRecords bool
	// Store is where skiff's state lives (default StoreMemory).
	Store Store
	// Faults turns the fault injection on (the zero Config runs without
	// faults: set it, or use DefaultFaults).
	Faults Faults
	// Plant is a bug planted on purpose, to show the harness catches it
	// ("" for none): one of Plants.
	Plant string
	// MaxJobChecks overrides the reconciler's GitHub job reads per pass
	// (0: the production default, scaledown.DefaultMaxJobChecks).
	MaxJobChecks int
	// Latency is the EC2 latency model the simulated instances boot by
	// (nil: EC2Latency).
	Latency *LatencyModel
	// Log receives the services' JSON logs (nil: discarded).
	Log io.Writer
	// Progress receives a line every simulated ten minutes (nil: none).
	Progress io.Writer
}

// Faults are the rates and switches of the injected faults.
type Faults struct {
	GitHub5xx        float64 // share of GitHub API calls answered 5xx
	RateLimitBursts  bool    // secondary rate-limit windows on GitHub's busiest endpoints
	BusyLag          bool    // GitHub's busy flag lags 25–60 s and flips mid-job
	DuplicateHooks   float64 // share of deliveries sent twice
	DroppedHooks     float64 // share of deliveries GitHub fails to deliver (redelivered by scale-down)
	ReorderedHooks   float64 // share of deliveries held back and sent late, out of order
	InsufficientCap  bool    // InsufficientInstanceCapacity on two instance types and one zone, in windows
	PartialFills     bool    // fleets filled short, in windows
	LostFleetAnswers float64 // share of scale-up invocations whose CreateFleet answer is lost once
	FailedBoots      float64 // share of instances whose runner never starts
	SpotInterrupts   float64 // share of jobs on spot whose instance is interrupted mid-job
	EventChaos       bool    // EC2 events late, duplicated and out of order
	Crashes          float64 // share of scale-up invocations that crash, at each step in turn
	Stalls           int     // scale-up invocations stalled past their claim's lease
	// WarmStartFailures is the share of a stopped warm machine's handovers
	// whose StartInstances EC2 refuses (InsufficientInstanceCapacity): the
	// job launches cold.
	WarmStartFailures float64
	// WarmLosses is the chance, per minute, that EC2 ends a stopped warm
	// machine (a host retired while it waits): the reconciler replaces it.
	WarmLosses float64
	// WarmThrottles is the share of StopInstances and StartInstances calls
	// EC2 throttles once (RequestLimitExceeded; the SDK retries).
	WarmThrottles float64
	// WarmCrashes is the share of the scale-up invocations Crashes spares
	// with a job of a pool keeping warm machines that crash on a warm
	// start's path, at each of its steps in turn (Crashes alone rarely
	// lands there: warm starts are a few of a run's invocations).
	WarmCrashes float64
}

// DefaultFaults are the harness's fault rates (docs/development.md).
var DefaultFaults = Faults{
	GitHub5xx: 0.20, RateLimitBursts: true, BusyLag: true, DuplicateHooks: 0.10, DroppedHooks: 0.02, ReorderedHooks: 0.05,
	InsufficientCap: true, PartialFills: true, LostFleetAnswers: 0.02, FailedBoots: 0.03, SpotInterrupts: 0.05, EventChaos: true,
	Crashes: 0.05, Stalls: 2, WarmStartFailures: 0.15, WarmLosses: 0.08, WarmThrottles: 0.10,
	WarmCrashes: 0.15,
}

// The planted bugs. The first four each make the reconciler ignore one of
// the four signals that keep a busy runner alive.
const (
	// PlantIgnoreBusyFlag: GitHub's busy flag reads false in the
	// reconciler's runner listings.
	PlantIgnoreBusyFlag = "ignore-busy-flag"
	// PlantIgnoreLedgerStart: the reconciler reads the ledger's job-started
	// records as registered.
	PlantIgnoreLedgerStart = "ignore-ledger-start"
	// PlantIgnoreHookTag: the reconciler does not read the job hooks' tags.
	PlantIgnoreHookTag = "ignore-hook-tag"
	// PlantIgnoreRefusal: GitHub's refusal to delete a runner that runs a
	// job (github.ErrRunnerBusy) is taken for a deletion.
	PlantIgnoreRefusal = "ignore-refusal"
	// PlantEndInterrupted makes the EC2 events blind to spot warnings: they
	// end an interrupted runner that ran its own job at once, before the
	// reconciler decides its re-run (caught with metrics records off).
	PlantEndInterrupted = "end-interrupted"
	// PlantLoseReplacements makes the reconciler's replacement messages
	// vanish on their way to the queue.
	PlantLoseReplacements = "lose-replacements"
	// PlantIgnoreClaims makes scale-up read no job's launch claim, so a
	// duplicate delivery launches a second runner.
	PlantIgnoreClaims = "ignore-claims"
	// PlantTakeWithoutEnd makes scale-up take a warm machine without ending
	// its warm record (the ledger's End answers "taken" and writes
	// nothing), so the machine stays offered and two jobs can take it.
	PlantTakeWithoutEnd = "take-without-end"
)

// Plants lists the planted bugs.
var Plants = []string{PlantIgnoreBusyFlag, PlantIgnoreLedgerStart, PlantIgnoreHookTag, PlantIgnoreRefusal,
	PlantEndInterrupted, PlantLoseReplacements, PlantIgnoreClaims, PlantTakeWithoutEnd}

// Report is what a run found: its invariant failures and its figures.
type Report struct {
	Seed           uint64
	Store          Store
	MetricsRecords bool // metrics records on
	Jobs           int  // jobs queued by GitHub, re-runs included
	Runs           int
	Failures       []string // invariant failures; empty when skiff kept every promise
	Probes         int      // jobs whose busy signals the harness holds back (probes.go)

	Completed     int           // jobs completed on one of skiff's runners
	Instances     int           // instances launched
	Replacements  int           // replacements the reconciler logged
	Reruns        int           // jobs re-run after a spot interruption
	Invocations   int           // scale-up invocations (crashed ones included)
	Crashed       int           // of which crashed
	Stalled       int           // of which stalled past the lease
	DeadLetters   int           // jobs dead-lettered
	SimSpan       time.Duration // first job queued → last job completed, simulated
	Wall          time.Duration
	WaitP50       time.Duration // queued → runner assigned, simulated
	WaitP95       time.Duration
	WaitMax       time.Duration
	GitHubCalls   int
	EC2Calls      int            // first attempts
	EC2Retries    int            // the SDK's retries of EC2 requests (not all seeded)
	StoreCalls    int            // -1: not counted (memory store)
	StoreOps      map[string]int // store calls by operation
	PeakHeap      uint64
	MaxRSS        int64 // KiB, the Go process
	EmulatorRSS   int64 // KiB, the store emulator's peak (0: none)
	FaultCounts   map[string]int
	ServiceCounts map[string]int
	// Starts is the start time per start kind, from the run's metrics
	// records (metrics records on), as `skiff metrics` reports it.
	Starts []metrics.StartRow
	// StartKinds counts the jobs completed on skiff's runners by how the
	// machine their runner ran on started: cold, stopped or hot (what the
	// simulated machines did, not what skiff recorded).
	StartKinds map[string]int
	// Warm is what the warm pools did (warm.go).
	Warm WarmFigures
}

// JobsPerMinute is the end-to-end throughput in simulated time.
func (r Report) JobsPerMinute() float64 {
	if r.SimSpan <= 0 {
		return 0
	}
	return float64(r.Completed) / r.SimSpan.Minutes()
}

// WallJobsPerMinute is the throughput of the harness on this machine.
func (r Report) WallJobsPerMinute() float64 {
	if r.Wall <= 0 {
		return 0
	}
	return float64(r.Completed) / r.Wall.Minutes()
}

func per(n, d int) float64 {
	if d == 0 {
		return 0
	}
	return float64(n) / float64(d)
}

// String is the report's figures, one per line.
func (r Report) String() string {
	var b strings.Builder
	records := "off"
	if r.MetricsRecords {
		records = "on"
	}
	fmt.Fprintf(&b, "seed %d, store %s, metrics records %s: %d jobs in %d runs, %d completed on skiff runners, %d instances, %d replacements, %d re-runs, %d dead letters\n",
		r.Seed, r.Store, records, r.Jobs, r.Runs, r.Completed, r.Instances, r.Replacements, r.Reruns, r.DeadLetters)
	fmt.Fprintf(&b, "  busy-signal probes  %d jobs\n", r.Probes)
	fmt.Fprintf(&b, "  scale-up invocations %d (%d crashed, %d stalled past their lease)\n", r.Invocations, r.Crashed, r.Stalled)
	fmt.Fprintf(&b, "  throughput          %.1f jobs/min simulated (span %s), %.0f jobs/min wall\n", r.JobsPerMinute(),
		r.SimSpan.Round(time.Second), r.WallJobsPerMinute())
	fmt.Fprintf(&b, "  queued → assigned   p50 %s  p95 %s  max %s (simulated)\n", r.WaitP50.Round(time.Second), r.WaitP95.Round(time.Second),
		r.WaitMax.Round(time.Second))
	store := "not counted"
	if r.StoreCalls >= 0 {
		store = fmt.Sprintf("%.1f", per(r.StoreCalls, r.Instances))
	}
	fmt.Fprintf(&b, "  calls per runner    GitHub %.1f  EC2 %.1f (+%d SDK retries)  store %s\n", per(r.GitHubCalls, r.Instances),
		per(r.EC2Calls, r.Instances), r.EC2Retries, store)
	fmt.Fprintf(&b, "  wall %s, peak Go heap %d MiB, max RSS %d MiB", r.Wall.Round(100*time.Millisecond), r.PeakHeap>>20, r.MaxRSS>>10)
	if r.EmulatorRSS > 0 {
		fmt.Fprintf(&b, ", emulator peak RSS %d MiB", r.EmulatorRSS>>10)
	}
	if len(r.StoreOps) > 0 {
		b.WriteString("\n  store calls ")
		b.WriteString(counts(r.StoreOps))
	}
	if len(r.Starts) > 0 {
		var st strings.Builder
		_ = metrics.WriteStartTable(&st, r.Starts)
		b.WriteString(strings.TrimSuffix(strings.ReplaceAll(st.String(), "\n", "\n  "), "  "))
		b.WriteString("  (simulated, in the harness's steps; the fleet call answers at once)")
	}
	fmt.Fprintf(&b, "\n  start kinds         %s; %s", counts(r.StartKinds), r.Warm)
	b.WriteString("\n  faults ")
	b.WriteString(counts(r.FaultCounts))
	b.WriteString("\n  services ")
	b.WriteString(counts(r.ServiceCounts))
	b.WriteString("\n")
	return b.String()
}

func counts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return strings.Join(parts, " ")
}
