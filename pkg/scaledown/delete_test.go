package scaledown_test

import (
	"context"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/provider"
)

// TestTerminateOnlyAfterTheRunnerIsDeleted: an idle runner (its job was
// cancelled before it connected) is reaped by deleting it on GitHub first
// and terminating its instance only then — never before the delete, which
// is what stops GitHub from giving the runner a job as it goes, and never
// after a failed delete, which leaves both for the next pass.
func TestTerminateOnlyAfterTheRunnerIsDeleted(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 41)
	ctx := context.Background()
	start := w.clock.Now()
	job, _, in := w.launchOne(ctx, time.Hour)
	name := in.Tags[names.TagRunnerName]
	if err := w.sim.CancelJob(job); err != nil {
		t.Fatal(err)
	}
	reg, ok := w.dry.Delivered(in.ID)
	if !ok {
		t.Fatal("no registration delivered")
	}
	if _, err := w.sim.ConnectRunner(reg.JITConfig); err != nil {
		t.Fatal(err)
	}
	if err := w.ledger.Advance(ctx, name, ledger.StateRegistered, start, 0); err != nil {
		t.Fatal(err)
	}
	registered := func() bool {
		for _, r := range w.sim.Runners() {
			if r.Name == name {
				return true
			}
		}
		return false
	}
	terminates := 0
	w.prov.onTerminate = func(ids []string) {
		terminates++
		if registered() {
			t.Errorf("instance %v terminated while its runner %s is still registered on GitHub", ids, name)
		}
	}
	alive := func() bool {
		live, _ := w.dry.List(ctx, provider.Filter{IDs: []string{in.ID}, AliveOnly: true})
		return len(live) == 1
	}

	// The delete fails (GitHub answers 500 to it and to the client's
	// retries): nothing is terminated.
	w.sim.SetFault(ghsim.OpDeleteOrgRunner, ghsim.Fault{FailNext: 100, ErrorStatus: 500})
	w.clock.Advance(11 * time.Minute)
	if _, err := w.down.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if !alive() || !registered() || terminates != 0 {
		t.Fatalf("after a failed delete: instance alive %v, runner registered %v, %d terminates; want both kept, none",
			alive(), registered(), terminates)
	}
	if r, _ := w.ledger.Runner(ctx, name); !r.State.Live() {
		t.Errorf("after a failed delete the record is %s, want it live", r.State)
	}

	// The next pass deletes the runner, then terminates the instance.
	w.sim.ClearFaults()
	w.clock.Advance(time.Minute)
	if _, err := w.down.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if alive() || registered() || terminates != 1 {
		t.Errorf("next pass: instance alive %v, runner registered %v, %d terminates; want both gone, one terminate",
			alive(), registered(), terminates)
	}
}
