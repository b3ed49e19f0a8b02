package scaleup_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/queue"
	"github.com/skiffci/skiff/pkg/scaleup"
	"github.com/skiffci/skiff/pkg/store"
)

// The ledger's scenarios: without the runner ledger, each of them launches
// twice, loses a job or stops a pool for good.

// liveByJob counts live instances per job id tag ("skiff:job-id" or, for
// shared fleets, the runner name of the registration).
func (e *env) maxLivePerJob() int {
	most := 0
	for _, n := range e.instancesPerJob() {
		most = max(most, n)
	}
	return most
}

// TestPoolCountIsReleased (1): a pool with maxRunners 2 runs two jobs; both
// instances end (reported twice by the state-change event and once more by
// the reconciler); the third job launches, and the count is exact.
func TestPoolCountIsReleased(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	if r := e.handle(ctx, e.svc, jobs(1, 2, "small")...); len(r.BatchItemFailures) != 0 {
		t.Fatalf("first two jobs: %+v\n%s", r, e.logs.String())
	}
	if n, _ := e.ledger.Live(ctx, "small"); n != 2 {
		t.Fatalf("live %d, want 2", n)
	}
	for _, in := range e.ec2.Live() {
		e.ec2.SetState(in.ID, "terminated")
		for range 2 {
			if _, err := e.ledger.EndInstance(ctx, in.ID, e.clock.now(), "state_terminated"); err != nil {
				t.Fatal(err)
			}
		}
		r, err := e.ledger.RunnerByInstance(ctx, in.ID)
		if err != nil {
			t.Fatal(err)
		}
		if ended, _ := e.ledger.End(ctx, r.Name, e.clock.now(), "reconciler"); ended {
			t.Errorf("runner %s ended twice", r.Name)
		}
	}
	if n, _ := e.ledger.Live(ctx, "small"); n != 0 {
		t.Fatalf("live %d after both instances ended, want 0", n)
	}
	if r := e.handle(ctx, e.svc, message(job(3, "small"), 1)); len(r.BatchItemFailures) != 0 || len(e.ec2.Live()) != 1 {
		t.Fatalf("third job: %+v, %d live\n%s", r, len(e.ec2.Live()), e.logs.String())
	}
	if n, _ := e.ledger.Live(ctx, "small"); n != 1 {
		t.Errorf("live %d, want 1", n)
	}
}

// hookGitHub runs a hook once, in the middle of the first JIT generation:
// an invocation that stalls there.
type hookGitHub struct {
	scaleup.GitHub
	once sync.Once
	hook func()
}

func (h *hookGitHub) GenerateJITConfig(ctx context.Context, inst int64, scope github.Scope, req github.JITRequest) (*github.JITConfig, error) {
	h.once.Do(h.hook)
	return h.GitHub.GenerateJITConfig(ctx, inst, scope, req)
}

// TestStalledInvocation (2): an invocation stalls in generate-jitconfig
// past its lease while a duplicate message takes the claim over and
// launches; when the stalled one resumes it launches nothing — refused by
// its lease budget, and, when its clock lags, by the fenced launch intent.
func TestStalledInvocation(t *testing.T) {
	t.Parallel()
	for _, lagging := range []bool{false, true} {
		name := "past its lease"
		if lagging {
			name = "with a lagging clock: the fence"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, nil)
			ctx := context.Background()
			msg := message(job(42), 1)
			o := e.opts
			if lagging {
				c := &clock{}
				c.set(start)
				o.Now = c.now // the stalled invocation's own clock never moves
			}
			o.GitHub = &hookGitHub{GitHub: e.gh, hook: func() {
				e.clock.advance(scaleup.DefaultClaimLease + time.Second)
				dup := msg
				dup.ID, dup.ReceiveCount = "dup", 2
				if r := e.handle(ctx, e.svc, dup); len(r.BatchItemFailures) != 0 {
					t.Errorf("the duplicate did not launch: %+v", r)
				}
			}}
			stalled, err := scaleup.New(o)
			if err != nil {
				t.Fatal(err)
			}
			r := e.handle(ctx, stalled, msg)
			if len(r.BatchItemFailures) != 1 {
				t.Errorf("the stalled invocation's answer %+v, want a retry", r)
			}
			if got := len(e.ec2.Instances()); got != 1 {
				t.Errorf("%d instances launched for one job, want 1\n%s", got, e.logs.String())
			}
			if got := len(e.regs.all()); got != 1 {
				t.Errorf("%d registrations delivered, want 1", got)
			}
			if n, _ := e.ledger.Live(ctx, "cpu"); n != 1 {
				t.Errorf("live %d, want 1 (the stalled invocation's reservation given back)", n)
			}
		})
	}
}

// TestRecoveryAsksTheLedger (3): an invocation crashes after CreateFleet;
// its runner registers, runs the job and powers off before the lease ends;
// the redelivery after the lease finds the instance gone and must not
// launch again — the ledger (or the job record) says the runner ran.
func TestRecoveryAsksTheLedger(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		ran  func(e *env)
	}{
		{"the ledger saw the job start", func(e *env) {
			if err := e.ledger.Advance(context.Background(), "skiff-77-1", ledger.StateJobStarted, e.clock.now(), 77); err != nil {
				t.Fatal(err)
			}
		}},
		{"the job record says it started", func(e *env) {
			j := store.JobRecord{ID: 77, Status: store.StatusInProgress, RunnerName: "skiff-77-1", UpdatedAt: e.clock.now(),
				ExpiresAt: e.clock.now().Add(time.Hour)}
			if _, err := e.jobs.RecordJob(context.Background(), j); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, nil)
			msg := message(job(77), 1)
			e.crashAtLaunch(msg, false)
			if len(e.ec2.Instances()) != 1 {
				t.Fatalf("%d instances after the crash, want 1", len(e.ec2.Instances()))
			}
			tc.ran(e)
			e.ec2.SetState(e.ec2.Instances()[0].ID, "terminated") // the job ran; the instance powered off
			e.clock.advance(scaleup.DefaultClaimLease + time.Second)
			msg.ReceiveCount = 2
			if r := e.handle(context.Background(), e.svc, msg); len(r.BatchItemFailures) != 0 {
				t.Errorf("redelivery: %+v", r)
			}
			if got := len(e.ec2.Instances()); got != 1 {
				t.Errorf("%d instances launched in all, want 1: the job ran and must not run again\n%s", got, e.logs.String())
			}
		})
	}
}

