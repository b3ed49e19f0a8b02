package slurm

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/provider"
)

// job is one batch job as squeue or sacct reports it.
type job struct {
	ID        string
	Name      string
	State     string // Slurm's long state name: PENDING, RUNNING, …
	Reason    string
	Partition string
	Nodes     string
	Submitted time.Time
	// Started is when the job started running (squeue's %S: for a pending
	// job Slurm's expected start, which is not used).
	Started time.Time
	Tags    map[string]string
}

// squeueFormat is the fixed output of squeue: fields separated by '|',
// the reason (free text) last. Job names and comments are skiff's own and
// hold no '|'.
const squeueFormat = "%i|%T|%P|%N|%V|%j|%k|%S|%r"

// slurmTime is the layout of Slurm's times (the login node's local time).
const slurmTime = "2006-01-02T15:04:05"

// squeue lists the daemon's user's jobs of skiff's prefix, in every state
// squeue still knows (ended ones for the site's MinJobAge): one call.
func (p *Provider) squeue(ctx context.Context) ([]job, error) {
	out, err := p.run(ctx, "squeue", []string{"--noheader", "--states=all", "--user=" + p.o.User, "--format=" + squeueFormat}, nil)
	if err != nil {
		return nil, classify("listing the runners' batch jobs", err)
	}
	return parseSqueue(string(out), p.o.NamePrefix), nil
}

func parseSqueue(out, prefix string) []job {
	var jobs []job
	for _, line := range strings.Split(out, "\n") {
		f := strings.SplitN(line, "|", 9)
		if len(f) != 9 || !strings.HasPrefix(f[5], prefix) || !jobIDForm.MatchString(f[0]) {
			continue
		}
		j := job{ID: f[0], State: f[1], Partition: f[2], Nodes: f[3], Name: f[5], Tags: decodeTags(f[6]), Reason: strings.TrimSpace(f[8])}
		if t, err := time.ParseInLocation(slurmTime, f[7], time.Local); err == nil {
			j.Started = t.UTC()
		}
		if j.Nodes == "(null)" {
			j.Nodes = ""
		}
		if t, err := time.ParseInLocation(slurmTime, f[4], time.Local); err == nil {
			j.Submitted = t.UTC()
		}
		if j.Reason == "None" {
			j.Reason = ""
		}
		jobs = append(jobs, j)
	}
	return jobs
}

// state maps Slurm's job state to the neutral one: waiting in Slurm's
// queue is pending (with Slurm's reason), COMPLETING is stopping, every
// end state is terminated.
func state(s string) provider.State {
	s, _, _ = strings.Cut(s, " ") // "CANCELLED by 0" in sacct
	switch s {
	case "PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "RESIZING":
		return provider.Pending
	case "RUNNING", "SIGNALING", "STAGE_OUT":
		return provider.Running
	case "COMPLETING":
		return provider.Stopping
	case "SUSPENDED", "STOPPED":
		return provider.Stopped
	}
	// COMPLETED, CANCELLED, FAILED, TIMEOUT, NODE_FAIL, PREEMPTED,
	// BOOT_FAIL, DEADLINE, OUT_OF_MEMORY, SPECIAL_EXIT, REVOKED
	return provider.Terminated
}

func (p *Provider) instance(j job) provider.Instance {
	typ := j.Partition
	if typ == "" {
		typ = "default"
	}
	tags := make(map[string]string, len(j.Tags)+1)
	for k, v := range j.Tags {
		tags[k] = v
	}
	if j.Nodes != "" {
		tags[TagNode] = j.Nodes
	}
	in := provider.Instance{ID: j.ID, Pool: tags[names.TagPool], InstanceType: typ, Zone: p.o.Cluster,
		Capacity: provider.OnDemand, State: state(j.State), LaunchedAt: j.Submitted, Tags: tags}
	switch in.State {
	case provider.Pending:
		in.QueueReason = j.Reason
	case provider.Running, provider.Stopping:
		// Every batch job passes through Slurm's queue: the boot timeout
		// counts from its start.
		in.RunningSince = j.Started
	}
	return in
}

