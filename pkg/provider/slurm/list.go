package slurm

import (
	"cmp"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/provider"
)

// job is one batch job as squeue or sacct reports it: only what Slurm sets
// and the job's user cannot change (no name, no comment).
type job struct {
	ID string
	// User is the Unix user the job runs as (the submitter's, as munge
	// authenticated it).
	User      string
	State     string // Slurm's long state name: PENDING, RUNNING, …
	Reason    string
	Partition string
	Nodes     string
	Submitted time.Time
	// Started is when the job started running (squeue's %S: for a pending
	// job Slurm's expected start, which is not used).
	Started time.Time
}

// squeueFormat is the fixed output of squeue: fields separated by '|',
// the reason last. None of them is one a job's user can write while the
// job runs (a job renames itself or rewrites its comment with scontrol
// update; neither is asked for), so no line can be forged from inside a job.
const squeueFormat = "%i|%u|%T|%P|%N|%V|%S|%r"

// slurmTime is the layout of Slurm's times (the login node's local time).
const slurmTime = "2006-01-02T15:04:05"

// squeue lists the jobs of the daemon's user and of every run-as account
// skiff knows, in every state squeue still knows (ended ones for the
// site's MinJobAge): one call.
func (p *Provider) squeue(ctx context.Context) ([]job, error) {
	p.mu.Lock()
	users := []string{p.o.User}
	for a := range p.accounts {
		users = append(users, a)
	}
	p.mu.Unlock()
	sort.Strings(users[1:])
	out, err := p.run(ctx, "", "squeue", []string{"--noheader", "--states=all", "--user=" + strings.Join(users, ","), "--format=" + squeueFormat}, nil)
	if err != nil {
		return nil, classify("listing the runners' batch jobs", err)
	}
	return parseSqueue(string(out)), nil
}

func parseSqueue(out string) []job {
	var jobs []job
	for _, line := range strings.Split(out, "\n") {
		f := strings.SplitN(line, "|", 8)
		if len(f) != 8 || !jobIDForm.MatchString(f[0]) {
			continue
		}
		j := job{ID: f[0], User: f[1], State: f[2], Partition: f[3], Nodes: f[4], Reason: strings.TrimSpace(f[7])}
		if t, err := time.ParseInLocation(slurmTime, f[6], time.Local); err == nil {
			j.Started = t.UTC()
		}
		if j.Nodes == "(null)" {
			j.Nodes = ""
		}
		if t, err := time.ParseInLocation(slurmTime, f[5], time.Local); err == nil {
			j.Submitted = t.UTC()
		}
		if j.Reason == "None" {
			j.Reason = ""
		}
		jobs = append(jobs, j)
	}
	return jobs
}

// seenJob is a job of skiff's record as Slurm lists it.
type seenJob struct {
	job job
	rec *record
}

// observe runs one squeue and reads it against skiff's record: the jobs of
// the record, by name, whose id and user Slurm confirms. It marks records
// whose jobs ended (or that Slurm forgot), drops records older than
// DefaultRecordAge that ended and submits without a job id older than
// OrphanAge that no replay resolved, notes the run-as accounts that run jobs
// skiff did not submit (a runner's own sbatch) and cancels those jobs.
func (p *Provider) observe(ctx context.Context) (map[string]seenJob, error) {
	// Only a job whose id was recorded before the squeue ran is ended by
	// its absence: a submit that finished meanwhile is not in the answer.
	p.mu.Lock()
	before := map[*record]bool{}
	for _, r := range p.records {
		if r.ID != "" {
			before[r] = true
		}
	}
	p.mu.Unlock()
	jobs, err := p.squeue(ctx)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	seen := map[string]seenJob{}
	foreign := map[string][]string{}
	unsure := map[string]bool{} // accounts with a submit whose id is not recorded yet
	for _, r := range p.records {
		if r.ID == "" && !r.Ended {
			unsure[r.Account] = true
		}
	}
	listed := map[string]bool{}
	for _, j := range jobs {
		listed[j.ID] = true
		r := p.byID[j.ID]
		switch {
		case r != nil && p.user(r.Account) == j.User:
			seen[r.Name] = seenJob{job: j, rec: r}
			if state(j.State) == provider.Terminated && !r.Ended {
				p.setEnded(r)
			}
		case p.accounts[j.User] && state(j.State).Alive() && !unsure[j.User]:
			foreign[j.User] = append(foreign[j.User], j.ID)
		}
	}
	cut := p.o.Now().Add(-DefaultRecordAge)
	orphan := p.o.Now().Add(-p.o.OrphanAge)
	for _, r := range p.records {
		if r.ID == "" && !p.submitting[r.Name] && r.Written.Before(orphan) {
			// A submit a crash interrupted, never replayed: its account is
			// free again (a job sbatch took for it is now one skiff did not
			// submit, and is cancelled).
			p.dropRecord(r)
			continue
		}
		if before[r] && !listed[r.ID] && !r.Ended {
			p.setEnded(r) // forgotten after the site's MinJobAge
		}
		if r.Ended && r.Written.Before(cut) {
			p.dropRecord(r)
		}
	}
	p.foreign = map[string]bool{}
	for a := range foreign {
		p.foreign[a] = true
	}
	p.mu.Unlock()
	for a, ids := range foreign {
		p.o.Logger.Warn("jobs skiff did not submit run as a run-as account: cancelling them", "run_as", a, "instance_ids", ids)
		if err := p.cancel(ctx, a, ids); err != nil {
			p.o.Logger.Warn("cancelling jobs skiff did not submit", "run_as", a, "err", err)
		}
	}
	return seen, nil
}

