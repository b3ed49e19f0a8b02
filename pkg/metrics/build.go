package metrics

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/skiffci/skiff/pkg/provider/ec2/ec2prices"
)

// Errors Build returns; callers tell them apart with errors.Is.
var (
	// ErrNotRun: the job never started on a runner (cancelled before it was
	// picked up, or its runner never took it). Such a job gets no record:
	// a record is about what a job used, and it used nothing. The
	// reconciler drops it.
	ErrNotRun = errors.New("job never started: no metrics record")
	// ErrNotFinished: the job started and has not completed, and its
	// instance was not interrupted. The reconciler tries again later.
	ErrNotFinished = errors.New("job has not finished yet")
	// ErrIncomplete: an input the contract requires is missing (no run
	// record for the trigger, no instance type, ...). Whether to wait for it
	// or give up is the caller's choice.
	ErrIncomplete = errors.New("incomplete inputs for a metrics record")
)

// DefaultSpotFactor is the share of the on-demand price a spot instance is
// assumed to cost, since the embedded price table lists no spot prices.
// Spot prices for the families skiff launches typically sit at 30–50 % of
// on-demand; 0.4 is the middle. Records say so in cost.basis.
const DefaultSpotFactor = 0.4

// MinBilled is EC2's minimum charge per Linux instance launch: 60 s, then
// per second.
const MinBilled = 60 * time.Second

// JobInput is what Build needs of a workflow job's record (package store's JobInput,
// converted by metrics/fromstore). Zero values mean unknown.
type JobInput struct {
	ID           int64
	RunID        int64
	Attempt      int
	Repository   string // owner/name
	Owner        string
	Labels       []string
	Pool         string
	WorkflowName string
	JobName      string
	RunnerName   string
	Conclusion   string
	QueuedAt     time.Time
	StartedAt    time.Time
	CompletedAt  time.Time
}

// RunInput is what Build needs of the workflow run: the event that triggered it.
type RunInput struct {
	ID           int64
	Attempt      int
	Event        string
	WorkflowName string
}

// InstanceInput describes the runner's instance, from the runner ledger and the
// provider. Zero values mean unknown.
type InstanceInput struct {
	ID         string
	Type       string
	Region     string
	Zone       string
	Capacity   string // CapacitySpot or CapacityOnDemand
	RunnerName string
	LaunchedAt time.Time
	// EndedAt is when the instance stopped running (terminated), if known.
	EndedAt time.Time
	// Interrupted: the instance was taken away while the job ran (spot
	// interruption, lifetime cap, reaped).
	Interrupted bool
	// EndReason is how the runner ended, where its backend tells
	// (provider.EndReason); ExitCode its exit code, where read.
	EndReason string
	ExitCode  *int
	// ReservedAt is when skiff reserved the runner in its ledger, right
	// before asking the provider for it: the launch request.
	ReservedAt time.Time
	// RegisteredAt is when skiff first saw the runner online.
	RegisteredAt time.Time
	// StartKind is how the machine started (StartCold, StartStopped,
	// StartHot); "" when unknown.
	StartKind string
}

// Peaks is what the CloudWatch agent reported over the job's window. A nil
// *Peaks means the agent sent nothing at all (metrics off, or the agent
// failed); a nil field means that one series was missing.
type Peaks struct {
	CPUPeak    *float64 // percent
	CPUMean    *float64 // percent
	MemoryPeak *float64 // percent
	DiskPeak   *float64 // percent of the root file system
	GPUs       []GPUPeak
	// CPUSeconds is the CPU time used, where the source measures it.
	CPUSeconds *float64
	// MemoryPeakGiB is the peak in GiB, where the source measures it
	// (else it is MemoryPeak of the instance type's memory).
	MemoryPeakGiB *float64
	// GPUUtilization and GPUMemoryUsedMiB are peaks over all the job's
	// GPUs together, from a source without a series per GPU (Slurm's
	// accounting: TRESUsageInMax gres/gpuutil, gres/gpumem).
	GPUUtilization   *float64
	GPUMemoryUsedMiB *float64
	// Host, when the source describes what the runner ran on per job (a
	// Slurm job's allocation), replaces Inputs.Host.
	Host *Host
	// Slurm is where a Slurm batch job ran, from the accounting.
	Slurm *Slurm
}

