package metrics

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/skiffci/skiff/pkg/provider/ec2/ec2prices"
)

// GPUMemoryGiB is the memory of one GPU of each model in the price table
// (NVIDIA's data sheets); the advice needs it to check GPU memory headroom.
var GPUMemoryGiB = map[string]float64{"t4": 16, "a10g": 24, "l4": 24, "l40s": 48, "a100": 40, "h100": 80}

// AdviceOptions tunes Advise.
type AdviceOptions struct {
	// MinRecords is how many records with usage data a job needs before it
	// gets advice (default 20): fewer make a p95 a guess.
	MinRecords int
	// Headroom is the margin kept above the p95 peaks (default 0.2).
	Headroom float64
	// Prices is the instance table (default ec2prices.Prices).
	Prices *ec2prices.PriceTable
	// MinSavingUSD drops suggestions that save less per month (default 1):
	// a move worth cents is noise.
	MinSavingUSD float64
	// Allowed lists, per pool, the instance types advice may suggest; a
	// pool not in the map may get any type of the table.
	Allowed map[string][]string
}

// Advice is one right-sizing suggestion.
type Advice struct {
	Repository string `json:"repository"`
	Workflow   string `json:"workflow"`
	Job        string `json:"job"`
	Pool       string `json:"pool"`
	From       string `json:"from"`
	To         string `json:"to"`
	Records    int    `json:"records"`
	// MonthlySavingUSD is the estimated saving at the observed job rate.
	MonthlySavingUSD float64 `json:"monthlySavingUSD"`
	// Text is the one-line explanation; Label the runs-on label to paste.
	Text  string `json:"text"`
	Label string `json:"label"`
	// Limits is, for jobs on a local host, the skiff local --limits value
	// that runs as many of them at once as fit (Label is then empty).
	Limits string `json:"limits,omitempty"`
}

// adviceGroup is what Advise keeps of one group's records with usage data.
type adviceGroup struct {
	repo, workflow, job, pool, itype string
	n                                int
	cpu, memPercent, gpuMiB          []float64
	memGiB                           []float64 // measured (local records)
	host                             *Host     // the first record's host
	first, last                      time.Time
	costSum                          float64
	costN                            int
}

type adviceKey struct{ repo, workflow, job, pool, itype string }

// advisor is Advise's state, added to one record at a time.
type advisor struct{ groups map[adviceKey]*adviceGroup }

func newAdvisor() *advisor { return &advisor{groups: map[adviceKey]*adviceGroup{}} }

func (a *advisor) add(r *Record) {
	if r.CPU == nil || r.CPU.PeakPercent == nil || r.Memory == nil || r.Memory.PeakPercent == nil {
		return // no usage data: nothing to size on
	}
	k := adviceKey{r.Repository, r.WorkflowName, r.JobName, r.Pool, r.InstanceType}
	g := a.groups[k]
	if g == nil {
		g = &adviceGroup{repo: r.Repository, workflow: r.WorkflowName, job: r.JobName, pool: r.Pool, itype: r.InstanceType}
		a.groups[k] = g
	}
	g.n++
	g.cpu = append(g.cpu, *r.CPU.PeakPercent)
	g.memPercent = append(g.memPercent, *r.Memory.PeakPercent)
	if r.Memory.PeakGiB != nil {
		g.memGiB = append(g.memGiB, *r.Memory.PeakGiB)
	}
	if g.host == nil && r.Host != nil {
		g.host = r.Host
	}
	if r.GPU != nil && r.GPU.PeakMemoryMiB != nil {
		g.gpuMiB = append(g.gpuMiB, *r.GPU.PeakMemoryMiB)
	}
	if r.StartedAt != nil && (g.first.IsZero() || r.StartedAt.Before(g.first)) {
		g.first = *r.StartedAt
	}
	if e := r.End(); e.After(g.last) {
		g.last = e
	}
	if r.Cost != nil {
		g.costSum += r.Cost.EstimatedUSD
		g.costN++
	}
}

func (a *advisor) advise(o AdviceOptions) []Advice {
	if o.MinRecords <= 0 {
		o.MinRecords = 20
	}
	if o.Headroom <= 0 {
		o.Headroom = 0.2
	}
	if o.Prices == nil {
		o.Prices = ec2prices.Prices
	}
	if o.MinSavingUSD <= 0 {
		o.MinSavingUSD = 1
	}
	var out []Advice
	for _, g := range a.groups {
		if adv, ok := adviseGroup(g, o); ok {
			out = append(out, adv)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].MonthlySavingUSD != out[j].MonthlySavingUSD {
			return out[i].MonthlySavingUSD > out[j].MonthlySavingUSD
		}
		return out[i].Repository+out[i].Workflow+out[i].Job+out[i].Pool < out[j].Repository+out[j].Workflow+out[j].Job+out[j].Pool
	})
	return out
}

// Advise suggests, per repository workflow job and pool (on its most used
// instance type), the cheapest allowed instance type of the same
// architecture and GPU count whose vCPUs, memory and GPU memory cover the
// p95 peaks with headroom, when it is cheaper than the current one. A
// Collector does the same one record at a time.
func Advise(recs []Record, o AdviceOptions) []Advice {
	a := newAdvisor()
	for i := range recs {
		a.add(&recs[i])
	}
	return a.advise(o)
}

