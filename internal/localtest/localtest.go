// Package localtest holds what the end-to-end tests of skiff local share
// across its providers: waiting for the simulator's jobs to finish and the
// checks every job's metrics record must pass, whatever ran it.
package localtest

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skiffci/skiff/internal/local"
	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/metrics"
)

// Poll checks cond every 50 ms until it holds: the simulator, the runners
// and skiff's loops move in their own goroutines and processes. It is
// testenv.Await, with logs as the failure's detail.
func Poll(t *testing.T, what string, logs *testenv.SyncBuffer, cond func() bool) {
	t.Helper()
	testenv.Await(t, what, 50*time.Millisecond, cond, logs.String)
}

// Run runs l until stop is called, and at the latest when t ends; stop
// ends Run and returns its error (the same at every call).
func Run(t testing.TB, l *local.Local) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() { cancel(); runErr = <-done })
		return runErr
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// StartRun starts a run of n jobs on acme/app, each asking for
// self-hosted, linux, x64.
func StartRun(t *testing.T, sim *ghsim.Server, n int) ghsim.RunInfo {
	t.Helper()
	spec := ghsim.RunSpec{Repo: "acme/app"}
	for range n {
		spec.Jobs = append(spec.Jobs, ghsim.JobSpec{Labels: []string{"self-hosted", "linux", "x64"}})
	}
	run, err := sim.StartRun(spec)
	if err != nil {
		t.Fatal(err)
	}
	return run
}

// Finish waits until every job of run completed, pool counts no runner in
// l's ledger and each job has its metrics record; it returns the records
// by job.
func Finish(t *testing.T, sim *ghsim.Server, l *local.Local, pool string, logs *testenv.SyncBuffer, run ghsim.RunInfo) map[int64][]metrics.Record {
	t.Helper()
	Poll(t, "every job to complete", logs, func() bool {
		for _, id := range run.JobIDs {
			if j, ok := sim.Job(id); !ok || j.Status != "completed" {
				return false
			}
		}
		return true
	})
	Poll(t, "the pool to count no runner", logs, func() bool {
		live, err := l.Ledger.Live(context.Background(), pool)
		return err == nil && live == 0
	})
	recs := map[int64][]metrics.Record{}
	Poll(t, "a metrics record per job", logs, func() bool {
		recs = map[int64][]metrics.Record{}
		for r, err := range l.MetricsRecords.List(context.Background(), metrics.Filter{}) {
			if err != nil {
				t.Fatal(err)
			}
			recs[r.JobID] = append(recs[r.JobID], r)
		}
		return len(recs) >= len(run.JobIDs)
	})
	return recs
}

// Check fails t unless every job of run succeeded with exactly one record
// that passes the schema and record (the provider's own checks), and no
// credential of sim reached logs.
func Check(t *testing.T, sim *ghsim.Server, logs *testenv.SyncBuffer, run ghsim.RunInfo, recs map[int64][]metrics.Record, record func(id int64, r metrics.Record)) {
	t.Helper()
	for _, id := range run.JobIDs {
		if j, _ := sim.Job(id); j.Conclusion != "success" {
			t.Errorf("job %d: %+v", id, j)
		}
		if len(recs[id]) != 1 {
			t.Errorf("job %d has %d metrics records, want 1", id, len(recs[id]))
			continue
		}
		r := recs[id][0]
		if err := metrics.Validate(r); err != nil {
			t.Errorf("job %d's record fails the schema: %v", id, err)
		}
		record(id, r)
	}
	for _, secret := range sim.Secrets() {
		if secret != "" && strings.Contains(logs.String(), secret) {
			t.Fatal("a credential reached the logs")
		}
	}
}