// GPUPeak is one GPU's series over the window.
type GPUPeak struct {
	Index          int
	Model          string   // the agent's name dimension, e.g. NVIDIA A10G
	Utilization    *float64 // percent
	MemoryUsedMiB  *float64
	MemoryTotalMiB *float64
}

// Inputs is everything Build reads. Prices may be nil (no cost);
// SpotFactor 0 means DefaultSpotFactor.
type Inputs struct {
	Job           JobInput
	Run           RunInput
	Instance      InstanceInput
	CloudProvider string
	Peaks         *Peaks
	Prices        *ec2prices.PriceTable
	SpotFactor    float64
	// Host describes the machine, for runners whose instance type is not
	// in the price table (local processes): it goes into the record's
	// host, and its GPUs into gpu.count and model.
	Host *Host
	// HourlyUSD is the pool's cost per hour for a machine the price table
	// does not list (an operator's amortised hardware and power); 0: none.
	// The price table's price wins for a type it lists.
	HourlyUSD float64
}

// Build turns a finished job's inputs into a validated record. It returns
// ErrNotRun for a job that never started (no record, ever), ErrNotFinished
// for one still running, ErrIncomplete when a required input is missing,
// and an error wrapping ErrInvalid if the result fails the schema (a bug).
func Build(in Inputs) (Record, error) {
	end, err := jobEnd(in)
	if err != nil {
		return Record{}, err
	}
	if err := checkInputs(in, end); err != nil {
		return Record{}, err
	}
	r := identity(in, end)
	var shape *ec2prices.InstanceType
	if in.Prices != nil {
		shape = in.Prices.Lookup(in.Instance.Type)
	}
	placement(&r, in, shape)
	r.Start = start(in.Job, in.Instance)
	missing := addPeaks(&r, in.Peaks, shape)
	if c := cost(in, shape, in.Job.StartedAt, end); c != nil {
		r.Cost = c
	} else {
		missing = append(missing, SourcePrice)
	}
	r.MissingSources = missing
	if err := Validate(r); err != nil {
		return Record{}, fmt.Errorf("building record of job %d: %w", in.Job.ID, err)
	}
	return r, nil
}

// jobEnd is when the job ended: its completion, else the end of an
// interrupted instance. A job that never started is ErrNotRun; one still
// running, ErrNotFinished.
func jobEnd(in Inputs) (time.Time, error) {
	j, inst := in.Job, in.Instance
	if j.StartedAt.IsZero() {
		return time.Time{}, fmt.Errorf("building record of job %d: %w", j.ID, ErrNotRun)
	}
	if !j.CompletedAt.IsZero() {
		return j.CompletedAt, nil
	}
	if !inst.Interrupted || inst.EndedAt.IsZero() {
		return time.Time{}, fmt.Errorf("building record of job %d: %w", j.ID, ErrNotFinished)
	}
	return inst.EndedAt, nil
}

// checkInputs returns ErrIncomplete naming every input the record requires
// that is missing.
func checkInputs(in Inputs, end time.Time) error {
	j, inst := in.Job, in.Instance
	var missing []string
	need := func(ok bool, what string) {
		if !ok {
			missing = append(missing, what)
		}
	}
	need(j.ID > 0, "job id")
	need(strings.Contains(j.Repository, "/"), "repository (owner/name)")
	need(in.Run.Event != "", "trigger (the run's workflow_run event was not recorded)")
	need(inst.Type != "", "instance type")
	need(in.CloudProvider != "", "cloud provider")
	need(j.WorkflowName != "" || in.Run.WorkflowName != "", "workflow name")
	need(!end.Before(j.StartedAt), "an end after the start")
	need(in.Run.ID == 0 || j.RunID == 0 || in.Run.ID == j.RunID, "the job's own run record")
	if len(missing) > 0 {
		return fmt.Errorf("building record of job %d: %w: %s", j.ID, ErrIncomplete, strings.Join(missing, ", "))
	}
	return nil
}

