package slurm

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/skiffci/skiff/pkg/metrics"
	"github.com/skiffci/skiff/pkg/provider"
)

// sacctJobs asks the accounting for jobs of skiff's record that squeue no
// longer knows (ended longer ago than MinJobAge): one sacct. A site
// without accounting answers nothing, and those jobs are absent ("gone for
// good").
func (p *Provider) sacctJobs(ctx context.Context, recs []*record) []seenJob {
	ids := make([]string, len(recs))
	users := map[string]bool{}
	byID := map[string]*record{}
	for i, r := range recs {
		ids[i] = r.ID
		users[p.user(r.Account)] = true
		byID[r.ID] = r
	}
	ul := make([]string, 0, len(users))
	for u := range users {
		ul = append(ul, u)
	}
	sort.Strings(ul)
	out, err := p.run(ctx, "", "sacct", []string{"--noheader", "--parsable2", "--allocations", "--user=" + strings.Join(ul, ","),
		"--jobs=" + strings.Join(ids, ","), "--format=JobIDRaw,User,State,Partition,NodeList,Submit"}, nil)
	if err != nil {
		p.o.Logger.Debug("no accounting for ended batch jobs", "err", classify("sacct", err))
		return nil
	}
	var jobs []seenJob
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Split(line, "|")
		if len(f) != 6 || !jobIDForm.MatchString(f[0]) {
			continue
		}
		r := byID[f[0]]
		if r == nil || p.user(r.Account) != f[1] {
			continue
		}
		j := job{ID: f[0], User: f[1], State: f[2], Partition: f[3], Nodes: f[4]}
		if j.Nodes == "None assigned" {
			j.Nodes = ""
		}
		if t, err := time.ParseInLocation(slurmTime, f[5], time.Local); err == nil {
			j.Submitted = t.UTC()
		}
		jobs = append(jobs, seenJob{job: j, rec: r})
	}
	return jobs
}

// Usage is what the accounting says an ended job used, for the job's
// metrics record.
type Usage struct {
	// JobID is the batch job's id.
	JobID     string
	Cluster   string
	Partition string
	Nodes     string
	State     string
	// Elapsed is the job's wall time.
	Elapsed time.Duration
	// CPUTime is the CPU time its processes used (user + system).
	CPUTime time.Duration
	// MaxRSSBytes is the peak resident memory of its largest step.
	MaxRSSBytes int64
	// CPUs, MemoryBytes and GPUs are what it was allocated (AllocTRES cpu,
	// mem, gres/gpu).
	CPUs        int
	MemoryBytes int64
	GPUs        int
	// GPUMemoryBytes and GPUUtilizationPercent are the peaks of its GPUs'
	// memory and utilisation over its steps (TRESUsageInMax gres/gpumem,
	// gres/gpuutil), where the site's accounting gathers them
	// (AccountingStorageTRES=gres/gpumem,gres/gpuutil with an NVML GPU
	// plugin); ok is false where it does not.
	GPUMemoryBytes        int64
	GPUMemoryOK           bool
	GPUUtilizationPercent float64
	GPUUtilizationOK      bool
}

// Usage reads an ended job's use from sacct (one call). A site without
// accounting is a provider.ErrInvalid naming what to enable; a job the
// accounting does not know (yet) is an ErrTransient.
func (p *Provider) Usage(ctx context.Context, id string) (Usage, error) {
	us, err := p.Usages(ctx, []string{id})
	if err != nil {
		return Usage{}, err
	}
	u, ok := us[id]
	if !ok {
		return Usage{}, provider.Errorf(provider.ErrTransient, "the accounting has no record of job %s yet", id)
	}
	return u, nil
}

