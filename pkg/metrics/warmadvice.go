package metrics

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/skiffci/skiff/pkg/pool"
)

// Warm advice: how many warm instances a pool would have needed for 95 %
// of its jobs in its warm schedule's hours to start on one, from the
// records' queue times. A warm instance a job takes is replaced by a cold
// launch, ready after the pool's cold start (launch requested → runner
// online); so with N warm instances a job starts warm when at most N of the
// pool's jobs, itself included, were queued within one replacement time
// before it. The advice is the 95th percentile of that count over the jobs
// queued while the schedule is on. It assumes the jobs of the records, at
// their times, and replacements as fast as the records' cold starts: a
// burst that arrives faster than the pool's cold starts needs one warm
// instance per job of the burst.

// DefaultReplenish is the replacement time of a pool whose records hold no
// cold start with its launch and boot phases: about a minute, the cold
// launch → runner online of an EC2 instance with the runner in its image
// (docs/warm-pools.md).
const DefaultReplenish = time.Minute

// WarmAdvice is one pool's warm count advice.
type WarmAdvice struct {
	Pool string `json:"pool"`
	// Jobs counts the pool's jobs queued while its warm schedule is on.
	Jobs int `json:"jobs"`
	// ReplenishSeconds is the replacement time used: the p50 of the pool's
	// cold starts' launch requested → online, or DefaultReplenish.
	ReplenishSeconds float64 `json:"replenishSeconds"`
	// FromRecords says whether ReplenishSeconds comes from the records.
	FromRecords bool `json:"replenishFromRecords"`
	// Count is the advice: the warm instances for 95 % of Jobs.
	Count int `json:"count"`
	// Configured is the pool's warm section's stopped + hot.
	Configured int `json:"configured"`
	// HotCostPerDayUSD is what Count hot instances would cost per day in the
	// schedule's hours (pool.Spec.WarmCostPerDay), when the caller priced it.
	HotCostPerDayUSD *float64 `json:"hotCostPerDayUSD,omitempty"`
	// Served counts the pool's jobs whose runner started on a warm machine
	// (start.kind stopped or hot), over the whole period.
	Served int `json:"served"`
	// HeldHours are the warm instance-hours the pools file's counts hold
	// over the records' period (first to last job queued): Configured
	// machines for each hour the schedule is on. The reconciler keeps the
	// counts, so these are the hours paid for, less its refills' minutes.
	HeldHours float64 `json:"heldHours"`
	// HeldCostUSD is what HeldHours cost at the pool's prices, when the
	// caller priced it.
	HeldCostUSD *float64 `json:"heldCostUSD,omitempty"`
}

// warmSummary keeps what warm advice needs of each record: its pool's
// queue times (Unix nanoseconds) and cold replacement times (seconds).
type warmSummary struct {
	queued    map[string][]int64
	replenish map[string][]float64
	served    map[string]int
}

func newWarmSummary() *warmSummary {
	return &warmSummary{queued: map[string][]int64{}, replenish: map[string][]float64{}, served: map[string]int{}}
}

func (s *warmSummary) add(r *Record) {
	if r.QueuedAt != nil {
		s.queued[r.Pool] = append(s.queued[r.Pool], r.QueuedAt.UnixNano())
	}
	if st := r.Start; st != nil && (st.Kind == StartStopped || st.Kind == StartHot) {
		s.served[r.Pool]++
	}
	if st := r.Start; st != nil && st.Kind == StartCold && st.Phases != nil && st.Phases.RequestedToLaunched != nil && st.Phases.LaunchedToOnline != nil {
		s.replenish[r.Pool] = append(s.replenish[r.Pool], *st.Phases.RequestedToLaunched+*st.Phases.LaunchedToOnline)
	}
}

// advise gives each pool of warm (by name) its advice, in name order.
func (s *warmSummary) advise(warm map[string]*pool.Warm) []WarmAdvice {
	var out []WarmAdvice
	for _, name := range slices.Sorted(maps.Keys(warm)) {
		w := warm[name]
		a := WarmAdvice{Pool: name, Configured: w.Total(), ReplenishSeconds: DefaultReplenish.Seconds()}
		if rs := s.replenish[name]; len(rs) > 0 {
			slices.Sort(rs)
			a.ReplenishSeconds, a.FromRecords = round(percentile(rs, 50), 10), true
		}
		a.Jobs, a.Count = WarmCount(s.queued[name], w, time.Duration(a.ReplenishSeconds*float64(time.Second)))
		a.Served = s.served[name]
		if q := s.queued[name]; len(q) > 0 {
			a.HeldHours = round(float64(w.Total())*HoursOn(w, time.Unix(0, slices.Min(q)), time.Unix(0, slices.Max(q))), 10)
		}
		out = append(out, a)
	}
	return out
}

// HoursOn is how many hours w's schedule is on between from and to,
// counted minute by minute on the schedule's wall clock.
func HoursOn(w *pool.Warm, from, to time.Time) float64 {
	on := 0
	for t := from.Truncate(time.Minute); t.Before(to); t = t.Add(time.Minute) {
		if w.On(t) {
			on++
		}
	}
	return float64(on) / 60
}

// WarmCount is the warm count that starts 95 % of the jobs queued at
// queued (Unix nanoseconds, any order; sorted in place) while w's schedule
// is on, with a used warm instance replaced after replenish; jobs is how
// many were queued while it is on.
func WarmCount(queued []int64, w *pool.Warm, replenish time.Duration) (jobs, count int) {
	slices.Sort(queued)
	var need []float64
	lo := 0
	for i, t := range queued {
		for queued[lo] <= t-int64(replenish) {
			lo++
		}
		if w.On(time.Unix(0, t)) {
			need = append(need, float64(i-lo+1))
		}
	}
	if len(need) == 0 {
		return 0, 0
	}
	slices.Sort(need)
	return len(need), int(percentile(need, 95))
}

// WriteWarmAdvice prints the warm advice under the table.
func WriteWarmAdvice(w io.Writer, advice []WarmAdvice) error {
	if len(advice) == 0 {
		return nil
	}
	fmt.Fprintf(w, "\nwarm capacity (the jobs queued in each pool's warm schedule; a used warm instance replaced after a cold start):\n")
	for _, a := range advice {
		if a.Jobs == 0 {
			fmt.Fprintf(w, "- pool %s: no job queued in its warm schedule's hours (%d configured)\n", a.Pool, a.Configured)
			continue
		}
		from := "its cold starts' p50"
		if !a.FromRecords {
			from = "no cold start in the records: the default"
		}
		fmt.Fprintf(w, "- pool %s: %d warm would have started 95%% of its %d jobs (%d configured); replaced in %s (%s)",
			a.Pool, a.Count, a.Jobs, a.Configured, FormatSeconds(a.ReplenishSeconds), from)
		if a.HotCostPerDayUSD != nil {
			fmt.Fprintf(w, "; %d hot ≈ $%.2f a day", a.Count, *a.HotCostPerDayUSD)
		}
		if a.Configured > 0 {
			fmt.Fprintf(w, "; held %s warm instance-hours over the records' period", strconv.FormatFloat(a.HeldHours, 'f', -1, 64))
			if a.HeldCostUSD != nil {
				fmt.Fprintf(w, " (≈ $%.2f)", *a.HeldCostUSD)
			}
			fmt.Fprintf(w, ", which started %d of its jobs", a.Served)
		}
		if _, err := fmt.Fprintln(w); err != nil {
			return err
		}
	}
	return nil
}