// TestInFlightUsesNoAttempt (4): redeliveries that find the job in flight
// (a crashed invocation's launch intent, the lease still live) come every
// minute, more often than the lease ends; none of them dead-letters the job,
// and the first after the lease launches it.
func TestInFlightUsesNoAttempt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *scaleup.Options) { o.MaxAttempts = 2 })
	msg := message(job(9), 1)
	e.crashAtLaunch(msg, true)
	for n := 2; n <= 5; n++ {
		e.clock.advance(time.Minute)
		msg.ReceiveCount = n
		if r := e.handle(context.Background(), e.svc, msg); len(r.BatchItemFailures) != 1 {
			t.Fatalf("delivery %d within the lease: %+v, want a retry", n, r)
		}
	}
	if dead := e.dlq.DeadLetters(); len(dead) != 0 {
		t.Fatalf("dead letters %+v: a job in flight must not use up its attempts", dead)
	}
	e.clock.advance(scaleup.DefaultClaimLease)
	msg.ReceiveCount = 6
	if r := e.handle(context.Background(), e.svc, msg); len(r.BatchItemFailures) != 0 || len(e.ec2.Live()) != 1 {
		t.Errorf("after the lease: %+v, %d live, want launched\n%s", r, len(e.ec2.Live()), e.logs.String())
	}
}

// TestLostFleetAnswer (5): CreateFleet launches but its answer is lost. The
// invocation asks again with the same plan and token and gets the same
// instance; when the second answer is lost too, the launch stays in intent
// and the job waits for recovery, which replays the same token: never a
// second instance while the first may be alive.
func TestLostFleetAnswer(t *testing.T) {
	t.Parallel()
	t.Run("once", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, nil)
		e.ec2.LoseAnswers(1)
		if r := e.handle(context.Background(), e.svc, message(job(5), 1)); len(r.BatchItemFailures) != 0 {
			t.Fatalf("%+v\n%s", r, e.logs.String())
		}
		if got := len(e.ec2.Instances()); got != 1 || len(e.regs.all()) != 1 {
			t.Errorf("%d instances, %d registrations; want 1 and 1", got, len(e.regs.all()))
		}
	})
	t.Run("twice", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, nil)
		e.ec2.LoseAnswers(2)
		msg := message(job(6), 1)
		if r := e.handle(context.Background(), e.svc, msg); len(r.BatchItemFailures) != 1 {
			t.Fatalf("%+v, want a retry", r)
		}
		first := e.ec2.Instances()
		if len(first) != 1 {
			t.Fatalf("%d instances, want 1", len(first))
		}
		e.clock.advance(time.Minute)
		msg.ReceiveCount = 2
		if r := e.handle(context.Background(), e.svc, msg); len(r.BatchItemFailures) != 1 || len(e.ec2.Instances()) != 1 {
			t.Fatalf("within the lease: %+v, %d instances; want a retry and no launch", r, len(e.ec2.Instances()))
		}
		// The instance never got its registration: it powered itself off.
		e.ec2.SetState(first[0].ID, "terminated")
		e.clock.advance(scaleup.DefaultClaimLease)
		msg.ReceiveCount = 3
		if r := e.handle(context.Background(), e.svc, msg); len(r.BatchItemFailures) != 0 || len(e.ec2.Live()) != 1 {
			t.Errorf("after the lease: %+v, %d live; want launched\n%s", r, len(e.ec2.Live()), e.logs.String())
		}
		if n, _ := e.ledger.Live(context.Background(), "cpu"); n != 1 {
			t.Errorf("live %d, want 1 (the lost launch's reservation ended)", n)
		}
	})
}

// TestTokenModeOverlappingBatches (6): in registration-token mode two
// invocations get the overlapping batches {1,2} and {1} at once; job 1
// gets one instance, never two. Three guards stand in the way of a second
// one — the claim's conditional write, the ledger's reservation by runner
// name, the fenced launch intent; with all three planted away it fails.
func TestTokenModeOverlappingBatches(t *testing.T) {
	t.Parallel()
	for round := range 20 {
		e := newEnv(t, nil)
		base := int64(100 * (round + 1))
		batches := [][]queue.Delivery{{message(job(base, tokenLabels...), 1), message(job(base+1, tokenLabels...), 1)},
			{message(job(base, tokenLabels...), 1)}}
		e.handleAtOnce(batches...)
		if most := e.maxLivePerJob(); most > 1 {
			t.Fatalf("round %d: a job has %d live instances\n%s", round, most, e.logs.String())
		}
		if n, _ := e.ledger.Live(context.Background(), "tokens"); n != len(e.ec2.Live()) {
			t.Errorf("round %d: live count %d, live instances %d", round, n, len(e.ec2.Live()))
		}
	}
}