// identity is the record's who, what and when: the job, its run, its
// instance and its times, each from the input that knows it best.
func identity(in Inputs, end time.Time) Record {
	j, inst := in.Job, in.Instance
	r := Record{
		Version:       SchemaVersion,
		Repository:    j.Repository,
		Owner:         j.Owner,
		WorkflowName:  j.WorkflowName,
		Trigger:       in.Run.Event,
		CloudProvider: in.CloudProvider,
		InstanceType:  inst.Type,
		Runtime:       Duration(end.Sub(j.StartedAt)),
		JobID:         j.ID,
		JobName:       j.JobName,
		RunID:         j.RunID,
		RunAttempt:    max(j.Attempt, 1),
		Pool:          j.Pool,
		Labels:        slices.Clone(j.Labels),
		Region:        inst.Region,
		Zone:          inst.Zone,
		RunnerName:    j.RunnerName,
		StartedAt:     utc(j.StartedAt),
		CompletedAt:   utc(j.CompletedAt),
		Conclusion:    j.Conclusion,
		Interrupted:   &inst.Interrupted,
		EndReason:     inst.EndReason,
		ExitCode:      inst.ExitCode,
	}
	if r.Owner == "" {
		r.Owner, _, _ = strings.Cut(j.Repository, "/")
	}
	if r.WorkflowName == "" {
		r.WorkflowName = in.Run.WorkflowName
	}
	if r.RunID == 0 {
		r.RunID = in.Run.ID
	}
	if r.RunnerName == "" {
		r.RunnerName = inst.RunnerName
	}
	if inst.Capacity == CapacitySpot || inst.Capacity == CapacityOnDemand {
		r.CapacityType = inst.Capacity
	}
	if !j.QueuedAt.IsZero() {
		r.QueuedAt = utc(j.QueuedAt)
		if !j.StartedAt.Before(j.QueuedAt) {
			w := Duration(j.StartedAt.Sub(j.QueuedAt))
			r.QueueWait = &w
		}
	}
	return r
}

// start is the record's start: the ledger's times between the job's
// queuing and its assignment (startedAt) and the phases between them, or
// nil when nothing is known. A registration first seen after the job was
// assigned is no measurement of it and is left out; a phase across GitHub's
// and skiff's clocks that skew made negative is 0.
func start(j JobInput, inst InstanceInput) *Start {
	online := inst.RegisteredAt
	if !online.IsZero() && online.After(j.StartedAt) {
		online = time.Time{}
	}
	s := Start{LaunchRequestedAt: utcMilli(inst.ReservedAt), LaunchedAt: utcMilli(inst.LaunchedAt), OnlineAt: utcMilli(online)}
	if inst.StartKind == StartCold || inst.StartKind == StartStopped || inst.StartKind == StartHot {
		s.Kind = inst.StartKind
	}
	p := Phases{
		QueuedToRequested:   phase(j.QueuedAt, inst.ReservedAt),
		RequestedToLaunched: phase(inst.ReservedAt, inst.LaunchedAt),
		LaunchedToOnline:    phase(inst.LaunchedAt, online),
		OnlineToAssigned:    phase(online, j.StartedAt),
		QueuedToAssigned:    phase(j.QueuedAt, j.StartedAt),
	}
	if p != (Phases{}) {
		s.Phases = &p
	}
	if s == (Start{}) {
		return nil
	}
	return &s
}

// phase is from to to in seconds, rounded to the millisecond and at least
// 0, or nil when either end is unknown.
func phase(from, to time.Time) *float64 {
	if from.IsZero() || to.IsZero() {
		return nil
	}
	return ptr(round(max(to.Sub(from).Seconds(), 0), 1000))
}

