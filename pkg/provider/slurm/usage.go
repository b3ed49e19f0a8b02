package slurm

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/skiffci/skiff/pkg/provider"
)

// sacctJobs asks the accounting for jobs squeue no longer knows (ended
// longer ago than MinJobAge): one sacct. A site without accounting answers
// nothing, and those jobs are absent ("gone for good").
func (p *Provider) sacctJobs(ctx context.Context, ids []string) []job {
	out, err := p.run(ctx, "sacct", []string{"--noheader", "--parsable2", "--allocations", "--user=" + p.o.User,
		"--jobs=" + strings.Join(ids, ","), "--format=JobIDRaw,State,Partition,NodeList,Submit,JobName,Comment"}, nil)
	if err != nil {
		p.o.Logger.Debug("no accounting for ended batch jobs", "err", classify("sacct", err))
		return nil
	}
	var jobs []job
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Split(line, "|")
		if len(f) != 7 || !jobIDForm.MatchString(f[0]) || !strings.HasPrefix(f[5], p.o.NamePrefix) {
			continue
		}
		j := job{ID: f[0], State: f[1], Partition: f[2], Nodes: f[3], Name: f[5], Tags: decodeTags(f[6])}
		if j.Nodes == "None assigned" {
			j.Nodes = ""
		}
		if t, err := time.ParseInLocation(slurmTime, f[4], time.Local); err == nil {
			j.Submitted = t.UTC()
		}
		jobs = append(jobs, j)
	}
	return jobs
}

// Usage is what the accounting says an ended job used, for the job's
// metrics record.
type Usage struct {
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
	// GPUs is how many GPUs it was allocated.
	GPUs int
}

// Usage reads an ended job's use from sacct (one call). A site without
// accounting is a provider.ErrInvalid naming what to enable; a job the
// accounting does not know (yet) is an ErrTransient.
func (p *Provider) Usage(ctx context.Context, id string) (Usage, error) {
	if !jobIDForm.MatchString(id) {
		return Usage{}, provider.Errorf(provider.ErrInvalid, "%q is not a Slurm job id", id)
	}
	out, err := p.run(ctx, "sacct", []string{"--noheader", "--parsable2", "--jobs=" + id,
		"--format=" + usageFormat}, nil)
	if err != nil {
		var ee *ExitError
		if errors.As(err, &ee) && strings.Contains(ee.Stderr, "accounting storage is disabled") {
			return Usage{}, &provider.Error{Kind: provider.ErrInvalid, Code: "NoAccounting", Final: true, Message: slurmMessage(ee.Stderr),
				Detail: "usage records need Slurm's accounting (slurmdbd, AccountingStorageType=accounting_storage/slurmdbd)"}
		}
		return Usage{}, classify("reading the job's accounting", err)
	}
	u, ok := parseUsage(string(out), id)
	if !ok {
		return Usage{}, provider.Errorf(provider.ErrTransient, "the accounting has no record of job %s yet", id)
	}
	return u, nil
}

const usageFormat = "JobIDRaw,Cluster,Partition,NodeList,State,ElapsedRaw,TotalCPU,MaxRSS,AllocTRES"

// parseUsage reads sacct --parsable2 lines of usageFormat: the job's own
// line (id) and its steps (id.batch, id.0, …), whose largest MaxRSS is the
// job's peak.
func parseUsage(out, id string) (Usage, bool) {
	var u Usage
	found := false
	for _, line := range strings.Split(out, "\n") {
		f := strings.Split(line, "|")
		if len(f) != 9 {
			continue
		}
		if rss := parseSize(f[7]); rss > u.MaxRSSBytes && strings.HasPrefix(f[0], id+".") {
			u.MaxRSSBytes = rss
		}
		if f[0] != id {
			continue
		}
		found = true
		u.Cluster, u.Partition, u.Nodes, u.State = f[1], f[2], f[3], f[4]
		if s, err := strconv.ParseInt(f[5], 10, 64); err == nil {
			u.Elapsed = time.Duration(s) * time.Second
		}
		u.CPUTime = parseCPUTime(f[6])
		u.GPUs = tresCount(f[8], "gres/gpu")
		if rss := parseSize(f[7]); rss > u.MaxRSSBytes {
			u.MaxRSSBytes = rss
		}
	}
	return u, found
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

// tresCount is the count of a TRES (cpu=2,mem=1G,gres/gpu=1,node=1), 0
// when absent.
func tresCount(tres, name string) int {
	for _, kv := range strings.Split(tres, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}

// String renders the usage for logs.
func (u Usage) String() string {
	return fmt.Sprintf("%s on %s/%s: elapsed %s, cpu %s, max rss %d B, %d GPU", u.State, u.Cluster, u.Partition, u.Elapsed, u.CPUTime, u.MaxRSSBytes, u.GPUs)
}
