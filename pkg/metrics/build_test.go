package metrics

import (
	"encoding/json"
	"errors"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/provider/ec2/ec2prices"
)

var t0 = time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)

func f(v float64) *float64 { return &v }

// baseInputs is a finished CPU job on an on-demand c7i.large with every
// source present.
func baseInputs() Inputs {
	return Inputs{
		Job: JobInput{ID: 101, RunID: 7001, Attempt: 1, Repository: "acme/api", Owner: "acme",
			Labels: []string{"self-hosted", "linux", "x64"}, Pool: "standard", WorkflowName: "CI", JobName: "test",
			RunnerName: "skiff-101-1", Conclusion: "success",
			QueuedAt: t0, StartedAt: t0.Add(40 * time.Second), CompletedAt: t0.Add(40*time.Second + 12*time.Minute + 5*time.Second)},
		Run:           RunInput{ID: 7001, Attempt: 1, Event: "push", WorkflowName: "CI"},
		Instance:      InstanceInput{ID: "i-0abc", Type: "c7i.large", Region: "us-east-1", Zone: "us-east-1b", Capacity: CapacityOnDemand, LaunchedAt: t0.Add(5 * time.Second), EndedAt: t0.Add(13 * time.Minute)},
		CloudProvider: "aws",
		Peaks:         &Peaks{CPUPeak: f(93.456), CPUMean: f(41.2), MemoryPeak: f(62.5), DiskPeak: f(31)},
		Prices:        ec2prices.Prices,
	}
}

func gpuInputs() Inputs {
	in := baseInputs()
	in.Job.Pool = "gpu"
	in.Instance.Type = "g5.2xlarge"
	in.Instance.Capacity = CapacitySpot
	in.Peaks.GPUs = []GPUPeak{{Index: 0, Model: "NVIDIA A10G", Utilization: f(88), MemoryUsedMiB: f(6246), MemoryTotalMiB: f(23028)}}
	return in
}

// keys returns the JSON object's keys at a dotted path ("" for the top).
func keys(t *testing.T, r Record, path string) []string {
	t.Helper()
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	if path != "" {
		for _, p := range strings.Split(path, ".") {
			sub, ok := m[p].(map[string]any)
			if !ok {
				return nil
			}
			m = sub
		}
	}
	return slices.Sorted(maps.Keys(m))
}

// buildCase edits baseInputs and checks what Build makes of them: the error
// it must return, or the record it must build.
type buildCase struct {
	name    string
	edit    func(in *Inputs)
	wantErr error
	check   func(t *testing.T, r Record)
}

// runBuildCases runs each case as a subtest. A built record must validate
// and carry the schema's version before its own check runs.
func runBuildCases(t *testing.T, cases []buildCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := baseInputs()
			if tc.edit != nil {
				tc.edit(&in)
			}
			r, err := Build(in)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Build: %v", err)
			}
			if err := Validate(r); err != nil {
				t.Fatalf("the built record does not validate: %v", err)
			}
			if r.Version != SchemaVersion {
				t.Errorf("version = %q", r.Version)
			}
			tc.check(t, r)
		})
	}
}

