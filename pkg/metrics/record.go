package metrics

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/skiffci/skiff/pkg/ledger"
)

// SchemaVersion is the version of schema/metrics.schema.json that Build
// writes into every record. A minor version only adds optional fields; a
// change that breaks a consumer is a new major version.
const SchemaVersion = "1.2"

// The missing sources a record may name (missingSources).
const (
	SourceAgent  = "agent"
	SourceCPU    = "cpu"
	SourceMemory = "memory"
	SourceDisk   = "disk"
	SourceGPU    = "gpu"
	SourcePrice  = "price"
)

// The capacity types of a record (capacityType, cost.capacityType).
const (
	CapacitySpot     = "spot"
	CapacityOnDemand = "on-demand"
)

// The bases of a cost estimate (cost.basis).
const (
	BasisOnDemandList = "on-demand-list"
	BasisSpotEstimate = "spot-estimate"
	// BasisOperatorRate: the pool's cost per hour, an operator's own
	// figure for a machine that is not in the price table.
	BasisOperatorRate = "operator-rate"
)

// Record is one metrics record: what one job used on one runner. Its JSON
// field names are the schema's; optional fields are omitted when unknown,
// never written as zero.
type Record struct {
	Version       string   `json:"version,omitempty"`
	Repository    string   `json:"repository"`
	Owner         string   `json:"owner,omitempty"`
	WorkflowName  string   `json:"workflowName"`
	Trigger       string   `json:"trigger"`
	CloudProvider string   `json:"cloudProvider"`
	InstanceType  string   `json:"instanceType"`
	Runtime       Duration `json:"runtime"`

	JobID        int64    `json:"jobId,omitempty"`
	JobName      string   `json:"jobName,omitempty"`
	RunID        int64    `json:"runId,omitempty"`
	RunAttempt   int      `json:"runAttempt,omitempty"`
	Pool         string   `json:"pool,omitempty"`
	Labels       []string `json:"labels,omitempty"`
	Region       string   `json:"region,omitempty"`
	Zone         string   `json:"zone,omitempty"`
	CapacityType string   `json:"capacityType,omitempty"`
	RunnerName   string   `json:"runnerName,omitempty"`

	QueuedAt    *time.Time `json:"queuedAt,omitempty"`
	StartedAt   *time.Time `json:"startedAt,omitempty"`
	CompletedAt *time.Time `json:"completedAt,omitempty"`
	QueueWait   *Duration  `json:"queueWait,omitempty"`
	Conclusion  string     `json:"conclusion,omitempty"`
	Interrupted *bool      `json:"interrupted,omitempty"`
	// EndReason is how the runner ended, where its backend tells
	// (provider.EndReason: oom-killed, exited, failed, ...); ExitCode its
	// exit code with it.
	EndReason string `json:"endReason,omitempty"`
	ExitCode  *int   `json:"exitCode,omitempty"`

	CPU    *CPU       `json:"cpu,omitempty"`
	Memory *Memory    `json:"memory,omitempty"`
	GPUs   []GPU      `json:"gpus,omitempty"`
	GPU    *GPUTotals `json:"gpu,omitempty"`
	Disk   *Disk      `json:"disk,omitempty"`
	Cost   *Cost      `json:"cost,omitempty"`
	Host   *Host      `json:"host,omitempty"`
	Slurm  *Slurm     `json:"slurm,omitempty"`
	Start  *Start     `json:"start,omitempty"`

	MissingSources []string `json:"missingSources,omitempty"`
}

// CPU is the job's CPU use, percent of all vCPUs.
type CPU struct {
	PeakPercent *float64 `json:"peakPercent,omitempty"`
	MeanPercent *float64 `json:"meanPercent,omitempty"`
	// Seconds is the CPU time the job's processes used (user and system),
	// where the provider measures it (local: the runner's process tree).
	Seconds *float64 `json:"seconds,omitempty"`
}

