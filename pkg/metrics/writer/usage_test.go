package writer_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/metrics"
	"github.com/skiffci/skiff/pkg/metrics/writer"
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
	st, led := recordWorld(t)
	if _, err := st.RecordJob(ctx, store.JobRecord{ID: 10, RunID: 70, Attempt: 1, Repository: "acme/app", Owner: "acme", Status: store.StatusCompleted,
		Pool: "cpu", WorkflowName: "ci", JobName: "fit", QueuedAt: m0, StartedAt: m0.Add(time.Minute), CompletedAt: m0.Add(31 * time.Minute),
		RunnerName: "skiff-10-1", Conclusion: "success", UpdatedAt: m0, ExpiresAt: m0.AddDate(10, 0, 0)}); err != nil {
		t.Fatal(err)
	}
	launched(t, led, ledger.Runner{Name: "skiff-10-1", Pool: "cpu", JobID: 10, ReservedAt: m0},
		ledger.LaunchReport{InstanceID: "proc-1", InstanceType: "local", Zone: "local", At: m0})
	cpu, gib := 120.5, 3.25
	gpus := 0
	out := &metrics.MemoryRecords{}
	w := &writer.RecordWriter{Pools: []string{"*"}, Jobs: st, Ledger: led, Out: out, CloudProvider: "local", Region: "local",
		Peaks: writer.ProviderPeaks{Source: measured{"proc-1": {CPUSeconds: &cpu, MemoryPeakGiB: &gib}}},
		Host:  &metrics.Host{CPUModel: "AMD EPYC 7R13", CPUs: 8, GPUs: &gpus}, CostPerHour: map[string]float64{"cpu": 0.5}}
	done := w.Write(ctx, m0.Add(32*time.Minute), []writer.MetricsJob{{Runner: "skiff-10-1", Pool: "cpu", JobID: 10, InstanceID: "proc-1"}})
	if done["skiff-10-1"] != writer.Done {
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

// accounted is an AccountedSource: the accounting knows some runners,
// none (off), or fails.
type accounted struct {
	known map[string]*metrics.Peaks
	err   error
	asked [][]string
}

func (a *accounted) Accounted(_ context.Context, ids []string) (map[string]*metrics.Peaks, error) {
	a.asked = append(a.asked, ids)
	return a.known, a.err
}

// TestRecordWriterAccounted: a Slurm job's record takes its peaks, host
// and placement from the accounting, read once for the pass; a job the
// accounting does not know yet waits (within the writer's Wait), and an
// accounting that fails holds every record.
func TestRecordWriterAccounted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, led := recordWorld(t)
	var jobs []writer.MetricsJob
	for i, id := range []int64{20, 21} {
		if _, err := st.RecordJob(ctx, store.JobRecord{ID: id, RunID: 70, Attempt: 1, Repository: "acme/app", Owner: "acme", Status: store.StatusCompleted,
			Pool: "hpc", WorkflowName: "ci", JobName: "fit", QueuedAt: m0, StartedAt: m0.Add(time.Minute), CompletedAt: m0.Add(11 * time.Minute),
			RunnerName: "skiff-" + string(rune('a'+i)), Conclusion: "success", UpdatedAt: m0, ExpiresAt: m0.AddDate(10, 0, 0)}); err != nil {
			t.Fatal(err)
		}
		r := ledger.Runner{Name: "skiff-" + string(rune('a'+i)), Pool: "hpc", JobID: id, ReservedAt: m0}
		launched(t, led, r, ledger.LaunchReport{InstanceID: string(rune('1' + i)), InstanceType: "gpu", Zone: "hpc", At: m0})
		jobs = append(jobs, writer.MetricsJob{Runner: r.Name, Pool: "hpc", JobID: id, InstanceID: string(rune('1' + i))})
	}
	cpu, gib, gpus := 300.0, 2.0, 1
	src := &accounted{known: map[string]*metrics.Peaks{"1": {CPUSeconds: &cpu, MemoryPeakGiB: &gib, Host: &metrics.Host{CPUs: 2, GPUs: &gpus},
		Slurm: &metrics.Slurm{Cluster: "hpc", Partition: "gpu", Nodes: "node7", JobID: "1", State: "COMPLETED"}}}}
	out := &metrics.MemoryRecords{}
	w := &writer.RecordWriter{Pools: []string{"*"}, Jobs: st, Ledger: led, Out: out, CloudProvider: "slurm",
		Peaks: writer.AccountedPeaks{Source: src}, CostPerHour: map[string]float64{"hpc": 2}, Wait: 10 * time.Minute}
	done := w.Write(ctx, m0.Add(12*time.Minute), jobs)
	if done["skiff-a"] != writer.Done || done["skiff-b"] != writer.Wait || len(src.asked) != 1 || !slices.Equal(src.asked[0], []string{"1", "2"}) {
		t.Fatalf("done %v after asking %v: want skiff-a written and skiff-b waiting, one read for both", done, src.asked)
	}
	recs := collect(t, out)
	if len(recs) != 1 || recs[0].Slurm == nil || recs[0].Slurm.Nodes != "node7" || recs[0].Host == nil || recs[0].Host.CPUs != 2 ||
		recs[0].GPU == nil || recs[0].GPU.Count != 1 || recs[0].Cost == nil || recs[0].CloudProvider != "slurm" || recs[0].InstanceType != "gpu" {
		t.Fatalf("records %+v", recs)
	}
	// A failing accounting holds the waiting record; after Wait it is
	// written without usage.
	src.err = errors.New("slurmdbd does not answer")
	if done := w.Write(ctx, m0.Add(13*time.Minute), jobs[1:]); done["skiff-b"] != writer.Wait {
		t.Errorf("a record was written while the accounting failed, within Wait")
	}
	if done := w.Write(ctx, m0.Add(22*time.Minute), jobs[1:]); done["skiff-b"] != writer.Done {
		t.Errorf("the record still waits after Wait")
	}
	recs = collect(t, out)
	if len(recs) != 2 || !slices.Contains(recs[1].MissingSources, metrics.SourceAgent) {
		t.Errorf("records %+v: want the second without usage", recs)
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
	res, err := writer.ProviderPeaks{Source: src}.Read(context.Background(), toWindows(windows))
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
	res, _ = writer.ProviderPeaks{Source: src.measured}.Read(context.Background(), toWindows(windows))
	if len(res.Pending) != 0 {
		t.Errorf("pending %+v from a source that cannot tell", res.Pending)
	}
}

type cwpeaksWindow struct {
	id  string
	job int64
}

func toWindows(ws []cwpeaksWindow) []metrics.PeakWindow {
	var out []metrics.PeakWindow
	for _, w := range ws {
		out = append(out, metrics.PeakWindow{Key: metrics.Key{JobID: w.job, RunAttempt: 1}, InstanceID: w.id})
	}
	return out
}