// setEnded marks r's job ended (p.mu held).
func (p *Provider) setEnded(r *record) {
	r.Ended = true
	if err := p.saveRecord(r); err != nil {
		p.o.Logger.Warn("recording a job's end", "job_name", r.Name, "err", err)
	}
}

// resolve looks for the job of a record without an id (a submit whose
// answer was lost): the newest job of the record's account and name, newer
// than every job recorded for the account — an older job of the account
// that renamed itself is never taken for it. One squeue, whose only field
// is the job id.
func (p *Provider) resolve(ctx context.Context, r *record) (job, bool, error) {
	user := p.user(r.Account)
	out, err := p.run(ctx, "", "squeue", []string{"--noheader", "--states=all", "--user=" + user, "--name=" + r.Name, "--format=%i"}, nil)
	if err != nil {
		return job{}, false, classify("looking for a runner's batch job", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	floor := p.newestID(r.Account, r)
	var best int64
	for _, l := range strings.Fields(string(out)) {
		if id, err := strconv.ParseInt(l, 10, 64); err == nil && jobIDForm.MatchString(l) && id > floor && id > best {
			best = id
		}
	}
	if best == 0 {
		return job{}, false, nil
	}
	r.ID = strconv.FormatInt(best, 10)
	p.byID[r.ID] = r
	if err := p.saveRecord(r); err != nil {
		p.o.Logger.Warn("recording a found job", "job_name", r.Name, "err", err)
	}
	return job{ID: r.ID, User: user, State: "PENDING", Partition: r.Partition, Submitted: r.Written}, true, nil
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

// instance is job j of record r: its tags are skiff's record's, copied
// under p.mu (the caller must not hold it), since a concurrent listing may be tagging the
// record with what its exit code says (exitCodes).
func (p *Provider) instance(j job, r *record) provider.Instance {
	typ := j.Partition
	if typ == "" {
		typ = "default"
	}
	p.mu.Lock()
	tags := make(map[string]string, len(r.Tags)+2)
	for k, v := range r.Tags {
		tags[k] = v
	}
	pool, account := r.Pool, r.Account
	p.mu.Unlock()
	if j.Nodes != "" {
		tags[TagNode] = j.Nodes
	}
	tags[TagRunAs] = p.user(account)
	in := provider.Instance{ID: j.ID, Pool: pool, InstanceType: typ, Zone: p.o.Cluster,
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

// Tags the provider adds to skiff's own.
const (
	// TagNode holds the node(s) a job runs or ran on.
	TagNode = "slurm:nodes"
	// TagRunAs holds the Unix user the job runs as.
	TagRunAs = "slurm:run-as"
)

// List implements provider.Provider with one squeue for all of skiff's jobs,
// plus one sacct when ids are asked for that squeue no longer knows. Only
// jobs of skiff's record are listed, with the record's tags. It also
// removes the JIT files of runAs: shared jobs that ended without reading
// them.
func (p *Provider) List(ctx context.Context, f provider.Filter) ([]provider.Instance, error) {
	seen, err := p.observe(ctx)
	if err != nil {
		return nil, err
	}
	p.sweep()
	byID := map[string]seenJob{}
	for _, s := range seen {
		byID[s.job.ID] = s
	}
	if len(f.IDs) > 0 {
		var missing []*record
		p.mu.Lock()
		for _, id := range f.IDs {
			if r := p.byID[id]; r != nil {
				if _, ok := byID[id]; !ok {
					missing = append(missing, r)
				}
			}
		}
		p.mu.Unlock()
		if len(missing) > 0 {
			for _, s := range p.sacctJobs(ctx, missing) {
				byID[s.job.ID] = s
			}
		}
	}
	p.exitCodes(ctx, byID)
	var out []provider.Instance
	for _, s := range byID {
		in := p.instance(s.job, s.rec)
		if len(f.IDs) > 0 && !slices.Contains(f.IDs, in.ID) || f.Pool != "" && in.Pool != f.Pool || f.AliveOnly && !in.State.Alive() {
			continue
		}
		out = append(out, in)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// exitCodes asks the accounting, in one sacct, for the exit codes of the
// jobs that ended FAILED and whose code has not been read: squeue names no
// exit code. A runner that exited with provider.ExitVersionDeprecated (the
// batch script exits with its runner's code) has its record tagged
// names.TagRunnerOutdated, which the reconciler turns into the pool's hold
// as on every other backend. A site without accounting tells nothing, and
// its refused runners hold no pool (docs/slurm.md).
func (p *Provider) exitCodes(ctx context.Context, jobs map[string]seenJob) {
	var ids []string
	p.mu.Lock()
	for _, s := range jobs {
		if st, _, _ := strings.Cut(s.job.State, " "); st == "FAILED" && !s.rec.ExitRead {
			ids = append(ids, s.job.ID)
		}
	}
	p.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	sort.Strings(ids)
	out, err := p.run(ctx, "", "sacct", []string{"--noheader", "--parsable2", "--allocations", "--jobs=" + strings.Join(ids, ","),
		"--format=JobIDRaw,State,ExitCode"}, nil)
	if err != nil {
		p.o.Logger.Debug("no accounting for the exit codes of failed batch jobs", "err", classify("sacct", err))
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Split(line, "|")
		if len(f) != 3 || !slices.Contains(ids, f[0]) {
			continue
		}
		// The accounting may still hold the job as running, exit code 0:0:
		// only its end state has the runner's code.
		id, s := f[0], jobs[f[0]]
		if st, _, _ := strings.Cut(f[1], " "); st != "FAILED" {
			continue
		}
		exit, _, _ := strings.Cut(f[2], ":") // exit code:signal
		n, err := strconv.Atoi(exit)
		if err != nil {
			continue
		}
		r := s.rec
		r.ExitRead = true
		if n == provider.ExitVersionDeprecated {
			if r.Tags == nil {
				r.Tags = map[string]string{}
			}
			r.Tags[names.TagRunnerOutdated] = cmp.Or(r.Tags[names.TagRunnerVersion], "unknown")
			p.o.Logger.Warn("a runner ended with the version-deprecated exit code", "job_id", id, "job_name", r.Name, "pool", r.Pool)
		}
		if err := p.saveRecord(r); err != nil {
			p.o.Logger.Warn("recording a job's exit code", "job_name", r.Name, "err", err)
		}
	}
}

// sweep removes the runAs: shared JIT files no job will read: their job
// ended, or skiff has no record of them and they are older than OrphanAge.
func (p *Provider) sweep() {
	ents, err := os.ReadDir(p.o.JITDir)
	if err != nil {
		p.o.Logger.Warn("reading the registration directory", "dir", p.o.JITDir, "err", err)
		return
	}
	cut := p.o.Now().Add(-p.o.OrphanAge)
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".jit")
		if !ok {
			continue
		}
		p.mu.Lock()
		r := p.records[name]
		keep := r != nil && !r.Ended
		p.mu.Unlock()
		if keep {
			continue
		}
		if r == nil {
			fi, err := e.Info()
			if err != nil || fi.ModTime().After(cut) {
				continue
			}
		}
		if err := os.Remove(filepath.Join(p.o.JITDir, e.Name())); err == nil {
			p.o.Logger.Info("removed an unread registration file", "job_name", name, "job_known", r != nil)
		} else if !errors.Is(err, os.ErrNotExist) {
			p.o.Logger.Warn("removing an unread registration file", "job_name", name, "err", err)
		}
	}
}

// Terminate implements provider.Provider with one scancel per account the
// jobs run as (through sudo for a run-as account), for the jobs of skiff's
// record only. An id skiff did not submit, an id Slurm does not know, or a
// job already ended is not an error.
func (p *Provider) Terminate(ctx context.Context, ids []string) error {
	byAccount := map[string][]string{}
	p.mu.Lock()
	for _, id := range ids {
		if r := p.byID[id]; r != nil && jobIDForm.MatchString(id) {
			byAccount[r.Account] = append(byAccount[r.Account], id)
		}
	}
	p.mu.Unlock()
	var errs []error
	for a, jobs := range byAccount {
		if err := p.cancel(ctx, a, jobs); err != nil {
			errs = append(errs, err)
			continue
		}
		p.o.Logger.Info("cancelled runners' batch jobs", "instance_ids", jobs, "run_as", p.user(a))
	}
	return errors.Join(errs...)
}

// cancel runs one scancel of account's jobs, as the account.
func (p *Provider) cancel(ctx context.Context, account string, ids []string) error {
	_, err := p.run(ctx, account, "scancel", append([]string{"--user=" + p.user(account)}, ids...), nil)
	var ee *ExitError
	if errors.As(err, &ee) && onlyGone(ee.Stderr) {
		return nil
	}
	if err != nil {
		return classifyRunAs("cancelling batch jobs", err)
	}
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
