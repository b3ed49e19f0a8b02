package scaleup_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/scaleup"
)

// TestOnDemandRerun: a job of a run's re-run attempt that scale-down marked
// (a spot interruption failed the earlier attempt) launches on on-demand
// capacity; the earlier attempt's jobs, other runs and other pools keep
// the pool's spot.
func TestOnDemandRerun(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	marked, other := job(1), job(100)
	if err := e.store.MarkOnDemand(ctx, marked.RunID, "cpu", 2, start.Add(ledger.OnDemandTTL)); err != nil {
		t.Fatal(err)
	}
	first := marked // attempt 1 of the marked run: already launched before the mark
	first.JobID = 2
	rerun := marked
	rerun.JobID, rerun.Attempt = 3, 2
	otherRerun := other
	otherRerun.Attempt = 2
	if r := e.handle(ctx, e.svc, message(first, 1), message(rerun, 1), message(otherRerun, 1)); len(r.BatchItemFailures) != 0 {
		t.Fatalf("batch: %+v", r)
	}
	byType := map[string]int32{}
	for _, in := range e.ec2.CreateFleetInputs() {
		byType[string(in.TargetCapacitySpecification.DefaultTargetCapacityType)] += aws.ToInt32(in.TargetCapacitySpecification.TotalTargetCapacity)
	}
	if byType["on-demand"] != 1 || byType["spot"] != 2 {
		t.Errorf("runners by capacity %v, want 1 on-demand (the marked re-run) and 2 spot", byType)
	}
	if got := e.counter.Get(scaleup.MetricOnDemandReruns, "cpu"); got != 1 {
		t.Errorf("%v on-demand re-runs counted, want 1", got)
	}
}

// failingMarks is a launch store whose on-demand marks cannot be read.
type failingMarks struct{ *ledger.LaunchMemory }

func (failingMarks) OnDemandFrom(context.Context, int64, string, time.Time) (int, error) {
	return 0, errors.New("table unavailable")
}

// TestOnDemandRerunUnreadable: a mark that cannot be read does not hold the
// job back: it launches on the pool's capacity, and the reason is logged.
func TestOnDemandRerunUnreadable(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *scaleup.Options) { o.Launches = failingMarks{o.Launches.(*ledger.LaunchMemory)} })
	j := job(1)
	j.Attempt = 2
	if r := e.handle(context.Background(), e.svc, message(j, 1)); len(r.BatchItemFailures) != 0 {
		t.Fatalf("batch: %+v", r)
	}
	if n := len(e.ec2.CreateFleetInputs()); n != 1 {
		t.Fatalf("%d CreateFleet calls, want 1", n)
	}
	if got := string(e.ec2.CreateFleetInputs()[0].TargetCapacitySpecification.DefaultTargetCapacityType); got != "spot" {
		t.Errorf("capacity %s, want the pool's spot", got)
	}
	if !strings.Contains(e.logs.String(), "could not read the run's on-demand mark") {
		t.Errorf("no warning logged:\n%s", e.logs.String())
	}
}