// Memory is the job's peak memory use.
type Memory struct {
	PeakPercent *float64 `json:"peakPercent,omitempty"`
	PeakGiB     *float64 `json:"peakGiB,omitempty"`
}

// GPU is what the job used of one GPU.
type GPU struct {
	Index int    `json:"index"`
	Model string `json:"model,omitempty"`
	GPUPeaks
}

// GPUTotals is the instance's GPUs taken together: count and model from the
// price table, peaks over all GPUs.
type GPUTotals struct {
	Count int    `json:"count"`
	Model string `json:"model,omitempty"`
	GPUPeaks
}

// GPUPeaks are a job's peaks on one GPU, or on all of them (the highest of
// each). Their fields stand in GPU's and GPUTotals' JSON objects.
type GPUPeaks struct {
	PeakUtilizationPercent *float64 `json:"peakUtilizationPercent,omitempty"`
	PeakMemoryMiB          *float64 `json:"peakMemoryMiB,omitempty"`
	PeakMemoryPercent      *float64 `json:"peakMemoryPercent,omitempty"`
}

// max returns each peak's higher of p and q (a missing one is lower than any).
func (p GPUPeaks) max(q GPUPeaks) GPUPeaks {
	return GPUPeaks{maxp(p.PeakUtilizationPercent, q.PeakUtilizationPercent), maxp(p.PeakMemoryMiB, q.PeakMemoryMiB),
		maxp(p.PeakMemoryPercent, q.PeakMemoryPercent)}
}

// Disk is the job's peak use of the root file system.
type Disk struct {
	PeakRootPercent *float64 `json:"peakRootPercent,omitempty"`
}

// Cost is an estimate of the job's instance cost from the price table.
type Cost struct {
	EstimatedUSD     float64 `json:"estimatedUSD"`
	HourlyUSD        float64 `json:"hourlyUSD,omitempty"`
	CapacityType     string  `json:"capacityType"`
	Basis            string  `json:"basis,omitempty"`
	PriceTableDate   string  `json:"priceTableDate"`
	PriceTableRegion string  `json:"priceTableRegion,omitempty"`
	Estimate         bool    `json:"estimate"`
}

// Host describes the machine a runner ran on where its instance type does
// not (a local process; a Slurm or Kubernetes node): CPU model and count,
// memory, GPU model and count.
type Host struct {
	CPUModel  string   `json:"cpuModel,omitempty"`
	CPUs      int      `json:"cpus,omitempty"`
	MemoryGiB *float64 `json:"memoryGiB,omitempty"`
	GPUModel  string   `json:"gpuModel,omitempty"`
	GPUs      *int     `json:"gpus,omitempty"`
}

// Slurm is where a runner's batch job ran on a Slurm cluster, as the
// cluster's accounting (sacct) records it.
type Slurm struct {
	// Cluster is the cluster's name (slurm.conf ClusterName).
	Cluster string `json:"cluster,omitempty"`
	// Partition is the partition the job ran in.
	Partition string `json:"partition,omitempty"`
	// Nodes is the node (or Slurm's node list) it ran on.
	Nodes string `json:"nodes,omitempty"`
	// JobID is the batch job's id.
	JobID string `json:"jobId,omitempty"`
	// State is the job's end state: COMPLETED, CANCELLED, TIMEOUT, ...
	State string `json:"state,omitempty"`
}

// The start kinds of a record (start.kind): how the runner's machine
// started, as the runner ledger records it (ledger.StartCold …).
const (
	StartCold    = ledger.StartCold
	StartStopped = ledger.StartStopped
	StartHot     = ledger.StartHot
)

// Start is where the job's start time went: the times the runner ledger
// recorded between the job's queuedAt and its startedAt, and the phases
// between them. A time the ledger did not record is nil, and so is every
// phase that needs it.
type Start struct {
	Kind              string     `json:"kind,omitempty"`
	LaunchRequestedAt *time.Time `json:"launchRequestedAt,omitempty"`
	LaunchedAt        *time.Time `json:"launchedAt,omitempty"`
	OnlineAt          *time.Time `json:"onlineAt,omitempty"`
	Phases            *Phases    `json:"phases,omitempty"`
}