// Usages reads the use of many ended jobs with one sacct; a job the
// accounting does not know (yet), or one still running, is absent. A site
// without accounting is a final provider.ErrInvalid naming what to enable.
func (p *Provider) Usages(ctx context.Context, ids []string) (map[string]Usage, error) {
	for _, id := range ids {
		if !jobIDForm.MatchString(id) {
			return nil, provider.Errorf(provider.ErrInvalid, "%q is not a Slurm job id", id)
		}
	}
	if len(ids) == 0 {
		return map[string]Usage{}, nil
	}
	out, err := p.run(ctx, "", "sacct", []string{"--noheader", "--parsable2", "--jobs=" + strings.Join(ids, ","),
		"--format=" + usageFormat}, nil)
	if err != nil {
		var ee *ExitError
		if errors.As(err, &ee) && strings.Contains(ee.Stderr, "accounting storage is disabled") {
			return nil, &provider.Error{Kind: provider.ErrInvalid, Code: "NoAccounting", Final: true, Message: slurmMessage(ee.Stderr),
				Detail: "usage records need Slurm's accounting (slurmdbd, AccountingStorageType=accounting_storage/slurmdbd)"}
		}
		return nil, classify("reading the jobs' accounting", err)
	}
	all := parseUsages(string(out))
	for id, u := range all {
		if !ended(u.State) {
			delete(all, id)
		}
	}
	return all, nil
}

// ended reports whether sacct's state is an end state (CANCELLED may read
// "CANCELLED by 0").
func ended(st string) bool {
	return st != "" && state(st) == provider.Terminated
}

// endState is sacct's state without its detail ("CANCELLED by 0").
func endState(st string) string {
	st, _, _ = strings.Cut(st, " ")
	return st
}

const usageFormat = "JobIDRaw,Cluster,Partition,NodeList,State,ElapsedRaw,TotalCPU,MaxRSS,AllocTRES,TRESUsageInMax"

// usageFields is the number of fields of usageFormat.
const usageFields = 10

// parseUsage reads the usage of job id from sacct --parsable2 lines of
// usageFormat.
func parseUsage(out, id string) (Usage, bool) {
	u, ok := parseUsages(out)[id]
	return u, ok
}

// parseUsages reads sacct --parsable2 lines of usageFormat: each job's own
// line (id) and its steps (id.batch, id.0, …), whose largest MaxRSS and
// TRES peaks are the job's.
func parseUsages(out string) map[string]Usage {
	jobs := map[string]*Usage{}
	steps := map[string][]*Usage{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Split(line, "|")
		if len(f) != usageFields {
			continue
		}
		id, step, isStep := strings.Cut(f[0], ".")
		if !jobIDForm.MatchString(id) || (isStep && step == "") {
			continue
		}
		u := &Usage{JobID: id, MaxRSSBytes: parseSize(f[7])}
		peaks := tresValues(f[9])
		if v, ok := peaks["mem"]; ok {
			u.MaxRSSBytes = max(u.MaxRSSBytes, parseSize(v))
		}
		if v, ok := peaks["gres/gpumem"]; ok {
			u.GPUMemoryBytes, u.GPUMemoryOK = parseSize(v), true
		}
		if v, ok := peaks["gres/gpuutil"]; ok {
			if x, err := strconv.ParseFloat(v, 64); err == nil {
				u.GPUUtilizationPercent, u.GPUUtilizationOK = x, true
			}
		}
		if isStep {
			steps[id] = append(steps[id], u)
			continue
		}
		u.Cluster, u.Partition, u.Nodes, u.State = f[1], f[2], f[3], f[4]
		if u.Nodes == "None assigned" {
			u.Nodes = ""
		}
		if s, err := strconv.ParseInt(f[5], 10, 64); err == nil {
			u.Elapsed = time.Duration(s) * time.Second
		}
		u.CPUTime = parseCPUTime(f[6])
		alloc := tresValues(f[8])
		u.CPUs, _ = strconv.Atoi(alloc["cpu"])
		u.MemoryBytes = parseSize(alloc["mem"])
		u.GPUs, _ = strconv.Atoi(alloc["gres/gpu"])
		jobs[id] = u
	}
	res := make(map[string]Usage, len(jobs))
	for id, u := range jobs {
		for _, st := range steps[id] {
			u.MaxRSSBytes = max(u.MaxRSSBytes, st.MaxRSSBytes)
			if st.GPUMemoryOK {
				u.GPUMemoryBytes, u.GPUMemoryOK = max(u.GPUMemoryBytes, st.GPUMemoryBytes), true
			}
			if st.GPUUtilizationOK {
				u.GPUUtilizationPercent, u.GPUUtilizationOK = max(u.GPUUtilizationPercent, st.GPUUtilizationPercent), true
			}
		}
		res[id] = *u
	}
	return res
}

