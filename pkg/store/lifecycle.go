package store

import (
	"context"
	"time"

	"github.com/skiffci/skiff/pkg/ledger"
)

// RunnerStep is what a workflow_job event tells the runner ledger: the job
// started (ledger.StateJobStarted) or completed (ledger.StateJobCompleted)
// on the named runner at At. The zero RunnerStep tells nothing.
type RunnerStep struct {
	Runner string
	To     ledger.State
	At     time.Time
}

// LifecycleRecorder records a workflow_job lifecycle event and its runner
// step together, so that a store able to write both in one request (Dynamo:
// one TransactWriteItems) saves the webhook a round trip. The result must
// be exactly that of RecordJob(j) followed by Ledger.Advance(step.Runner,
// step.To, step.At, j.ID) when step.Runner is set, where a runner the
// ledger does not know is not an error. advanced is RecordJob's. An error
// is a failure of the store (retry later); when it comes, either write may
// have been made, and repeating the call is safe: both merge.
type LifecycleRecorder interface {
	RecordLifecycle(ctx context.Context, j JobRecord, step RunnerStep) (advanced bool, err error)
}
