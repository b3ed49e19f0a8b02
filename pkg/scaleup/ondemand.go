package scaleup

import (
	"context"
	"time"

	"github.com/skiffci/skiff/pkg/pool"
)

// onDemand moves to on-demand capacity the jobs of a re-run that
// scale-down marked (ledger.Launches.MarkOnDemand): the attempt that re-runs
// jobs a spot interruption failed must not be interrupted again. Only jobs
// of a second or later attempt in a pool that buys spot are looked up, one
// read each. A mark that cannot be read leaves the pool's capacity: the job
// still runs, only with spot's risk.
func (s *Service) onDemand(ctx context.Context, items []*work, now time.Time) {
	for _, w := range live(items) {
		if w.job.Attempt <= 1 || w.spec.EC2 == nil || w.spec.EC2.Capacity == pool.CapacityOnDemand {
			continue
		}
		from, err := s.o.Launches.OnDemandFrom(ctx, w.job.RunID, w.spec.Pool, now)
		switch {
		case err != nil:
			w.log.Warn("could not read the run's on-demand mark; launching on the pool's capacity", "err", err)
		case from > 0 && w.job.Attempt >= from:
			e := *w.spec.EC2 // the spec's part is the config's: copy it
			e.Capacity = pool.CapacityOnDemand
			w.spec.EC2 = &e
			w.key = s.groupKey(w)
			s.o.Counter.Count(MetricOnDemandReruns, w.spec.Pool)
			w.log.Info("re-run of a job a spot interruption failed: launching on on-demand capacity",
				"attempt", w.job.Attempt, "on_demand_from", from)
		}
	}
}