// Peaks turns the usage into a metrics record's peaks: the CPU time and
// its mean share of the allocated CPUs, the peak memory (GiB, and percent
// of the allocation), the GPUs' peaks where the accounting has them, the
// allocation as the record's host and where the job ran.
func (u Usage) Peaks() *metrics.Peaks {
	p := &metrics.Peaks{
		Slurm: &metrics.Slurm{Cluster: u.Cluster, Partition: u.Partition, Nodes: u.Nodes, JobID: u.JobID, State: endState(u.State)},
		Host:  &metrics.Host{CPUs: u.CPUs, GPUs: &u.GPUs},
	}
	cpu := u.CPUTime.Seconds()
	p.CPUSeconds = &cpu
	if u.CPUs > 0 && u.Elapsed > 0 {
		mean := cpu / u.Elapsed.Seconds() / float64(u.CPUs) * 100
		p.CPUMean = &mean
	}
	if u.MemoryBytes > 0 {
		gib := float64(u.MemoryBytes) / (1 << 30)
		p.Host.MemoryGiB = &gib
	}
	if u.MaxRSSBytes > 0 {
		gib := float64(u.MaxRSSBytes) / (1 << 30)
		p.MemoryPeakGiB = &gib
		if u.MemoryBytes > 0 {
			pct := float64(u.MaxRSSBytes) / float64(u.MemoryBytes) * 100
			p.MemoryPeak = &pct
		}
	}
	if u.GPUs > 0 && u.GPUMemoryOK {
		mib := float64(u.GPUMemoryBytes) / (1 << 20)
		p.GPUMemoryUsedMiB = &mib
	}
	if u.GPUs > 0 && u.GPUUtilizationOK {
		util := u.GPUUtilizationPercent
		p.GPUUtilization = &util
	}
	return p
}

// Accounted reads the usage of ended runners with one sacct, as metrics
// records' peaks (writer.AccountedSource): a runner the accounting does
// not know yet, or that still runs, is absent (asked again later); on a
// site without accounting every runner is present with nil peaks (never
// to be measured).
func (p *Provider) Accounted(ctx context.Context, ids []string) (map[string]*metrics.Peaks, error) {
	us, err := p.Usages(ctx, ids)
	var pe *provider.Error
	if errors.As(err, &pe) && pe.Code == "NoAccounting" {
		out := make(map[string]*metrics.Peaks, len(ids))
		for _, id := range ids {
			out[id] = nil
		}
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	out := make(map[string]*metrics.Peaks, len(us))
	for id, u := range us {
		out[id] = u.Peaks()
	}
	return out, nil
}

// parseSize reads Slurm's sizes: 1234K, 12.5M, 3G (binary units), or bytes.
func parseSize(s string) int64 {
	if s == "" {
		return 0
	}
	mult := float64(1)
	switch s[len(s)-1] {
	case 'K':
		mult = 1 << 10
	case 'M':
		mult = 1 << 20
	case 'G':
		mult = 1 << 30
	case 'T':
		mult = 1 << 40
	}
	if mult != 1 {
		s = s[:len(s)-1]
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0
	}
	return int64(v * mult)
}

// parseCPUTime reads [DD-[HH:]]MM:SS[.mmm].
func parseCPUTime(s string) time.Duration {
	var days int
	if d, rest, ok := strings.Cut(s, "-"); ok {
		days, _ = strconv.Atoi(d)
		s = rest
	}
	var frac time.Duration
	if whole, ms, ok := strings.Cut(s, "."); ok {
		n, _ := strconv.Atoi(ms)
		frac = time.Duration(n) * time.Millisecond
		s = whole
	}
	parts := strings.Split(s, ":")
	var secs int
	for _, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil {
			return 0
		}
		secs = secs*60 + n
	}
	return time.Duration(days)*24*time.Hour + time.Duration(secs)*time.Second + frac
}

// tresValues reads a TRES list (cpu=2,mem=1G,gres/gpu=1,node=1).
func tresValues(tres string) map[string]string {
	out := map[string]string{}
	for _, kv := range strings.Split(strings.TrimSpace(tres), ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			out[k] = v
		}
	}
	return out
}

// String renders the usage for logs.
func (u Usage) String() string {
	return fmt.Sprintf("%s on %s/%s: elapsed %s, cpu %s, max rss %d B, %d GPU", u.State, u.Cluster, u.Partition, u.Elapsed, u.CPUTime, u.MaxRSSBytes, u.GPUs)
}
