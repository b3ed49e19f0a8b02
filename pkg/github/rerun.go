package github

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
)

// RerunFailedJobs re-runs the failed and cancelled jobs of a completed
// workflow run, and the jobs that depend on them, as the run's next attempt
// (POST /repos/{owner}/{repo}/actions/runs/{run_id}/rerun-failed-jobs).
// GitHub refuses (403, ErrForbidden) a run that has not completed.
func (c *Client) RerunFailedJobs(ctx context.Context, inst int64, owner, repo string, runID int64) error {
	in, err := c.installFor(ctx, inst, owner, repo)
	if err != nil {
		return fmt.Errorf("re-running failed jobs: %w", err)
	}
	ctx, rq := asInstallation(ctx, "rerun_failed_jobs", in)
	path := RepoScope(owner, repo).prefix() + "/actions/runs/" + strconv.FormatInt(runID, 10) + "/rerun-failed-jobs"
	if _, err := c.do(ctx, rq, http.MethodPost, path, nil, nil); err != nil {
		return fmt.Errorf("re-running failed jobs of run %d of %s/%s: %w", runID, owner, repo, err)
	}
	return nil
}
