package metrics

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
)

// localInputs is a finished job run as a local process: no price table
// type, a host, and peaks measured from the runner's process tree.
func localInputs() Inputs {
	in := baseInputs()
	in.CloudProvider = "local"
	in.Instance.Type, in.Instance.Region, in.Instance.Zone = "local", "local", "local"
	in.Peaks = &Peaks{CPUPeak: f(80), CPUMean: f(40), CPUSeconds: f(290.123), MemoryPeak: f(12.5), MemoryPeakGiB: f(1.9876)}
	gpus := 1
	in.Host = &Host{CPUModel: "Intel(R) Xeon(R) Processor", CPUs: 2, MemoryGiB: f(15.6), GPUModel: "NVIDIA L4", GPUs: &gpus}
	return in
}

func TestBuildLocal(t *testing.T) {
	t.Parallel()
	t.Run("host, measured peaks, no price", func(t *testing.T) {
		r, err := Build(localInputs())
		if err != nil {
			t.Fatal(err)
		}
		if r.CloudProvider != "local" || r.InstanceType != "local" || r.Host == nil || r.Host.CPUs != 2 || r.Host.GPUModel != "NVIDIA L4" {
			t.Errorf("identity: %s %s %+v", r.CloudProvider, r.InstanceType, r.Host)
		}
		if r.CPU == nil || *r.CPU.Seconds != 290.12 || *r.CPU.PeakPercent != 80 || r.Memory == nil || *r.Memory.PeakGiB != 1.99 || *r.Memory.PeakPercent != 12.5 {
			t.Errorf("cpu %+v memory %+v", r.CPU, r.Memory)
		}
		if r.GPU == nil || r.GPU.Count != 1 || r.GPU.Model != "NVIDIA L4" {
			t.Errorf("gpu totals %+v: the host's GPUs", r.GPU)
		}
		// disk is not measured locally, the GPU sent nothing, and the pool has no rate.
		if want := []string{SourceDisk, SourceGPU, SourcePrice}; !slices.Equal(r.MissingSources, want) {
			t.Errorf("missingSources %v, want %v", r.MissingSources, want)
		}
		if r.Cost != nil {
			t.Errorf("cost %+v without a rate", r.Cost)
		}
	})
	t.Run("operator rate", func(t *testing.T) {
		in := localInputs()
		in.HourlyUSD = 0.75
		r, err := Build(in)
		if err != nil {
			t.Fatal(err)
		}
		// Launch (t0+5s) to end (t0+13m): 12m55s at $0.75/h.
		want := 0.75 * (12*time.Minute + 55*time.Second).Hours()
		if r.Cost == nil || r.Cost.Basis != BasisOperatorRate || r.Cost.HourlyUSD != 0.75 || r.Cost.EstimatedUSD != round(want, 1e6) ||
			r.Cost.PriceTableDate != "2026-11-02" || r.Cost.CapacityType != CapacityOnDemand {
			t.Errorf("cost %+v, want %.6f at the operator's rate", r.Cost, want)
		}
		if slices.Contains(r.MissingSources, SourcePrice) {
			t.Errorf("missingSources %v names price though the pool has a rate", r.MissingSources)
		}
	})
	t.Run("the price table wins for a type it lists", func(t *testing.T) {
		in := baseInputs()
		in.HourlyUSD = 99
		r, err := Build(in)
		if err != nil {
			t.Fatal(err)
		}
		if r.Cost == nil || r.Cost.Basis != BasisOnDemandList {
			t.Errorf("cost %+v", r.Cost)
		}
	})
	t.Run("no usage source", func(t *testing.T) {
		in := localInputs()
		in.Peaks = nil
		r, err := Build(in)
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{SourceAgent, SourceGPU, SourcePrice}; !slices.Equal(r.MissingSources, want) {
			t.Errorf("missingSources %v, want %v", r.MissingSources, want)
		}
	})
}

func TestAdviseLocal(t *testing.T) {
	t.Parallel()
	var small, big []Record
	for i := range 20 {
		in := localInputs()
		in.Job.ID = int64(1000 + i)
		in.Peaks.CPUPeak = f(10)
		r, err := Build(in)
		if err != nil {
			t.Fatal(err)
		}
		small = append(small, r)
		in.Job.JobName, in.Peaks.CPUPeak = "heavy", f(80)
		if r, err = Build(in); err != nil {
			t.Fatal(err)
		}
		big = append(big, r)
	}
	// 10% of 2 CPUs and 1.99 GiB of 15.6, with 20% headroom: 0.24 CPUs and
	// 2.39 GiB a job, so memory allows 6 at once.
	adv := Advise(append(small, big...), AdviceOptions{})
	if len(adv) != 1 || adv[0].Limits != "standard=6" || adv[0].Job != "test" || adv[0].Label != "" {
		t.Fatalf("advice %+v, want the light job only: 6 fit this host", adv)
	}
	if want := "peak CPU p95 10% of 2 CPUs, memory p95 1.99 GiB of 15.6 GiB on local over 20 jobs → 6 such jobs fit this host at once"; adv[0].Text != want {
		t.Errorf("text %q\nwant %q", adv[0].Text, want)
	}
	if adv := Advise(small[:19], AdviceOptions{}); len(adv) != 0 {
		t.Errorf("advice over 19 records: %+v", adv)
	}
}

