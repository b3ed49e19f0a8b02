package loadtest

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/metrics"
	"github.com/skiffci/skiff/pkg/names"
)

// discover adds the jobs GitHub queued for re-runs to the ones tracked.
func (w *world) discover() {
	for _, r := range w.runs {
		st, ok := w.sim.Run(r.id)
		if !ok {
			continue
		}
		for _, id := range st.JobIDs {
			if w.jobs[id] == nil {
				w.jobs[id] = &jobRec{id: id, run: r.id, queuedAt: w.clock.Now()}
			}
		}
	}
}

// quiet: every run has its jobs done, and nothing is left — no instance,
// no runner, no live count, no event or delivery on its way.
func (w *world) quiet() bool {
	if len(w.pending) > 0 || len(w.stalled) > 0 || w.proxy.pending() > 0 || len(w.fake.Live()) > 0 || len(w.sim.Runners()) > 0 {
		return false
	}
	for _, p := range w.pools.Pools {
		if n, err := w.be.ledger.Live(w.ctx, p.Name); err != nil || n != 0 {
			return false
		}
	}
	w.discover()
	for _, r := range w.runs {
		st, _ := w.sim.Run(r.id)
		if st.Status != "completed" {
			return false
		}
		ok, excused := 0, true
		for _, id := range st.JobIDs {
			js, _ := w.sim.Job(id)
			switch {
			case js.Conclusion == "success":
				ok++
			case !w.interrupted[js.RunnerName]:
				excused = false
			}
		}
		if ok < r.jobs && excused { // a re-run is due
			return false
		}
	}
	return true
}

// status is one line of where things are.
func (w *world) status() string {
	queued, running, completed := 0, 0, 0
	for id := range w.jobs {
		js, _ := w.sim.Job(id)
		switch js.Status {
		case "queued":
			queued++
		case "in_progress":
			running++
		case "completed":
			completed++
		}
	}
	return fmt.Sprintf("jobs queued %d running %d completed %d/%d; instances alive %d; runners %d; queue depth %d; events in flight %d",
		queued, running, completed, len(w.jobs), len(w.fake.Live()), len(w.sim.Runners()), w.q.Depth(), len(w.pending))
}

// check judges the run: every invariant, then the figures.
func (w *world) check() Report {
	w.discover()
	rep := Report{Seed: w.cfg.Seed, Store: w.cfg.Store, MetricsRecords: w.cfg.MetricsRecords, Runs: len(w.runs), Jobs: len(w.jobs),
		Probes: len(w.probes), FaultCounts: w.faults,
		ServiceCounts: w.counter.Snapshot(), Invocations: w.invocations, Crashed: w.crashes, Stalled: w.stalls,
		Replacements: w.logs.total(), PeakHeap: w.peakHeap}
	w.vmu.Lock()
	fail := append([]string(nil), w.violations...)
	w.vmu.Unlock()
	ranOnOurs, waits, jobFailures := w.checkRuns(&rep)
	fail = append(fail, jobFailures...)
	fail = append(fail, w.checkDeadLetters(&rep)...)
	fail = append(fail, w.checkNoSecondRunner()...)
	fail = append(fail, w.checkNothingLeft()...)
	fail = append(fail, w.checkMetricsRecords(ranOnOurs)...)
	fail = append(fail, w.checkStartKinds(&rep, ranOnOurs)...)
	rep.Failures = fail
	rep.Warm = w.warm.figures
	rep.Starts = w.starts
	w.figures(&rep, waits)
	return rep
}

// judgeJob says whether a job of a run ended as it must — a success on a
// skiff runner — and if not, what became of it; interrupted says whether a
// spot interruption ended the runner it ran on.
func judgeJob(js ghsim.JobState, interrupted bool) (ok bool, problem string) {
	switch {
	case js.Conclusion == "success" && strings.HasPrefix(js.RunnerName, names.RunnerNamePrefix):
		return true, ""
	case js.Conclusion == "success":
		return false, fmt.Sprintf("job %d ran on %q, not a skiff runner", js.ID, js.RunnerName)
	case js.Status == "completed" && interrupted:
		return false, fmt.Sprintf("job %d failed on runner %s, which a spot interruption ended", js.ID, js.RunnerName)
	case js.Status == "completed":
		return false, fmt.Sprintf("job %d failed on runner %s, which no spot interruption ended", js.ID, js.RunnerName)
	default:
		return false, fmt.Sprintf("job %d is still %s: lost", js.ID, js.Status)
	}
}