func utcMilli(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC().Truncate(time.Millisecond)
	return &u
}

// placement fills where the job ran: the host (the peaks' own, a Slurm
// job's allocation, over the writer's), a host's GPUs when the price table
// does not list the instance type, and a Slurm job's place, whose cluster,
// as the accounting names it, is the record's zone.
func placement(r *Record, in Inputs, shape *ec2prices.InstanceType) {
	host := in.Host
	if in.Peaks != nil && in.Peaks.Host != nil {
		host = in.Peaks.Host
	}
	if in.Peaks != nil && in.Peaks.Slurm != nil {
		sl := *in.Peaks.Slurm
		r.Slurm = &sl
		if sl.Cluster != "" {
			r.Zone = sl.Cluster
		}
	}
	if host != nil {
		h := *host
		r.Host = &h
		if shape == nil && h.GPUs != nil && *h.GPUs > 0 {
			r.GPU = &GPUTotals{Count: *h.GPUs, Model: h.GPUModel}
		}
	}
}

// addPeaks fills the usage fields from the peaks and the instance shape and
// returns the sources that were missing.
func addPeaks(r *Record, p *Peaks, shape *ec2prices.InstanceType) []string {
	var missing []string
	if shape != nil && shape.GPUs > 0 {
		r.GPU = &GPUTotals{Count: shape.GPUs, Model: shape.GPUModel}
	}
	if p == nil || (p.CPUPeak == nil && p.CPUMean == nil && p.CPUSeconds == nil && p.MemoryPeak == nil && p.MemoryPeakGiB == nil &&
		p.DiskPeak == nil && len(p.GPUs) == 0 && p.GPUUtilization == nil && p.GPUMemoryUsedMiB == nil) {
		// The agent sent nothing: every usage source is missing.
		return []string{SourceAgent, SourceGPU}
	}
	if p.CPUPeak != nil || p.CPUMean != nil || p.CPUSeconds != nil {
		r.CPU = &CPU{PeakPercent: pct(p.CPUPeak), MeanPercent: pct(p.CPUMean), Seconds: num0(p.CPUSeconds)}
	} else {
		missing = append(missing, SourceCPU)
	}
	if p.MemoryPeak != nil || p.MemoryPeakGiB != nil {
		r.Memory = &Memory{PeakPercent: pct(p.MemoryPeak), PeakGiB: num0(p.MemoryPeakGiB)}
		if r.Memory.PeakGiB == nil && shape != nil && shape.MemoryGiB > 0 {
			r.Memory.PeakGiB = num(*r.Memory.PeakPercent / 100 * float64(shape.MemoryGiB))
		}
	} else {
		missing = append(missing, SourceMemory)
	}
	if p.DiskPeak != nil {
		r.Disk = &Disk{PeakRootPercent: pct(p.DiskPeak)}
	} else {
		missing = append(missing, SourceDisk)
	}
	var totals GPUPeaks
	for _, g := range sortedGPUs(p.GPUs) {
		if g.Utilization == nil && g.MemoryUsedMiB == nil {
			continue
		}
		out := GPU{Index: g.Index, Model: g.Model, GPUPeaks: GPUPeaks{PeakUtilizationPercent: pct(g.Utilization), PeakMemoryMiB: num0(g.MemoryUsedMiB)}}
		if g.MemoryUsedMiB != nil && g.MemoryTotalMiB != nil && *g.MemoryTotalMiB > 0 {
			out.PeakMemoryPercent = pct(ptr(*g.MemoryUsedMiB / *g.MemoryTotalMiB * 100))
		}
		r.GPUs = append(r.GPUs, out)
		totals = totals.max(out.GPUPeaks)
	}
	if len(r.GPUs) == 0 && (p.GPUUtilization != nil || p.GPUMemoryUsedMiB != nil) && r.GPU != nil && r.GPU.Count > 0 {
		// Totals only: the source has no series per GPU.
		r.GPU.PeakUtilizationPercent = pct(p.GPUUtilization)
		r.GPU.PeakMemoryMiB = num0(p.GPUMemoryUsedMiB)
		return missing
	}
	if len(r.GPUs) == 0 {
		missing = append(missing, SourceGPU)
		return missing
	}
	if r.GPU == nil {
		r.GPU = &GPUTotals{Count: len(r.GPUs)}
	}
	r.GPU.GPUPeaks = totals
	return missing
}

