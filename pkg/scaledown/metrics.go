package scaledown

import (
	"context"

	"github.com/skiffci/skiff/pkg/metrics/writer"
	"github.com/skiffci/skiff/pkg/scaledown/decide"
)

// awaiting lists the awaited runners of the pools whose metrics records
// are on (Ledger.Awaiting), as the writer's jobs.
func (p *pass) awaiting(ctx context.Context) []writer.MetricsJob {
	var out []writer.MetricsJob
	for _, pl := range p.s.o.Pools.Pools {
		if p.late(ctx) || !p.s.o.Metrics.Enabled(pl.Name) {
			continue
		}
		rs, err := p.s.o.Ledger.Awaiting(ctx, pl.Name)
		if err != nil {
			p.fail("listing awaiting runners", err, "pool", pl.Name)
			continue
		}
		for i := range rs {
			out = append(out, writer.AwaitedJob(&rs[i]))
		}
	}
	return out
}

// stopAwaiting takes the awaited runners the writer is done with off their
// pools' awaiting lists.
func (p *pass) stopAwaiting(ctx context.Context, jobs []writer.MetricsJob, outcome map[string]writer.Outcome) {
	p.each(ctx, len(jobs), func(i int) {
		j := jobs[i]
		if j.Awaited == nil || outcome[j.Runner] != writer.Done || p.late(ctx) {
			return
		}
		if err := p.s.o.Ledger.StopAwaiting(ctx, j.Runner); err != nil {
			p.fail("taking a runner off its awaiting list", err, "runner_name", j.Runner)
		}
	})
}

// metricsJobs turns the actions whose records end into the writer's jobs.
func metricsJobs(as []*decide.Action, p *pass) []writer.MetricsJob {
	out := make([]writer.MetricsJob, 0, len(as))
	for _, a := range as {
		j := writer.MetricsJob{Runner: a.Runner, Pool: a.Pool, JobID: a.JobID, InstanceID: a.InstanceID}
		if in, ok := p.instances[a.InstanceID]; ok {
			j.Instance = &in
		}
		out = append(out, j)
	}
	return out
}