func adviseGroup(g *adviceGroup, o AdviceOptions) (Advice, bool) {
	cur := o.Prices.Lookup(g.itype)
	if g.n < o.MinRecords {
		return Advice{}, false
	}
	if cur == nil {
		return adviseHost(g, o)
	}
	cpu, gpuMiB := g.cpu, g.gpuMiB
	memGiB := make([]float64, len(g.memPercent))
	for i, p := range g.memPercent {
		memGiB[i] = p / 100 * float64(cur.MemoryGiB)
	}
	first, last, costSum, costN := g.first, g.last, g.costSum, g.costN
	if cur.GPUs > 0 && len(gpuMiB) < o.MinRecords {
		return Advice{}, false // GPU jobs are sized on GPU memory, which these records lack
	}
	h := 1 + o.Headroom
	needCPU := stat(cpu).P95 / 100 * float64(cur.VCPU) * h
	needMem := stat(memGiB).P95 * h
	needGPU := stat(gpuMiB).P95 / 1024 * h
	allowed := o.Allowed[g.pool]
	var best *ec2prices.InstanceType
	for _, it := range o.Prices.Types {
		if allowed != nil && !slices.Contains(allowed, it.Name) {
			continue
		}
		if it.Arch != cur.Arch || it.GPUs != cur.GPUs || float64(it.VCPU) < needCPU || float64(it.MemoryGiB) < needMem {
			continue
		}
		if cur.GPUs > 0 && GPUMemoryGiB[it.GPUModel] < needGPU {
			continue
		}
		if best == nil || it.OnDemand < best.OnDemand || it.OnDemand == best.OnDemand && it.Name < best.Name {
			best = it
		}
	}
	if best == nil || best.OnDemand >= cur.OnDemand || costN == 0 {
		return Advice{}, false
	}
	days := math.Max(last.Sub(first).Hours()/24, 1)
	perMonth := float64(g.n) / days * 30
	perJob := costSum / float64(costN)
	saving := perJob * (1 - best.OnDemand/cur.OnDemand) * perMonth
	if saving < o.MinSavingUSD {
		return Advice{}, false
	}
	var b strings.Builder
	if cur.GPUs > 0 {
		fmt.Fprintf(&b, "peak GPU memory p95 %.1f GiB of %.0f GiB", stat(gpuMiB).P95/1024, GPUMemoryGiB[cur.GPUModel])
	} else {
		fmt.Fprintf(&b, "peak CPU p95 %.0f%% of %d vCPU, memory p95 %.1f GiB of %d GiB", stat(cpu).P95, cur.VCPU, stat(memGiB).P95, cur.MemoryGiB)
	}
	fmt.Fprintf(&b, " on %s over %d jobs → %s, ≈ $%.0f/month", g.itype, g.n, best.Name, saving)
	family, _, _ := strings.Cut(best.Name, ".")
	label := fmt.Sprintf("skiff/pool=%s/family=%s/cpu=%d/ram=%d", g.pool, family, best.VCPU, best.MemoryGiB)
	if best.GPUs > 0 {
		label += fmt.Sprintf("/gpu=%d", best.GPUs)
	}
	return Advice{Repository: g.repo, Workflow: g.workflow, Job: g.job, Pool: g.pool, From: g.itype, To: best.Name,
		Records: g.n, MonthlySavingUSD: round(saving, 100), Text: b.String(), Label: label}, true
}

// adviseHost sizes the jobs of a group that ran on a host the price table
// does not list (local processes): how many of them fit the host at once,
// by their p95 CPU and memory peaks with headroom, when that is two or
// more: the pool's slot is bigger than the job, and `skiff local --limits`
// can run that many side by side.
func adviseHost(g *adviceGroup, o AdviceOptions) (Advice, bool) {
	hst := g.host
	if hst == nil || hst.CPUs <= 0 || hst.MemoryGiB == nil || *hst.MemoryGiB <= 0 || len(g.memGiB) < o.MinRecords {
		return Advice{}, false
	}
	h := 1 + o.Headroom
	cpuP95, memP95 := stat(g.cpu).P95, stat(g.memGiB).P95
	needCPU := max(cpuP95/100*float64(hst.CPUs)*h, 0.01)
	needMem := max(memP95*h, 0.01)
	fit := int(math.Min(float64(hst.CPUs)/needCPU, *hst.MemoryGiB/needMem))
	if fit < 2 {
		return Advice{}, false
	}
	var b strings.Builder
	fmt.Fprintf(&b, "peak CPU p95 %.0f%% of %d CPUs, memory p95 %.2f GiB of %.1f GiB", cpuP95, hst.CPUs, memP95, *hst.MemoryGiB)
	if len(g.gpuMiB) > 0 {
		fmt.Fprintf(&b, ", GPU memory p95 %.1f GiB", stat(g.gpuMiB).P95/1024)
	}
	fmt.Fprintf(&b, " on %s over %d jobs → %d such jobs fit this host at once", g.itype, g.n, fit)
	return Advice{Repository: g.repo, Workflow: g.workflow, Job: g.job, Pool: g.pool, From: g.itype, To: g.itype, Records: g.n,
		Text: b.String(), Limits: fmt.Sprintf("%s=%d", g.pool, fit)}, true
}
