package loadtest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/scaledown"
)

// A probe is a job during which the harness holds back all but one of the
// reconciler's three views of a busy runner — GitHub's busy flag, the
// ledger's job start (the webhook's in_progress event), the job-started
// hook tag — or all three, leaving GitHub's refusal to delete a busy runner
// alone. Probes run longer than the idle timeout, so a reconciler that
// ignores the one signal left takes the runner for idle: it asks GitHub to
// delete a runner whose busy signal it could see (a near miss, which the
// delete guard below reports), or, with the refusal ignored, terminates it.
type probe int

const (
	noProbe probe = iota
	probeFlag
	probeLedger
	probeTag
	probeRefusal
)

var probeNames = map[probe]string{probeFlag: "flag", probeLedger: "ledger", probeTag: "tag", probeRefusal: "refusal"}

// probeKinds in the order the plan cycles through them.
var probeKinds = []probe{probeFlag, probeLedger, probeTag, probeRefusal}

// noTag: the runner's job-started hook fails to tag its instance.
func (p probe) noTag() bool { return p == probeFlag || p == probeLedger || p == probeRefusal }

// flagHidden: GitHub's REST answers show the runner idle for the whole job.
func (p probe) flagHidden() bool { return p == probeLedger || p == probeTag || p == probeRefusal }

// eventLate: the job's in_progress delivery reaches the webhook after the job.
func (p probe) eventLate() bool { return p == probeFlag || p == probeTag || p == probeRefusal }

// probeEventDelay holds a probe's in_progress delivery past the job's end.
const probeEventDelay = 25 * time.Minute

// probeJobs is how many probes a run of n jobs has: one of each kind per
// 250 jobs, at least one of each.
func probeJobs(n int) int { return len(probeKinds) * max(1, n/250) }

func (w *world) probeOf(job int64) probe {
	w.pmu.Lock()
	defer w.pmu.Unlock()
	return w.probes[job]
}

// flagHidden is ghsim.Options.BusyHidden: the probes' hidden flags, and
// with Faults.BusyLag GitHub's lagging one (busyHidden).
func (w *world) flagHidden(job int64, since time.Duration) bool {
	if w.probeOf(job).flagHidden() {
		return true
	}
	return w.cfg.Faults.BusyLag && busyHidden(job, since)
}

// holdDelivery is how long the network holds a delivery back (0: not
// held): a probe's in_progress event, past its job's end.
func (w *world) holdDelivery(event string, body []byte) time.Duration {
	if event != "workflow_job" {
		return 0
	}
	var d struct {
		Action string `json:"action"`
		Job    struct {
			ID int64 `json:"id"`
		} `json:"workflow_job"`
	}
	if json.Unmarshal(body, &d) != nil || d.Action != "in_progress" || !w.probeOf(d.Job.ID).eventLate() {
		return 0
	}
	return probeEventDelay
}

// busySignals are the reconciler's views of runner r (busy on GitHub,
// running job) that show it busy now: GitHub's flag as its REST API shows
// it, the ledger's job start, the instance's job-started tag without a
// job-completed one.
func (w *world) busySignals(ctx context.Context, r ghsim.RunnerState, started time.Time) []string {
	var out []string
	if !w.flagHidden(r.JobID, w.clock.Now().Sub(started)) {
		out = append(out, "GitHub's busy flag")
	}
	if lr, err := w.be.ledger.Runner(ctx, r.Name); err == nil && lr.State == ledger.StateJobStarted {
		out = append(out, "the ledger's job start")
	}
	for _, in := range w.fake.Live() {
		if in.Tags[names.TagRunnerName] != r.Name {
			continue
		}
		_, started := in.Tags[names.TagJobStarted]
		_, completed := in.Tags[names.TagJobCompleted]
		if started && !completed {
			out = append(out, "its job-started tag")
		}
	}
	return out
}

// deleteGuard is the reconciler's GitHub client as the harness sees it: a
// deletion of a runner that runs a job, asked while one of the
// reconciler's views of the runner showed it busy, is a violation even
// when GitHub refuses it — each signal must hold on its own. A job that
// started during the pass (its start not visible when the pass read its
// inputs) is not judged.
type deleteGuard struct {
	scaledown.GitHub
	w *world
}

func (g deleteGuard) DeleteRunner(ctx context.Context, inst int64, scope github.Scope, id int64) error {
	w := g.w
	for _, r := range w.sim.Runners() {
		if r.ID != id || !r.Busy {
			continue
		}
		js, _ := w.sim.Job(r.JobID)
		if !js.StartedAt.Before(w.passStart) {
			break
		}
		if sig := w.busySignals(ctx, r, js.StartedAt); len(sig) > 0 {
			w.violate(fmt.Sprintf("reconciler asked GitHub to delete runner %s, running job %d for %s, while %s showed it busy",
				r.Name, r.JobID, w.clock.Now().Sub(js.StartedAt), strings.Join(sig, " and ")))
		}
	}
	return g.GitHub.DeleteRunner(ctx, inst, scope, id)
}