// cost estimates the instance's cost, or nil when no price applies.
func cost(in Inputs, shape *ec2prices.InstanceType, start, end time.Time) *Cost {
	capacity := in.Instance.Capacity
	if capacity != CapacitySpot && capacity != CapacityOnDemand {
		return nil
	}
	if shape == nil || shape.OnDemand <= 0 {
		return operatorCost(in, start, end)
	}
	hourly, basis := shape.OnDemand, BasisOnDemandList
	if capacity == CapacitySpot {
		f := in.SpotFactor
		if f <= 0 {
			f = DefaultSpotFactor
		}
		hourly, basis = shape.OnDemand*f, BasisSpotEstimate
	}
	from, to := start, end
	if l := in.Instance.LaunchedAt; !l.IsZero() && !l.After(start) {
		from = l
	}
	if e := in.Instance.EndedAt; !e.IsZero() && !e.Before(end) {
		to = e
	}
	billed := max(to.Sub(from), MinBilled)
	return &Cost{
		EstimatedUSD:     round(billed.Hours()*hourly, 1e6),
		HourlyUSD:        round(hourly, 1e6),
		CapacityType:     capacity,
		Basis:            basis,
		PriceTableDate:   in.Prices.Date,
		PriceTableRegion: in.Prices.Region,
		Estimate:         true,
	}
}

// operatorCost is the cost at the pool's own hourly rate (Inputs.HourlyUSD)
// over the runner's life, launch to end, or nil without a rate. Its
// priceTableDate is the day the job ended: the rate is the one the pools
// file said then.
func operatorCost(in Inputs, start, end time.Time) *Cost {
	if in.HourlyUSD <= 0 || math.IsInf(in.HourlyUSD, 0) || math.IsNaN(in.HourlyUSD) {
		return nil
	}
	from, to := start, end
	if l := in.Instance.LaunchedAt; !l.IsZero() && !l.After(start) {
		from = l
	}
	if e := in.Instance.EndedAt; !e.IsZero() && !e.Before(end) {
		to = e
	}
	return &Cost{
		EstimatedUSD:   round(to.Sub(from).Hours()*in.HourlyUSD, 1e6),
		HourlyUSD:      round(in.HourlyUSD, 1e6),
		CapacityType:   in.Instance.Capacity,
		Basis:          BasisOperatorRate,
		PriceTableDate: end.UTC().Format("2006-01-02"),
		Estimate:       true,
	}
}

func sortedGPUs(gs []GPUPeak) []GPUPeak {
	out := slices.Clone(gs)
	slices.SortFunc(out, func(a, b GPUPeak) int { return a.Index - b.Index })
	return out
}

func utc(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

func ptr(v float64) *float64 { return &v }

// pct rounds a percentage to two decimals and clamps it to [0, 100]; nil stays nil.
func pct(v *float64) *float64 {
	if v == nil || math.IsNaN(*v) {
		return nil
	}
	return ptr(round(min(max(*v, 0), 100), 100))
}

// num rounds a quantity to two decimals.
func num(v float64) *float64 { return ptr(round(max(v, 0), 100)) }

func num0(v *float64) *float64 {
	if v == nil || math.IsNaN(*v) {
		return nil
	}
	return num(*v)
}

func maxp(a, b *float64) *float64 {
	switch {
	case b == nil:
		return a
	case a == nil || *b > *a:
		return ptr(*b)
	}
	return a
}

func round(v, scale float64) float64 { return math.Round(v*scale) / scale }
