// Package queuetest holds the fixtures the job queue's tests share: the
// port's and its adapters'.
package queuetest

import (
	"context"
	"testing"
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

// Job is ValidJob with the job id id.
func Job(id int64) queue.Job {
	j := ValidJob()
	j.JobID = id
	return j
}

// Queue is a queue a consumer polls.
type Queue interface {
	queue.Sender
	queue.Receiver
}

// RunReceiver checks the promises of a Receiver on a queue whose clock
// advance moves and whose visibility timeout is a minute: at least once,
// in order, a received message hidden for the visibility timeout, receive
// counts, and each verdict completed as SQS would. inFlight is called once
// the three jobs it sends are received and not completed (for the queue's
// own counts); deadLetters lists the queue's dead letters. It leaves job 3
// retried and returns its delivery and the dead letters (job 2's), for
// checks of the queue's own.
func RunReceiver(t *testing.T, q Queue, advance func(time.Duration), inFlight func(),
	deadLetters func() ([]queue.DeadLetterRecord, error)) (retried queue.Delivery, dead []queue.DeadLetterRecord) {
	t.Helper()
	ctx := context.Background()
	for _, id := range []int64{1, 2, 3} {
		if err := q.Send(ctx, Job(id)); err != nil {
			t.Fatal(err)
		}
	}
	first, err := q.Receive(ctx, 2)
	if err != nil || len(first) != 2 || first[0].Job.JobID != 1 || first[1].Job.JobID != 2 || first[0].ReceiveCount != 1 {
		t.Fatalf("first receive = %+v, %v; want jobs 1 and 2, received once", first, err)
	}
	if rest, _ := q.Receive(ctx, 10); len(rest) != 1 || rest[0].Job.JobID != 3 {
		t.Fatalf("second receive = %+v, want only job 3 (1 and 2 are in flight)", rest)
	}
	inFlight()
	answers := []queue.Answer{{Verdict: queue.Done}, {Verdict: queue.DeadLetter, Reason: "launch_quota", Detail: "raise it"}}
	for i, d := range first {
		if err := q.Complete(ctx, d, answers[i]); err != nil {
			t.Fatal(err)
		}
	}
	advance(time.Minute)
	again, _ := q.Receive(ctx, 10)
	if len(again) != 1 || again[0].Job.JobID != 3 || again[0].ReceiveCount != 2 {
		t.Fatalf("after the visibility timeout: %+v, want job 3 again, received twice", again)
	}
	if err := q.Complete(ctx, again[0], queue.Answer{Verdict: queue.Retry}); err != nil {
		t.Fatal(err)
	}
	dead, err = deadLetters()
	if err != nil || len(dead) != 1 || dead[0].JobID != 2 || dead[0].Reason != "launch_quota" || dead[0].Detail != "raise it" || dead[0].Body == "" {
		t.Errorf("dead letters %+v, %v; want job 2's, launch_quota: raise it", dead, err)
	}
	return again[0], dead
}