// Phases are a start's phases in seconds, to the millisecond; nil when one
// of its ends is unknown.
type Phases struct {
	// QueuedToRequested is skiff's own share: queued to launch requested.
	QueuedToRequested   *float64 `json:"queuedToRequested,omitempty"`
	RequestedToLaunched *float64 `json:"requestedToLaunched,omitempty"`
	LaunchedToOnline    *float64 `json:"launchedToOnline,omitempty"`
	OnlineToAssigned    *float64 `json:"onlineToAssigned,omitempty"`
	QueuedToAssigned    *float64 `json:"queuedToAssigned,omitempty"`
}

// Key is a record's identity: one record per job and run attempt.
type Key struct {
	JobID      int64
	RunAttempt int
}

// Key returns the record's key.
func (r *Record) Key() Key { return Key{JobID: r.JobID, RunAttempt: r.RunAttempt} }

// String is the key as the record store writes it: <job id>#<attempt>.
func (k Key) String() string { return fmt.Sprintf("%d#%d", k.JobID, k.RunAttempt) }

// Duration is a time.Duration written as an ISO 8601 duration in whole
// seconds (PT1H2M3S), the schema's format "duration".
type Duration time.Duration

// ISO8601 formats d as PT[nH][nM]nS, rounded to whole seconds; negative
// durations are written as PT0S.
func (d Duration) ISO8601() string {
	s := int64((time.Duration(d) + time.Second/2) / time.Second)
	if s <= 0 {
		return "PT0S"
	}
	var b strings.Builder
	b.WriteString("PT")
	if h := s / 3600; h > 0 {
		b.WriteString(strconv.FormatInt(h, 10) + "H")
	}
	if m := s % 3600 / 60; m > 0 {
		b.WriteString(strconv.FormatInt(m, 10) + "M")
	}
	if sec := s % 60; sec > 0 || s < 60 {
		b.WriteString(strconv.FormatInt(sec, 10) + "S")
	}
	return b.String()
}

// ParseDuration reads an ISO 8601 duration of the form P[nD]T[nH][nM][nS]
// (what ISO8601 writes, plus days and fractional seconds).
func ParseDuration(s string) (Duration, error) {
	rest, ok := strings.CutPrefix(s, "P")
	if !ok || rest == "" {
		return 0, fmt.Errorf("parsing duration %q: not an ISO 8601 duration", s)
	}
	var total float64
	inTime := false
	num := ""
	start := 0 // where the number being read began
	for i, c := range rest {
		switch {
		case c == 'T':
			inTime = true
			start = i + 1
		case c >= '0' && c <= '9' || c == '.':
			num = rest[start : i+1]
		default:
			v, err := strconv.ParseFloat(num, 64)
			if err != nil {
				return 0, fmt.Errorf("parsing duration %q: %w", s, err)
			}
			num, start = "", i+1
			switch {
			case c == 'D' && !inTime:
				total += v * 86400
			case c == 'H' && inTime:
				total += v * 3600
			case c == 'M' && inTime:
				total += v * 60
			case c == 'S' && inTime:
				total += v
			default:
				return 0, fmt.Errorf("parsing duration %q: unsupported unit %q", s, c)
			}
		}
	}
	if num != "" {
		return 0, fmt.Errorf("parsing duration %q: number without a unit", s)
	}
	return Duration(total * float64(time.Second)), nil
}

// MarshalJSON writes the duration as an ISO 8601 string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.ISO8601()) }

// UnmarshalJSON reads an ISO 8601 duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("decoding duration: %w", err)
	}
	v, err := ParseDuration(s)
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// Std returns the duration as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }
