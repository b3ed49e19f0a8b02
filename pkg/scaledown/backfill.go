package scaledown

import (
	"context"

	"github.com/skiffci/skiff/pkg/metrics/writer"
	"github.com/skiffci/skiff/pkg/store"
)

// backfill completes, from GitHub, the record of a job an ending runner
// ran when the webhook saw the job start on it but never end (its
// completed delivery was lost, or failed and so did its one redelivery):
// without it the job's metrics record, and the runner's ledger record with
// its pool's count, would wait a day for an event that is not coming. One
// job check each, within the pass's budget; a job GitHub still runs is
// left for a later pass. An awaited runner is checked once an event has
// named its job.
func (p *pass) backfill(ctx context.Context, jobs []writer.MetricsJob) {
	for _, a := range jobs {
		if p.late(ctx) {
			return
		}
		if a.Awaited != nil && a.Awaited.BusyJob == 0 {
			continue
		}
		jobID := a.JobID
		if r, err := a.RunnerRecord(ctx, p.s.o.Ledger); err == nil && r.BusyJob != 0 {
			jobID = r.BusyJob
		}
		job, err := p.s.o.Jobs.Job(ctx, jobID)
		if err != nil || job.Status != store.StatusInProgress || job.RunnerName != a.Runner {
			continue
		}
		if !p.takeJobCheck(a.Runner) {
			p.defer1("job_checks", "rule", "backfill", "job_id", jobID)
			continue
		}
		owner, repo := splitRepo(job.Repository)
		gj, err := p.s.o.GitHub.GetJob(ctx, job.InstallationID, owner, repo, jobID)
		if err != nil {
			p.fail("getting job", err, "job_id", jobID)
			continue
		}
		if gj.Status != "completed" {
			continue
		}
		done := store.JobRecord{ID: jobID, Status: store.StatusCompleted, CompletedAt: gj.CompletedAt, Conclusion: gj.Conclusion,
			RunnerName: gj.RunnerName}
		if done.CompletedAt.IsZero() {
			done.CompletedAt = p.now
		}
		if _, err := p.s.o.Jobs.RecordJob(ctx, done); err != nil {
			p.fail("completing job record", err, "job_id", jobID)
			continue
		}
		p.count(MetricBackfills, "completed")
		p.log.Info("job record completed from GitHub: its completed event never arrived", "job_id", jobID,
			"runner_name", a.Runner, "conclusion", gj.Conclusion)
	}
}