// TestBuildSlurm: a Slurm job's peaks bring their own host (the job's
// allocation, which replaces the writer's) and where the job ran; GPU
// peaks without a series per GPU fill the totals.
func TestBuildSlurm(t *testing.T) {
	t.Parallel()
	in := baseInputs()
	in.CloudProvider = "slurm"
	in.Instance.Type, in.Instance.Region, in.Instance.Zone = "gpu", "", "slurm" // the provider's own name for its cluster
	gpus := 2
	in.Host = &Host{CPUModel: "the writer's", CPUs: 64}
	in.Peaks = &Peaks{CPUMean: f(50), CPUSeconds: f(1800), MemoryPeak: f(25), MemoryPeakGiB: f(4), GPUUtilization: f(87), GPUMemoryUsedMiB: f(3000),
		Host:  &Host{CPUs: 4, MemoryGiB: f(16), GPUs: &gpus},
		Slurm: &Slurm{Cluster: "hpc", Partition: "gpu", Nodes: "node7", JobID: "42", State: "COMPLETED"}}
	in.HourlyUSD = 2.4
	r, err := Build(in)
	if err != nil {
		t.Fatal(err)
	}
	if r.Slurm == nil || *r.Slurm != *in.Peaks.Slurm || r.Host == nil || r.Host.CPUs != 4 || r.Host.CPUModel != "" || *r.Host.MemoryGiB != 16 {
		t.Errorf("slurm %+v host %+v: want the job's placement and allocation", r.Slurm, r.Host)
	}
	if r.Zone != "hpc" {
		t.Errorf("zone %q, want the accounting's cluster, hpc", r.Zone)
	}
	if r.GPU == nil || r.GPU.Count != 2 || *r.GPU.PeakUtilizationPercent != 87 || *r.GPU.PeakMemoryMiB != 3000 || len(r.GPUs) != 0 {
		t.Errorf("gpu %+v gpus %+v: want 2 GPUs with the totals", r.GPU, r.GPUs)
	}
	if r.Cost == nil || r.Cost.Basis != BasisOperatorRate || r.Cost.HourlyUSD != 2.4 {
		t.Errorf("cost %+v", r.Cost)
	}
	if want := []string{SourceDisk}; !slices.Equal(r.MissingSources, want) {
		t.Errorf("missingSources %v, want %v", r.MissingSources, want)
	}
	in.Peaks.GPUUtilization, in.Peaks.GPUMemoryUsedMiB = nil, nil
	if r, err := Build(in); err != nil || !slices.Contains(r.MissingSources, SourceGPU) || r.GPU == nil || r.GPU.Count != 2 {
		t.Errorf("without GPU accounting: %v, gpu %+v, missing %v; want the count and gpu missing", err, r.GPU, r.MissingSources)
	}
}

// TestBuildEndReason: the instance's end reason and exit code, where the
// backend tells, are the record's, valid against the schema; without
// them the record has neither.
func TestBuildEndReason(t *testing.T) {
	t.Parallel()
	code := 137
	for _, tc := range []struct {
		name     string
		reason   string
		code     *int
		wantJSON string
	}{
		{"oom-killed", "oom-killed", &code, `"endReason":"oom-killed","exitCode":137`},
		{"removed without an exit code", "removed", nil, `"endReason":"removed"`},
		{"backend does not say", "", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := localInputs()
			in.Instance.EndReason, in.Instance.ExitCode = tc.reason, tc.code
			r, err := Build(in)
			if err != nil {
				t.Fatal(err)
			}
			data, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			if err := ValidateJSON(data); err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.wantJSON != "" && !strings.Contains(string(data), tc.wantJSON):
				t.Errorf("record %s, want %s", data, tc.wantJSON)
			case tc.wantJSON == "" && (strings.Contains(string(data), "endReason") || strings.Contains(string(data), "exitCode")):
				t.Errorf("record %s has an end reason the backend did not give", data)
			}
		})
	}
}