// TagNode is the tag holding the node(s) a job runs or ran on.
const TagNode = "slurm:nodes"

// List implements provider.Provider with one squeue for all of skiff's jobs,
// plus one sacct when ids are asked for that squeue no longer knows. It
// also removes the JIT files of jobs that ended without reading them.
func (p *Provider) List(ctx context.Context, f provider.Filter) ([]provider.Instance, error) {
	jobs, err := p.squeue(ctx)
	if err != nil {
		return nil, err
	}
	p.sweep(jobs)
	if len(f.IDs) > 0 {
		var missing []string
		for _, id := range f.IDs {
			if jobIDForm.MatchString(id) && !slices.ContainsFunc(jobs, func(j job) bool { return j.ID == id }) {
				missing = append(missing, id)
			}
		}
		if len(missing) > 0 {
			jobs = append(jobs, p.sacctJobs(ctx, missing)...)
		}
	}
	var out []provider.Instance
	for _, j := range jobs {
		in := p.instance(j)
		if len(f.IDs) > 0 && !slices.Contains(f.IDs, in.ID) || f.Pool != "" && in.Pool != f.Pool || f.AliveOnly && !in.State.Alive() {
			continue
		}
		out = append(out, in)
	}
	return out, nil
}

// sweep removes the JIT files no job will read: their job ended, or Slurm
// knows no job of their name and they are older than OrphanAge.
func (p *Provider) sweep(jobs []job) {
	ents, err := os.ReadDir(p.o.JITDir)
	if err != nil {
		p.o.Logger.Warn("reading the registration directory", "dir", p.o.JITDir, "err", err)
		return
	}
	byName := map[string]provider.State{}
	for _, j := range jobs {
		if st, ok := byName[j.Name]; !ok || st == provider.Terminated {
			byName[j.Name] = state(j.State)
		}
	}
	cut := p.o.Now().Add(-p.o.OrphanAge)
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".jit")
		if !ok {
			continue
		}
		st, known := byName[name]
		if known && st != provider.Terminated {
			continue
		}
		if !known {
			fi, err := e.Info()
			if err != nil || fi.ModTime().After(cut) {
				continue
			}
		}
		if err := os.Remove(filepath.Join(p.o.JITDir, e.Name())); err == nil {
			p.o.Logger.Info("removed an unread registration file", "job_name", name, "job_known", known)
		} else if !errors.Is(err, os.ErrNotExist) {
			p.o.Logger.Warn("removing an unread registration file", "job_name", name, "err", err)
		}
	}
}

// Terminate implements provider.Provider with one scancel for all the ids
// (the daemon's user's jobs only). An id Slurm does not know, or a job
// already ended, is not an error.
func (p *Provider) Terminate(ctx context.Context, ids []string) error {
	var jobs []string
	for _, id := range ids {
		if jobIDForm.MatchString(id) {
			jobs = append(jobs, id)
		}
	}
	if len(jobs) == 0 {
		return nil
	}
	_, err := p.run(ctx, "scancel", append([]string{"--user=" + p.o.User}, jobs...), nil)
	var ee *ExitError
	if errors.As(err, &ee) && onlyGone(ee.Stderr) {
		return nil
	}
	if err != nil {
		return classify("cancelling batch jobs", err)
	}
	p.o.Logger.Info("cancelled runners' batch jobs", "instance_ids", jobs)
	return nil
}

// onlyGone reports whether every error scancel printed says the job is
// unknown or already ended.
func onlyGone(stderr string) bool {
	seen := false
	for _, l := range strings.Split(stderr, "\n") {
		if !strings.Contains(l, "error") {
			continue
		}
		seen = true
		if !strings.Contains(l, "Invalid job id specified") && !strings.Contains(l, "already completing or completed") {
			return false
		}
	}
	return seen
}