// TestBuildUsage checks the usage fields: what the agent measured is kept
// as measured, and each series it lacks is named in the missing sources.
func TestBuildUsage(t *testing.T) {
	t.Parallel()
	runBuildCases(t, []buildCase{
		{name: "cpu job, every source", check: func(t *testing.T, r Record) {
			if r.Runtime.ISO8601() != "PT12M5S" || r.QueueWait.ISO8601() != "PT40S" {
				t.Errorf("runtime %s, queue wait %s", r.Runtime.ISO8601(), r.QueueWait.ISO8601())
			}
			if *r.CPU.PeakPercent != 93.46 || *r.Memory.PeakGiB != 2.5 || *r.Disk.PeakRootPercent != 31 {
				t.Errorf("cpu %v memory GiB %v disk %v", *r.CPU.PeakPercent, *r.Memory.PeakGiB, *r.Disk.PeakRootPercent)
			}
			if r.GPU != nil || r.GPUs != nil {
				t.Errorf("a CPU instance has GPU fields: %+v %+v", r.GPU, r.GPUs)
			}
			if !reflect.DeepEqual(r.MissingSources, []string{SourceGPU}) {
				t.Errorf("missing = %v, want [gpu]", r.MissingSources)
			}
			// launched 09:00:05, ended 09:13:00 (775 s) at $0.08925/h on demand
			if r.Cost == nil || r.Cost.Basis != BasisOnDemandList || r.Cost.EstimatedUSD != 0.019214 || !r.Cost.Estimate {
				t.Errorf("cost = %+v", r.Cost)
			}
		}},
		{name: "zero CPU is kept, not dropped", edit: func(in *Inputs) { in.Peaks.CPUPeak = f(0); in.Peaks.CPUMean = f(0) }, check: func(t *testing.T, r Record) {
			if got := keys(t, r, "cpu"); !reflect.DeepEqual(got, []string{"meanPercent", "peakPercent"}) {
				t.Errorf("cpu keys = %v", got)
			}
		}},
		{name: "agent off: no usage fields at all", edit: func(in *Inputs) { in.Peaks = nil }, check: func(t *testing.T, r Record) {
			for _, k := range keys(t, r, "") {
				if k == "cpu" || k == "memory" || k == "disk" || k == "gpu" || k == "gpus" {
					t.Errorf("agent off, yet the record has %q", k)
				}
			}
			if !reflect.DeepEqual(r.MissingSources, []string{SourceAgent, SourceGPU}) {
				t.Errorf("missing = %v", r.MissingSources)
			}
			if r.Cost == nil {
				t.Error("the cost does not need the agent")
			}
		}},
		{name: "agent answered with nothing is agent off", edit: func(in *Inputs) { in.Peaks = &Peaks{} }, check: func(t *testing.T, r Record) {
			if r.CPU != nil || !slices.Contains(r.MissingSources, SourceAgent) {
				t.Errorf("cpu %+v, missing %v", r.CPU, r.MissingSources)
			}
		}},
		{name: "disk series missing", edit: func(in *Inputs) { in.Peaks.DiskPeak = nil }, check: func(t *testing.T, r Record) {
			if r.Disk != nil || !reflect.DeepEqual(r.MissingSources, []string{SourceDisk, SourceGPU}) {
				t.Errorf("disk %+v, missing %v", r.Disk, r.MissingSources)
			}
		}},
		{name: "percent over 100 is clamped", edit: func(in *Inputs) { in.Peaks.CPUPeak = f(100.4) }, check: func(t *testing.T, r Record) {
			if *r.CPU.PeakPercent != 100 {
				t.Errorf("cpu = %v", *r.CPU.PeakPercent)
			}
		}},
	})
}

// TestBuildGPU checks the GPU fields of a GPU instance's record.
func TestBuildGPU(t *testing.T) {
	t.Parallel()
	runBuildCases(t, []buildCase{
		{name: "gpu job on spot", edit: func(in *Inputs) { *in = gpuInputs() }, check: func(t *testing.T, r Record) {
			if r.GPU == nil || r.GPU.Count != 1 || r.GPU.Model != "a10g" || *r.GPU.PeakMemoryMiB != 6246 || *r.GPU.PeakMemoryPercent != 27.12 {
				t.Errorf("gpu = %+v", r.GPU)
			}
			if len(r.GPUs) != 1 || r.GPUs[0].Model != "NVIDIA A10G" || *r.GPUs[0].PeakUtilizationPercent != 88 {
				t.Errorf("gpus = %+v", r.GPUs)
			}
			if r.MissingSources != nil {
				t.Errorf("missing = %v", r.MissingSources)
			}
			if r.Cost.Basis != BasisSpotEstimate || r.Cost.HourlyUSD != round(ec2prices.Prices.Lookup("g5.2xlarge").OnDemand*DefaultSpotFactor, 1e6) {
				t.Errorf("cost = %+v", r.Cost)
			}
		}},
		{name: "gpu series missing: count kept, no peaks", edit: func(in *Inputs) { *in = gpuInputs(); in.Peaks.GPUs = nil }, check: func(t *testing.T, r Record) {
			if r.GPU == nil || r.GPU.Count != 1 || r.GPU.PeakUtilizationPercent != nil || r.GPUs != nil {
				t.Errorf("gpu = %+v gpus = %+v", r.GPU, r.GPUs)
			}
			if got := keys(t, r, "gpu"); !reflect.DeepEqual(got, []string{"count", "model"}) {
				t.Errorf("gpu keys = %v", got)
			}
			if !reflect.DeepEqual(r.MissingSources, []string{SourceGPU}) {
				t.Errorf("missing = %v", r.MissingSources)
			}
		}},
		{name: "several GPUs: totals are the highest", edit: func(in *Inputs) {
			*in = gpuInputs()
			in.Instance.Type = "g4dn.12xlarge"
			in.Peaks.GPUs = []GPUPeak{
				{Index: 1, Utilization: f(20), MemoryUsedMiB: f(9000), MemoryTotalMiB: f(15360)},
				{Index: 0, Utilization: f(95), MemoryUsedMiB: f(1000), MemoryTotalMiB: f(15360)},
			}
		}, check: func(t *testing.T, r Record) {
			if r.GPUs[0].Index != 0 || r.GPU.Count != 4 || *r.GPU.PeakUtilizationPercent != 95 || *r.GPU.PeakMemoryMiB != 9000 {
				t.Errorf("gpus %+v gpu %+v", r.GPUs, r.GPU)
			}
		}},
	})
}

// TestBuildTimesAndCost checks the times, the interruption and the cost estimate of a record.
func TestBuildTimesAndCost(t *testing.T) {
	t.Parallel()
	runBuildCases(t, []buildCase{
		{name: "interrupted before GitHub said completed", edit: func(in *Inputs) {
			in.Job.CompletedAt, in.Job.Conclusion = time.Time{}, ""
			in.Instance.Interrupted, in.Instance.Capacity = true, CapacitySpot
			in.Instance.EndedAt = in.Job.StartedAt.Add(3 * time.Minute)
		}, check: func(t *testing.T, r Record) {
			if !*r.Interrupted || r.Runtime.ISO8601() != "PT3M" || r.CompletedAt != nil || r.Conclusion != "" {
				t.Errorf("interrupted %v runtime %s completed %v conclusion %q", *r.Interrupted, r.Runtime.ISO8601(), r.CompletedAt, r.Conclusion)
			}
		}},
		{name: "unknown instance type: no cost, no GiB", edit: func(in *Inputs) { in.Instance.Type = "x9.huge" }, check: func(t *testing.T, r Record) {
			if r.Cost != nil || r.Memory.PeakGiB != nil || !slices.Contains(r.MissingSources, SourcePrice) {
				t.Errorf("cost %+v memory %+v missing %v", r.Cost, r.Memory, r.MissingSources)
			}
		}},
		{name: "capacity unknown: no cost", edit: func(in *Inputs) { in.Instance.Capacity = "" }, check: func(t *testing.T, r Record) {
			if r.Cost != nil || r.CapacityType != "" {
				t.Errorf("cost %+v capacity %q", r.Cost, r.CapacityType)
			}
		}},
		{name: "short job billed a minute", edit: func(in *Inputs) {
			in.Instance.LaunchedAt, in.Instance.EndedAt = time.Time{}, time.Time{}
			in.Job.CompletedAt = in.Job.StartedAt.Add(10 * time.Second)
		}, check: func(t *testing.T, r Record) {
			if r.Runtime.ISO8601() != "PT10S" || r.Cost.EstimatedUSD != round(0.08925/60, 1e6) {
				t.Errorf("runtime %s cost %+v", r.Runtime.ISO8601(), r.Cost)
			}
		}},
	})
}

// TestBuildIdentity checks the key and the names a record takes from its job and run.
func TestBuildIdentity(t *testing.T) {
	t.Parallel()
	runBuildCases(t, []buildCase{
		{name: "re-run attempt", edit: func(in *Inputs) { in.Job.ID, in.Job.Attempt, in.Run.Attempt = 202, 2, 2 }, check: func(t *testing.T, r Record) {
			if r.Key() != (Key{JobID: 202, RunAttempt: 2}) || r.Key().String() != "202#2" {
				t.Errorf("key = %+v", r.Key())
			}
		}},
		{name: "attempt unknown reads as 1", edit: func(in *Inputs) { in.Job.Attempt = 0 }, check: func(t *testing.T, r Record) {
			if r.RunAttempt != 1 {
				t.Errorf("attempt = %d", r.RunAttempt)
			}
		}},
		{name: "workflow name from the run", edit: func(in *Inputs) { in.Job.WorkflowName = "" }, check: func(t *testing.T, r Record) {
			if r.WorkflowName != "CI" {
				t.Errorf("workflow = %q", r.WorkflowName)
			}
		}},
	})
}

