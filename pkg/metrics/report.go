package metrics

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// The groupings of a report (`skiff metrics --by`).
const (
	ByRepository   = "repository"
	ByWorkflow     = "workflow"
	ByJob          = "job"
	ByPool         = "pool"
	ByInstanceType = "instance-type"
)

// Groupings lists the valid --by values.
var Groupings = []string{ByRepository, ByWorkflow, ByJob, ByPool, ByInstanceType}

// GroupKey returns the record's group under by: repository; repository and
// workflow; repository, workflow and job; pool; or instance type.
func GroupKey(r *Record, by string) (string, error) {
	switch by {
	case ByRepository:
		return r.Repository, nil
	case ByWorkflow:
		return r.Repository + " · " + r.WorkflowName, nil
	case ByJob:
		return r.Repository + " · " + r.WorkflowName + " · " + r.JobName, nil
	case ByPool:
		return r.Pool, nil
	case ByInstanceType:
		return r.InstanceType, nil
	}
	return "", fmt.Errorf("grouping by %q: want one of %s", by, strings.Join(Groupings, ", "))
}

// Stat is a distribution's summary: nearest-rank percentiles. N counts the
// records that had the value; N = 0 means none did (the row shows "-").
type Stat struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50,omitempty"`
	P95 float64 `json:"p95,omitempty"`
	Max float64 `json:"max,omitempty"`
}

// Row is one group of a report.
type Row struct {
	Group   string `json:"group"`
	Jobs    int    `json:"jobs"`
	Runtime Stat   `json:"runtimeSeconds"`
	Queue   Stat   `json:"queueWaitSeconds"`
	CPU     Stat   `json:"peakCpuPercent"`
	Memory  Stat   `json:"peakMemoryPercent"`
	GPU     Stat   `json:"peakGpuPercent"`
	GPUMem  Stat   `json:"peakGpuMemoryPercent"`
	// SpotShare is the share of jobs with a known capacity type that ran on spot.
	SpotShare float64 `json:"spotShare"`
	// CostUSD sums the records' estimates; CostJobs counts the records that had one.
	CostUSD  float64 `json:"estimatedCostUSD"`
	CostJobs int     `json:"costJobs"`
}

type acc struct {
	runtime, queue, cpu, mem, gpu, gpuMem []float64
	spot, capKnown                        int
	row                                   Row
}

// groupID is a record's group under a grouping, without building its name.
type groupID struct{ repo, workflow, job, other string }

func groupOf(r *Record, by string) groupID {
	switch by {
	case ByRepository:
		return groupID{repo: r.Repository}
	case ByWorkflow:
		return groupID{repo: r.Repository, workflow: r.WorkflowName}
	case ByJob:
		return groupID{repo: r.Repository, workflow: r.WorkflowName, job: r.JobName}
	case ByPool:
		return groupID{other: r.Pool}
	}
	return groupID{other: r.InstanceType}
}

// summary is Summarize's state: the values of each group, added one
// record at a time.
type summary struct {
	by     string
	groups map[groupID]*acc
}

func newSummary(by string) (*summary, error) {
	if _, err := GroupKey(&Record{}, by); err != nil {
		return nil, err
	}
	return &summary{by: by, groups: map[groupID]*acc{}}, nil
}

func (s *summary) add(r *Record) {
	id := groupOf(r, s.by)
	a := s.groups[id]
	if a == nil {
		k, _ := GroupKey(r, s.by)
		a = &acc{row: Row{Group: k}}
		s.groups[id] = a
	}
	a.row.Jobs++
	a.runtime = append(a.runtime, r.Runtime.Std().Seconds())
	if r.QueueWait != nil {
		a.queue = append(a.queue, r.QueueWait.Std().Seconds())
	}
	if r.CPU != nil && r.CPU.PeakPercent != nil {
		a.cpu = append(a.cpu, *r.CPU.PeakPercent)
	}
	if r.Memory != nil && r.Memory.PeakPercent != nil {
		a.mem = append(a.mem, *r.Memory.PeakPercent)
	}
	if r.GPU != nil && r.GPU.PeakUtilizationPercent != nil {
		a.gpu = append(a.gpu, *r.GPU.PeakUtilizationPercent)
	}
	if r.GPU != nil && r.GPU.PeakMemoryPercent != nil {
		a.gpuMem = append(a.gpuMem, *r.GPU.PeakMemoryPercent)
	}
	switch r.CapacityType {
	case CapacitySpot:
		a.spot++
		a.capKnown++
	case CapacityOnDemand:
		a.capKnown++
	}
	if r.Cost != nil {
		a.row.CostUSD += r.Cost.EstimatedUSD
		a.row.CostJobs++
	}
}

// rows summarises each group; rows are sorted by estimated cost, then
// group name.
func (s *summary) rows() []Row {
	rows := make([]Row, 0, len(s.groups))
	for _, a := range s.groups {
		row := a.row
		row.Runtime, row.Queue = stat(a.runtime), stat(a.queue)
		row.CPU, row.Memory, row.GPU, row.GPUMem = stat(a.cpu), stat(a.mem), stat(a.gpu), stat(a.gpuMem)
		if a.capKnown > 0 {
			row.SpotShare = float64(a.spot) / float64(a.capKnown)
		}
		row.CostUSD = round(row.CostUSD, 1e4)
		rows = append(rows, row)
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].CostUSD != rows[j].CostUSD {
			return rows[i].CostUSD > rows[j].CostUSD
		}
		return rows[i].Group < rows[j].Group
	})
	return rows
}

// Summarize groups the records and summarises each group; rows are sorted
// by estimated cost, then group name. A Collector does the same one
// record at a time.
func Summarize(recs []Record, by string) ([]Row, error) {
	s, err := newSummary(by)
	if err != nil {
		return nil, err
	}
	for i := range recs {
		s.add(&recs[i])
	}
	return s.rows(), nil
}

// stat sorts vs in place and summarises it.
func stat(vs []float64) Stat {
	if len(vs) == 0 {
		return Stat{}
	}
	slices.Sort(vs)
	return Stat{N: len(vs), P50: round(percentile(vs, 50), 100), P95: round(percentile(vs, 95), 100), Max: round(vs[len(vs)-1], 100)}
}

// percentile is the nearest-rank percentile of sorted values.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(float64(len(sorted))*p/100+0.999999) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}

// FormatSeconds writes seconds as a short duration (1h2m, 4m5s, 9s).
func FormatSeconds(s float64) string {
	d := time.Duration(s * float64(time.Second)).Round(time.Second)
	switch {
	case d >= time.Hour:
		return fmt.Sprintf("%dh%dm", int(d.Hours()), int(d.Minutes())%60)
	case d >= time.Minute:
		return fmt.Sprintf("%dm%ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%ds", int(d.Seconds()))
}
