package scaledown_test

import (
	"context"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/scaledown"
)

// TestBusySignalsInDepth: four signals keep a busy runner alive — GitHub's
// busy flag, the ledger's job start, the job-started hook's tag, and
// GitHub's refusal to delete a runner running a job. In each case one
// signal alone stands between a runner running a two-hour job and the idle
// rule (the ledger saw it registered 11 minutes ago; the idle timeout is
// 10): ignoring that one signal terminates the runner. The control case,
// with no signal at all, shows the setup would reap it.
func TestBusySignalsInDepth(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		flag       bool // GitHub's REST API shows the runner busy
		ledger     bool // the webhook's in_progress reached the ledger
		tag        bool // the job-started hook tagged the instance
		refuse     bool // GitHub refuses to delete the busy runner
		wantKept   bool
		wantReason string // the ScaleDownKept reason counted
	}{
		{name: "no signal: the control, reaped as idle"},
		{name: "GitHub's busy flag alone", flag: true, wantKept: true, wantReason: "busy"},
		{name: "the ledger's job start alone", ledger: true, wantKept: true, wantReason: "busy"},
		{name: "the hook's tag alone", tag: true, wantKept: true, wantReason: "busy"},
		{name: "GitHub's refusal to delete alone", refuse: true, wantKept: true, wantReason: "github_refused"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWorldSim(t, 31, func(o *ghsim.Options) { o.DeleteBusy = !tc.refuse })
			ctx := context.Background()
			start := w.clock.Now()
			job, _, in := w.launchOne(ctx, 2*time.Hour)
			name := in.Tags[names.TagRunnerName]
			if !tc.flag {
				w.lags[job] = 24 * time.Hour // the busy flag reads false all along
			}
			reg, ok := w.dry.Delivered(in.ID)
			if !ok {
				t.Fatal("no registration delivered")
			}
			if _, err := w.sim.ConnectRunner(reg.JITConfig); err != nil {
				t.Fatal(err)
			}
			if js, _ := w.sim.Job(job); js.Status != "in_progress" || js.RunnerName != name {
				t.Fatalf("job %+v, want it running on %s", js, name)
			}
			// A pass saw the runner registered (idle, by its flag) at the start.
			if err := w.ledger.Advance(ctx, name, ledger.StateRegistered, start, 0); err != nil {
				t.Fatal(err)
			}
			if tc.ledger {
				if err := w.ledger.Advance(ctx, name, ledger.StateJobStarted, start, job); err != nil {
					t.Fatal(err)
				}
			}
			if tc.tag {
				w.prov.tag(in.ID, names.TagJobStarted, start.Format(time.RFC3339))
			}
			w.clock.Advance(11 * time.Minute)
			if _, err := w.down.Reconcile(ctx); err != nil {
				t.Fatal(err)
			}

			alive, _ := w.dry.List(ctx, provider.Filter{IDs: []string{in.ID}, AliveOnly: true})
			r, err := w.ledger.Runner(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			if kept := len(alive) == 1 && r.State.Live(); kept != tc.wantKept {
				t.Errorf("runner running job %d kept: %v (instance alive %v, record %s), want %v", job, kept, len(alive) == 1,
					r.State, tc.wantKept)
			}
			if tc.wantReason != "" && w.counter.Get(scaledown.MetricKept, tc.wantReason) == 0 {
				t.Errorf("nothing counted as kept for %q; counters %v", tc.wantReason, w.counter.Snapshot())
			}
		})
	}
}