// TestBuildRefuses checks that Build refuses a job that has not finished,
// did not run, or lacks an input the record needs.
func TestBuildRefuses(t *testing.T) {
	t.Parallel()
	runBuildCases(t, []buildCase{
		{name: "interrupted, end unknown", edit: func(in *Inputs) {
			in.Job.CompletedAt = time.Time{}
			in.Instance.Interrupted, in.Instance.EndedAt = true, time.Time{}
		}, wantErr: ErrNotFinished},
		{name: "still running", edit: func(in *Inputs) { in.Job.CompletedAt = time.Time{} }, wantErr: ErrNotFinished},
		{name: "cancelled before start", edit: func(in *Inputs) {
			in.Job.StartedAt, in.Job.Conclusion = time.Time{}, "cancelled"
		}, wantErr: ErrNotRun},
		{name: "no run record", edit: func(in *Inputs) { in.Run = RunInput{} }, wantErr: ErrIncomplete},
		{name: "another run's record", edit: func(in *Inputs) { in.Run.ID = 9 }, wantErr: ErrIncomplete},
		{name: "no instance type", edit: func(in *Inputs) { in.Instance.Type = "" }, wantErr: ErrIncomplete},
	})
}

// TestValidateRejects checks that the validator holds the contract: each
// case breaks one rule of the schema.
func TestValidateRejects(t *testing.T) {
	t.Parallel()
	good, err := Build(gpuInputs())
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(good)
	cases := []struct {
		name string
		edit func(m map[string]any)
		want string
	}{
		{"runtime not ISO 8601", func(m map[string]any) { m["runtime"] = "90s" }, "/runtime"},
		{"repository without owner", func(m map[string]any) { m["repository"] = "api" }, "/repository"},
		{"no trigger", func(m map[string]any) { delete(m, "trigger") }, "trigger"},
		{"unknown capacity", func(m map[string]any) { m["capacityType"] = "reserved" }, "/capacityType"},
		{"percent over 100", func(m map[string]any) { m["cpu"].(map[string]any)["peakPercent"] = 101.0 }, "/cpu/peakPercent"},
		{"empty cpu object", func(m map[string]any) { m["cpu"] = map[string]any{} }, "/cpu"},
		{"cost not an estimate", func(m map[string]any) { m["cost"].(map[string]any)["estimate"] = false }, "/cost/estimate"},
		{"bad timestamp", func(m map[string]any) { m["startedAt"] = "yesterday" }, "/startedAt"},
		{"unknown field", func(m map[string]any) { m["cpuPeak"] = 3.0 }, "cpuPeak"},
		{"unknown missing source", func(m map[string]any) { m["missingSources"] = []any{"network"} }, "/missingSources"},
		{"gpu without count", func(m map[string]any) { delete(m["gpu"].(map[string]any), "count") }, "/gpu"},
		{"unknown end reason", func(m map[string]any) { m["endReason"] = "OOMKilled: exit code 137" }, "/endReason"},
		{"exit code not a number", func(m map[string]any) { m["exitCode"] = "137" }, "/exitCode"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var m map[string]any
			_ = json.Unmarshal(data, &m)
			tc.edit(m)
			bad, _ := json.Marshal(m)
			err := ValidateJSON(bad)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrInvalid naming %q", err, tc.want)
			}
		})
	}
}

func TestDuration(t *testing.T) {
	t.Parallel()
	cases := []struct {
		d    time.Duration
		want string
	}{
		{0, "PT0S"}, {-time.Second, "PT0S"}, {400 * time.Millisecond, "PT0S"}, {1500 * time.Millisecond, "PT2S"},
		{59 * time.Second, "PT59S"}, {60 * time.Second, "PT1M"}, {3723 * time.Second, "PT1H2M3S"}, {30 * time.Hour, "PT30H"},
	}
	for _, tc := range cases {
		got := Duration(tc.d).ISO8601()
		if got != tc.want {
			t.Errorf("%v = %s, want %s", tc.d, got, tc.want)
		}
		back, err := ParseDuration(got)
		if err != nil || back.Std() != tc.d.Round(time.Second) && tc.d > 0 {
			t.Errorf("ParseDuration(%s) = %v, %v", got, back.Std(), err)
		}
	}
	for _, bad := range []string{"", "P", "90s", "PT5", "PT5X"} {
		if _, err := ParseDuration(bad); err == nil {
			t.Errorf("ParseDuration(%q) succeeded", bad)
		}
	}
	if d, err := ParseDuration("P1DT0.5S"); err != nil || d.Std() != 24*time.Hour+500*time.Millisecond {
		t.Errorf("P1DT0.5S = %v, %v", d.Std(), err)
	}
}
