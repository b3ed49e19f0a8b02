package decide_test

import (
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/scaledown/decide"
)

// TestQueuedRunner: a runner pending in its backend's own queue (a Slurm
// job waiting for resources, an unschedulable Pod) is not a failed boot:
// the queue timeout bounds it, and its boot timeout starts when it leaves
// the queue.
func TestQueuedRunner(t *testing.T) {
	t.Parallel()
	const r1 = "skiff-100-1"
	queued := func(launched time.Duration, reason string) provider.Instance {
		in := inst("i-1", r1, launched, provider.Pending)
		in.QueueReason = reason
		return in
	}
	started := func(launched, since time.Duration) provider.Instance {
		in := inst("i-1", r1, launched, provider.Running)
		in.RunningSince = ago(since)
		return in
	}
	cases := []struct {
		name   string
		in     provider.Instance
		policy decide.Policy
		want   string
	}{
		{"queued past the boot timeout: kept", queued(30*time.Minute, "Resources"), decide.Policy{}, ""},
		{"queued past the queue timeout: cancelled, its job checked", queued(61*time.Minute, "Priority"), decide.Policy{},
			"queue_timeout:skiff-100-1/i-1[TSE]"},
		{"queued exactly the queue timeout: cancelled at the timeout", queued(time.Hour, "Priority"), decide.Policy{},
			"queue_timeout:skiff-100-1/i-1[TSE]"},
		{"queued a second short of the queue timeout: kept", queued(time.Hour-time.Second, "Priority"), decide.Policy{}, ""},
		{"the pool's queue timeout", queued(21*time.Minute, "QOSMaxJobsPerUserLimit"), decide.Policy{QueueTimeout: 20 * time.Minute},
			"queue_timeout:skiff-100-1/i-1[TSE]"},
		{"left the queue a moment ago: booting", started(50*time.Minute, 2*time.Minute), decide.Policy{}, ""},
		{"left the queue and never registered", started(50*time.Minute, 11*time.Minute), decide.Policy{},
			"boot_timeout:skiff-100-1/i-1[TSE]"},
		{"pending without a queue reason is booting", inst("i-1", r1, 11*time.Minute, provider.Pending), decide.Policy{},
			"boot_timeout:skiff-100-1/i-1[TSE]"},
		{"the lifetime cap still applies", queued(7*time.Hour, "Resources"), decide.Policy{QueueTimeout: 24 * time.Hour},
			"max_lifetime:skiff-100-1/i-1[TSE]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			d := decide.Decide(decide.Inputs{Now: t0, Instances: []provider.Instance{c.in}, InstancesComplete: true, RunnersComplete: true,
				Ledger: []ledger.Runner{rec(r1, "i-1", ledger.StateLaunched, c.in.LaunchedAt.Sub(t0).Abs())},
				Policy: map[string]decide.Policy{"cpu": c.policy}})
			if got := summary(d); got != c.want {
				t.Errorf("got  %q\nwant %q", got, c.want)
			}
		})
	}
}
