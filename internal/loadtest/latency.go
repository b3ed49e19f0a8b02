package loadtest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/skiffci/skiff/pkg/metrics"
)

// StartKind is how a runner's EC2 instance starts for its job: cold
// (launched from its image by CreateFleet), stopped (a stopped instance
// started by StartInstances) or hot (a running instance that waits for its
// registration). The harness's simulated instances boot by the model:
// cold ones after their launch, a stopped warm machine after a job's start
// (a hot one reads its job's registration at its next poll, one step).
type StartKind string

// The start kinds, as the metrics records name them (start.kind).
const (
	Cold    StartKind = metrics.StartCold
	Stopped StartKind = metrics.StartStopped
	Hot     StartKind = metrics.StartHot
)

// StartKinds lists the start kinds in the order reports show them.
var StartKinds = []StartKind{Cold, Stopped, Hot}

// Spread is one phase's latency: a log-normal distribution given by its
// median and its 95th percentile. A zero Spread is a phase that takes no
// time.
type Spread struct{ P50, P95 time.Duration }

// sample draws one latency from the spread.
func (s Spread) sample(rng *rand.Rand) time.Duration {
	if s.P50 <= 0 {
		return 0
	}
	mu := math.Log(s.P50.Seconds())
	sigma := 0.0
	if s.P95 > s.P50 {
		sigma = (math.Log(s.P95.Seconds()) - mu) / 1.6449 // z of the 95th percentile
	}
	return time.Duration(math.Exp(mu+sigma*rng.NormFloat64()) * float64(time.Second))
}

// KindLatency is what EC2 takes to start one kind of instance.
type KindLatency struct {
	// Call is the API call that starts it, to its answer: CreateFleet
	// (instant) for cold, StartInstances for stopped; none for hot (the
	// registration is written to the store, which the other phases hold).
	Call Spread
	// PendingToRunning is EC2's pending state: the host, the network
	// interface and the root volume made ready.
	PendingToRunning Spread
	// BootToOnline is the running instance's boot (none for hot, whose
	// boot is done), its read of its registration and the runner's
	// connection to GitHub.
	BootToOnline Spread
}

// LatencyModel is the harness's latency model of a job's start on EC2:
// skiff's control plane, the start of the instance by kind, and GitHub's
// assignment of the job to the online runner.
type LatencyModel struct {
	// Skiff is queued to launch requested: the webhook's delivery and
	// handling, the queue, scale-up's decision and reservation.
	Skiff Spread
	// Kinds is the instance's start by kind.
	Kinds map[StartKind]KindLatency
	// Assign is GitHub's assignment of the queued job to the online runner.
	Assign Spread
}

// EC2Latency is the model's figures, each from a published measurement
// (docs/performance.md, Start time, has the table and the links):
//
//   - cold: the RunInstances call 1.5 s and pending → running 4.9 s in
//     Colin Percival's ec2-boot-bench (daemonology.net, 2021-08-12,
//     c5.xlarge); pending → running 16.4–16.6 s for every family, the API
//     call 19 % and boot to SSH 12 % of 25.8 s in brevdev's
//     ec2-coldboot-research (github.com/brevdev). The p95s take the slower of the two.
//     Boot to runner online: Amazon Linux 2023's boot to SSH (3.2 s in
//     brevdev's runs) plus the registration read and the runner's
//     connection, so that queued → assigned is RunsOn's published "under
//     25 s" cold start at p50 (runs-on.com).
//   - stopped: RunsOn's "under 15 s" from a stopped instance and
//     WarpBuild's "~15 seconds" from a standby disk
//     (docs.warpbuild.com/byoc/standby-disks): a StartInstances call, a
//     shorter pending (the volume and interface exist) and a boot that
//     skips first-boot work.
//   - hot: RunsOn's "under 6 s": no EC2 call, no boot; the waiting instance
//     reads its registration on its next poll and the runner connects.
//
// Skiff's own share and GitHub's assignment are not published anywhere;
// they are this model's assumptions (a webhook delivery, an SQS message
// and one Lambda invocation; GitHub's long poll of an online runner),
// and the phases the metrics records measure on a live deployment
// replace them.
var EC2Latency = LatencyModel{
	Skiff: Spread{P50: 600 * time.Millisecond, P95: 1100 * time.Millisecond},
	Kinds: map[StartKind]KindLatency{
		Cold: {
			Call:             Spread{P50: 1500 * time.Millisecond, P95: 5 * time.Second},
			PendingToRunning: Spread{P50: 10 * time.Second, P95: 17 * time.Second},
			BootToOnline:     Spread{P50: 9 * time.Second, P95: 15 * time.Second},
		},
		Stopped: {
			Call:             Spread{P50: 700 * time.Millisecond, P95: 1500 * time.Millisecond},
			PendingToRunning: Spread{P50: 5 * time.Second, P95: 9 * time.Second},
			BootToOnline:     Spread{P50: 5 * time.Second, P95: 8 * time.Second},
		},
		Hot: {
			BootToOnline: Spread{P50: 2 * time.Second, P95: 3500 * time.Millisecond},
		},
	},
	Assign: Spread{P50: 1500 * time.Millisecond, P95: 3 * time.Second},
}

