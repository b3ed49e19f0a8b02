// Package queuetest holds the fixtures the job queue's tests share: the
// port's and its adapters'.
package queuetest

import (
	"time"

	"github.com/skiffci/skiff/pkg/queue"
)

// ValidJob is a job every consumer accepts: each field set, as the webhook
// enqueues a queued job of GitHub's.
func ValidJob() queue.Job {
	return queue.Job{
		JobID: 29679449, RunID: 10867447, Attempt: 1, Repository: "octo-org/hello", Owner: "octo-org",
		InstallationID: 4242, Labels: []string{"self-hosted", "linux", "gpu-a10"}, Pool: "gpu-a10",
		DeliveryID: "7a1c6e40-9a51-11ef-8b5e-2f4b1f7c0a01",
		ReceivedAt: time.Date(2026, 6, 1, 12, 0, 0, 123000000, time.UTC),
	}
}