// checkRuns: every job GitHub queued ends completed on a runner: a job that
// failed because a spot interruption ended its runner must have a
// successful re-run. It counts the jobs completed on skiff's runners and
// the re-runs into rep, and returns the jobs that ran on skiff's runners
// and the queue waits of the original jobs.
func (w *world) checkRuns(rep *Report) (ranOnOurs map[int64]bool, waits []time.Duration, fail []string) {
	ranOnOurs = map[int64]bool{}
	for _, r := range w.runs {
		st, _ := w.sim.Run(r.id)
		ok := 0
		var bad []string
		for _, id := range st.JobIDs {
			js, _ := w.sim.Job(id)
			if js.Status == "completed" && strings.HasPrefix(js.RunnerName, names.RunnerNamePrefix) {
				ranOnOurs[id] = true
				rep.Completed++
			}
			if j := w.jobs[id]; j != nil && j.original && !js.StartedAt.IsZero() {
				waits = append(waits, js.StartedAt.Sub(j.queuedAt))
			}
			if j := w.jobs[id]; j != nil && !j.original {
				rep.Reruns++
			}
			js.ID = id
			if good, problem := judgeJob(js, w.interrupted[js.RunnerName]); good {
				ok++
			} else {
				bad = append(bad, problem)
			}
		}
		if ok < r.jobs {
			fail = append(fail, fmt.Sprintf("run %d: %d of %d jobs succeeded on skiff runners: %s", r.id, ok, r.jobs, strings.Join(bad, "; ")))
		}
	}
	return ranOnOurs, waits, fail
}

// checkDeadLetters: no job is dead-lettered; it counts them into rep.
func (w *world) checkDeadLetters(rep *Report) (fail []string) {
	for _, d := range w.q.DeadLetters() {
		rep.DeadLetters++
		fail = append(fail, fmt.Sprintf("job %d dead-lettered after %d receives: %s %s", d.JobID, d.ReceiveCount, d.Reason, d.Detail))
	}
	return fail
}

// checkNoSecondRunner: no job ever had two live runners launched for it,
// but as a logged replacement.
func (w *world) checkNoSecondRunner() (fail []string) {
	for _, id := range sortedKeys(w.peakLive) {
		if n := w.peakLive[id]; n > 1+w.logs.replacements(id) {
			fail = append(fail, fmt.Sprintf("job %d had %d instances alive at once and %d logged replacements", id, n, w.logs.replacements(id)))
		}
	}
	return fail
}

// checkNothingLeft: at the end no instance is alive or stopped, no runner
// registered, no pool counts a live runner.
func (w *world) checkNothingLeft() (fail []string) {
	if live := w.fake.Live(); len(live) > 0 {
		ids := make([]string, 0, len(live))
		for _, in := range live {
			ids = append(ids, in.ID)
		}
		fail = append(fail, fmt.Sprintf("%d instances alive at the end: %s", len(live), strings.Join(first(ids, 10), " ")))
	}
	var kept []string
	for _, in := range w.fake.Instances() {
		if in.State == "stopping" || in.State == "stopped" {
			kept = append(kept, in.ID)
		}
	}
	if len(kept) > 0 {
		fail = append(fail, fmt.Sprintf("%d instances stopped at the end: %s", len(kept), strings.Join(first(kept, 10), " ")))
	}
	if rs := w.sim.Runners(); len(rs) > 0 {
		fail = append(fail, fmt.Sprintf("%d runners still registered at the end (first: %s)", len(rs), rs[0].Name))
	}
	for _, p := range w.pools.Pools {
		n, err := w.be.ledger.Live(w.ctx, p.Name)
		if err != nil || n != 0 {
			fail = append(fail, fmt.Sprintf("pool %s counts %d live runners at the end (%v)", p.Name, n, err))
		}
	}
	return fail
}

// checkMetricsRecords: with metrics records on, every job completed on a
// skiff runner (ranOnOurs) has exactly one metrics record, and every record
// validates against the schema; with them off, there is none.
func (w *world) checkMetricsRecords(ranOnOurs map[int64]bool) (fail []string) {
	failf := func(format string, args ...any) { fail = append(fail, fmt.Sprintf(format, args...)) }
	recs := map[int64]int{}
	var all []metrics.Record
	for r, err := range w.be.metrics.List(w.ctx, metrics.Filter{}) {
		if err != nil {
			failf("listing metrics records: %v", err)
			break
		}
		recs[r.JobID]++
		all = append(all, r)
		if err := metrics.Validate(r); err != nil {
			failf("job %d's metrics record fails the schema: %v", r.JobID, err)
		}
	}
	for _, id := range sortedKeys(ranOnOurs) {
		if !w.cfg.MetricsRecords {
			break
		}
		if recs[id] != 1 {
			failf("job %d completed on a skiff runner and has %d metrics records, want 1", id, recs[id])
		}
	}
	if n := len(recs); !w.cfg.MetricsRecords && n > 0 {
		failf("metrics records are off, and %d jobs have one", n)
	}
	w.starts = metrics.SummarizeStarts(all)
	return fail
}

