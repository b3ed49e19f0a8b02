package scaledown_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/launch"
	"github.com/skiffci/skiff/pkg/metrics"
	"github.com/skiffci/skiff/pkg/metrics/cwpeaks"
	"github.com/skiffci/skiff/pkg/scaledown"
	"github.com/skiffci/skiff/pkg/store"
)

// measured is a UsageSource: a provider that measured one runner.
type measured map[string]*metrics.Peaks

func (m measured) Peaks(id string) (*metrics.Peaks, bool) { p, ok := m[id]; return p, ok }

// TestRecordWriterLocal writes the record of a job run as a local
// process: peaks from the provider, the host, the pool's hourly cost.
func TestRecordWriterLocal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, ledger := recordWorld(t)
	if _, err := st.RecordJob(ctx, store.Job{ID: 10, RunID: 70, Attempt: 1, Repository: "acme/app", Owner: "acme", Status: store.StatusCompleted,
		Pool: "cpu", WorkflowName: "ci", JobName: "fit", QueuedAt: m0, StartedAt: m0.Add(time.Minute), CompletedAt: m0.Add(31 * time.Minute),
		RunnerName: "skiff-10-1", Conclusion: "success", UpdatedAt: m0, ExpiresAt: m0.AddDate(10, 0, 0)}); err != nil {
		t.Fatal(err)
	}
	r := launch.Runner{Name: "skiff-10-1", Pool: "cpu", JobID: 10, ReservedAt: m0}
	if _, err := ledger.Reserve(ctx, "cpu", 10, []launch.Runner{r}); err != nil {
		t.Fatal(err)
	}
	if err := ledger.Launched(ctx, r.Name, launch.Launch{InstanceID: "proc-1", InstanceType: "local", Zone: "local", At: m0}); err != nil {
		t.Fatal(err)
	}
	cpu, gib := 120.5, 3.25
	gpus := 0
	out := &metrics.MemoryRecords{}
	w := &scaledown.RecordWriter{Pools: []string{"*"}, Records: st, Ledger: ledger, Out: out, CloudProvider: "local", Region: "local",
		Peaks: scaledown.ProviderPeaks{Source: measured{"proc-1": {CPUSeconds: &cpu, MemoryPeakGiB: &gib}}},
		Host:  &metrics.Host{CPUModel: "AMD EPYC 7R13", CPUs: 8, GPUs: &gpus}, CostPerHour: map[string]float64{"cpu": 0.5}}
	done := w.Write(ctx, m0.Add(32*time.Minute), []scaledown.MetricsJob{{Runner: "skiff-10-1", Pool: "cpu", JobID: 10, InstanceID: "proc-1"}})
	if !done["skiff-10-1"] {
		t.Fatalf("done %v", done)
	}
	recs := collect(t, out)
	if len(recs) != 1 {
		t.Fatalf("%d records", len(recs))
	}
	rec := recs[0]
	if rec.CloudProvider != "local" || rec.InstanceType != "local" || rec.Host == nil || rec.Host.CPUModel != "AMD EPYC 7R13" {
		t.Errorf("identity %s %s %+v", rec.CloudProvider, rec.InstanceType, rec.Host)
	}
	if rec.CPU == nil || *rec.CPU.Seconds != 120.5 || rec.Memory == nil || *rec.Memory.PeakGiB != 3.25 {
		t.Errorf("usage cpu %+v memory %+v", rec.CPU, rec.Memory)
	}
	// Launched at m0, ended at m0+32m (the pass): 32 minutes at $0.50/h.
	if rec.Cost == nil || rec.Cost.Basis != metrics.BasisOperatorRate || rec.Cost.EstimatedUSD != 0.266667 {
		t.Errorf("cost %+v", rec.Cost)
	}
	if want := []string{metrics.SourceDisk, metrics.SourceGPU}; !slices.Equal(rec.MissingSources, want) {
		t.Errorf("missingSources %v, want %v", rec.MissingSources, want)
	}
	if err := metrics.Validate(rec); err != nil {
		t.Error(err)
	}
}

// pendingSource is a PendingUsage: it measured "done" and will yet
// measure "running".
type pendingSource struct{ measured }

func (pendingSource) UsagePending(id string) bool { return id == "running" }

// TestProviderPeaksPending: a runner whose usage its provider says is
// still to come is a pending window (its record waits), one the provider
// neither measured nor expects has no peaks and is not pending.
func TestProviderPeaksPending(t *testing.T) {
	t.Parallel()
	gib := 1.0
	src := pendingSource{measured{"done": {MemoryPeakGiB: &gib}}}
	windows := []cwpeaksWindow{{id: "done", job: 1}, {id: "running", job: 2}, {id: "unknown", job: 3}}
	res, err := scaledown.ProviderPeaks{Source: src}.Read(context.Background(), toWindows(windows))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Peaks) != 1 || res.Peaks[metrics.Key{JobID: 1, RunAttempt: 1}] == nil {
		t.Errorf("peaks %v, want job 1's only", res.Peaks)
	}
	if len(res.Pending) != 1 || res.Pending[0].InstanceID != "running" {
		t.Errorf("pending %+v, want the running runner's window only", res.Pending)
	}
	// Without PendingUsage nothing is ever pending.
	res, _ = scaledown.ProviderPeaks{Source: src.measured}.Read(context.Background(), toWindows(windows))
	if len(res.Pending) != 0 {
		t.Errorf("pending %+v from a source that cannot tell", res.Pending)
	}
}

type cwpeaksWindow struct {
	id  string
	job int64
}

func toWindows(ws []cwpeaksWindow) []cwpeaks.Window {
	var out []cwpeaks.Window
	for _, w := range ws {
		out = append(out, cwpeaks.Window{Key: metrics.Key{JobID: w.job, RunAttempt: 1}, InstanceID: w.id})
	}
	return out
}