// StartSample is one job's start, drawn from a latency model.
type StartSample struct {
	Kind                                                StartKind
	Skiff, Call, PendingToRunning, BootToOnline, Assign time.Duration
}

// Sample draws one start of kind from the model.
func (m LatencyModel) Sample(kind StartKind, rng *rand.Rand) (StartSample, error) {
	k, ok := m.Kinds[kind]
	if !ok {
		return StartSample{}, fmt.Errorf("sampling a start: the model has no %q start", kind)
	}
	return StartSample{Kind: kind, Skiff: m.Skiff.sample(rng), Call: k.Call.sample(rng),
		PendingToRunning: k.PendingToRunning.sample(rng), BootToOnline: k.BootToOnline.sample(rng), Assign: m.Assign.sample(rng)}, nil
}

// Record is the sample as a metrics record's start: queued at queued, the
// launch requested after skiff's share, launched (EC2's launch time,
// pending begins) when the call returns, online after pending and boot,
// assigned after GitHub's assignment.
func (s StartSample) Record(pool string, queued time.Time) metrics.Record {
	requested := queued.Add(s.Skiff)
	launched := requested.Add(s.Call)
	online := launched.Add(s.PendingToRunning + s.BootToOnline)
	assigned := online.Add(s.Assign)
	sec := func(d time.Duration) *float64 { v := math.Round(d.Seconds()*1000) / 1000; return &v }
	return metrics.Record{Pool: pool, QueuedAt: &queued, StartedAt: &assigned, Start: &metrics.Start{Kind: string(s.Kind),
		LaunchRequestedAt: &requested, LaunchedAt: &launched, OnlineAt: &online,
		Phases: &metrics.Phases{QueuedToRequested: sec(s.Skiff), RequestedToLaunched: sec(s.Call),
			LaunchedToOnline: sec(s.PendingToRunning + s.BootToOnline), OnlineToAssigned: sec(s.Assign),
			QueuedToAssigned: sec(assigned.Sub(queued))}}}
}

// ModelPool is the pool name of the model-only start rows.
const ModelPool = "ec2 (model only)"

// ModelStarts is the model-only scenario: n starts of each kind drawn from
// the model with seed, summarised as `skiff metrics` summarises records
// (p50/p95 per phase, skiff's own share apart). Nothing is launched: the
// figures are the model's, not the harness's real path.
func ModelStarts(m LatencyModel, kinds []StartKind, n int, seed uint64) ([]metrics.StartRow, error) {
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var recs []metrics.Record
	for _, kind := range kinds {
		for i := range n {
			s, err := m.Sample(kind, rng)
			if err != nil {
				return nil, err
			}
			recs = append(recs, s.Record(ModelPool, t0.Add(time.Duration(i)*time.Minute)))
		}
	}
	return metrics.SummarizeStarts(recs), nil
}