// checkStartKinds counts the jobs completed on skiff's runners by how
// their runner's machine started (rep.StartKinds) and checks what skiff
// recorded of it: the ledger's start kind of the runner that ran each job,
// and its metrics record's, is what the machine did — cold for one
// launched for a job, stopped or hot for a warm one as it waited — or
// none (a runner the reconciler linked to its instance after scale-up's
// report was lost). Jobs that came to warm pools while they held machines
// took some of them (report: how many).
func (w *world) checkStartKinds(rep *Report, ranOnOurs map[int64]bool) (fail []string) {
	rep.StartKinds = map[string]int{}
	for _, id := range sortedKeys(ranOnOurs) {
		in := w.ranOn[id]
		if in == nil {
			rep.StartKinds["unseen"]++
			continue
		}
		rep.StartKinds[in.startKind]++
		js, _ := w.sim.Job(id)
		if r, err := w.be.peek.Runner(w.ctx, js.RunnerName); err == nil && r.StartKind != "" && r.StartKind != in.startKind {
			fail = append(fail, fmt.Sprintf("job %d ran on runner %s, whose instance %s started %s; the ledger says %s", id,
				js.RunnerName, in.id, in.startKind, r.StartKind))
		}
	}
	for r, err := range w.be.metrics.List(w.ctx, metrics.Filter{}) {
		if err != nil || r.Start == nil || r.Start.Kind == "" {
			continue
		}
		if in := w.byRunner[r.RunnerName]; in != nil && r.Start.Kind != in.startKind {
			fail = append(fail, fmt.Sprintf("job %d's metrics record says start kind %s; its runner %s's instance %s started %s", r.JobID,
				r.Start.Kind, r.RunnerName, in.id, in.startKind))
		}
	}
	for _, id := range sortedKeys(w.insts) {
		if in := w.insts[id]; in.warmName != "" {
			if r, err := w.be.peek.Runner(w.ctx, in.warmName); err == nil && strings.HasPrefix(r.Reason, "taken by ") {
				w.warm.figures.Taken++
			}
		}
	}
	if n := w.warmArrivals(); n >= minWarmArrivals && w.warm.figures.Taken == 0 {
		fail = append(fail, fmt.Sprintf("%d jobs came to warm pools while their schedules held, and none took a warm machine "+
			"(a provider wrapper that hides provider.Warmer turns warm pools off)", n))
	}
	return fail
}

// minWarmArrivals is how many jobs of warm pools a run needs before one
// must take a warm machine: the pool keeps five ready from warmUp on. (Not
// every take is a warm start: a take whose registration fails, in a
// secondary rate limit say, ends with the machine terminated and the job
// retried.)
const minWarmArrivals = 5

// waitPercentiles are the median, 95th percentile and longest of waits,
// which it sorts.
func waitPercentiles(waits []time.Duration) (p50, p95, longest time.Duration) {
	slices.Sort(waits)
	pct := func(p float64) time.Duration {
		if len(waits) == 0 {
			return 0
		}
		return waits[min(len(waits)-1, int(p*float64(len(waits))))]
	}
	if len(waits) > 0 {
		longest = waits[len(waits)-1]
	}
	return pct(0.50), pct(0.95), longest
}

// figures fills in the report's figures: the queue waits, the simulated
// span, the calls to GitHub, EC2 and the store, and the memory used.
func (w *world) figures(rep *Report, waits []time.Duration) {
	rep.WaitP50, rep.WaitP95, rep.WaitMax = waitPercentiles(waits)
	rep.SimSpan = w.clock.Now().Sub(w.start)
	rep.Instances = len(w.fake.Instances())
	for _, op := range githubOps {
		rep.GitHubCalls += w.sim.Requests(op)
	}
	rep.EC2Calls = w.ec2Calls.Total()
	rep.EC2Retries = w.ec2Calls.retried()
	rep.StoreCalls = -1
	if w.be.calls != nil {
		rep.StoreCalls = 0
		rep.StoreOps = w.be.calls()
		for _, n := range rep.StoreOps {
			rep.StoreCalls += n
		}
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		rep.MaxRSS = ru.Maxrss
	}
	rep.EmulatorRSS = childPeakRSS()
}

func first(s []string, n int) []string { return s[:min(n, len(s))] }

// sortedKeys returns a map's keys (job or instance ids) in order, so that
// a report lists its failures in the same order every run.
func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// childPeakRSS is the largest peak resident set (KiB) of this process's
// children: the store emulator, when one runs.
func childPeakRSS() int64 {
	self := strconv.Itoa(os.Getpid())
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var peak int64
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(s[i+1:])
		if len(fields) < 2 || fields[1] != self {
			continue
		}
		st, err := os.ReadFile(filepath.Join(filepath.Dir(f), "status"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(st), "\n") {
			if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
				n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				peak = max(peak, n)
			}
		}
	}
	return peak
}
