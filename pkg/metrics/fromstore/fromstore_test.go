package fromstore

import (
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/metrics"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/provider/ec2/ec2prices"
	"github.com/skiffci/skiff/pkg/store"
)

// TestBuildFromStore builds a record from the store's own types.
func TestBuildFromStore(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	j := store.JobRecord{ID: 5, RunID: 6, Attempt: 2, Repository: "acme/api", Owner: "acme", Status: store.StatusCompleted,
		Pool: "gpu", WorkflowName: "Train", JobName: "fit", QueuedAt: t0, StartedAt: t0.Add(time.Minute), CompletedAt: t0.Add(time.Hour), Conclusion: "success"}
	run := store.RunRecord{ID: 6, Attempt: 2, Event: "schedule", WorkflowName: "Train"}
	inst := provider.Instance{ID: "i-1", InstanceType: "g6.xlarge", Zone: "us-east-1a", Capacity: provider.Spot, LaunchedAt: t0.Add(20 * time.Second)}
	r, err := metrics.Build(metrics.Inputs{Job: Job(j), Run: Run(run), Instance: Instance(inst, "us-east-1"), CloudProvider: "aws", Prices: ec2prices.Prices})
	if err != nil {
		t.Fatal(err)
	}
	if r.Trigger != "schedule" || r.RunAttempt != 2 || r.CapacityType != "spot" || r.Region != "us-east-1" || r.GPU.Count != 1 {
		t.Fatalf("record = %+v", r)
	}
}
