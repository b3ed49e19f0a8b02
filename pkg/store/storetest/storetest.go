// Package storetest is the conformance suite of store.Store: every
// implementation runs it, so that the in-memory store used by tests and
// local mode and the DynamoDB store used in AWS cannot drift apart.
//
// It pins the rules documented in package store: the RecordJob merge (a later status advances and
// overrides, the same or an earlier status only fills missing fields, zero
// values never clear, UpdatedAt and ExpiresAt only move forward); RecordRun
// keeping the newest attempt; ErrNotFound; context
// cancellation; and the same rules under concurrent callers.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/store"
)

// Now is the instant the suite treats as the present: every time it passes
// (claim times, UpdatedAt, ExpiresAt) is near it. A store that reads a clock
// to decide whether a record has expired must read Now (for Dynamo:
// dynamostore.WithClock(func() time.Time { return storetest.Now })). Expiry itself
// is not part of the suite: Memory never expires records.
var Now = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

// retention is how long the suite's records are kept. ExpiresAt values are
// whole seconds, the precision DynamoDB's TTL keeps.
const retention = 90 * 24 * time.Hour

// Run runs the conformance suite. newStore returns an empty store for one
// test (each subtest calls it; subtests run in parallel).
func Run(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("RecordJob", func(t *testing.T) { t.Parallel(); testRecordJob(t, newStore) })
	t.Run("InvalidJob", func(t *testing.T) { t.Parallel(); testInvalidJob(t, newStore) })
	t.Run("JobNotFound", func(t *testing.T) { t.Parallel(); testJobNotFound(t, newStore) })
	t.Run("JobLabelsAreCopied", func(t *testing.T) { t.Parallel(); testJobLabelsCopied(t, newStore) })
	t.Run("ConcurrentRecordJob", func(t *testing.T) { t.Parallel(); testConcurrentRecordJob(t, newStore) })
	t.Run("Runs", func(t *testing.T) { t.Parallel(); testRuns(t, newStore) })
	t.Run("ConcurrentRecordRun", func(t *testing.T) { t.Parallel(); testConcurrentRecordRun(t, newStore) })
	t.Run("CanceledContext", func(t *testing.T) { t.Parallel(); testCanceled(t, newStore) })
}

// lifecycle returns the four events GitHub sends for one job, each with the
// fields its payload carries and skiff records.
func lifecycle(id int64) map[store.Status]store.JobRecord {
	base := store.JobRecord{
		ID: id, RunID: id + 1000, Attempt: 1, Repository: "octo-org/hello", Owner: "octo-org",
		InstallationID: 4242, Labels: []string{"self-hosted", "linux", "gpu-a10"},
		WorkflowName: "CI", JobName: "build", Branch: "main",
	}
	at := func(j store.JobRecord, st store.Status, d time.Duration) store.JobRecord {
		j.Status = st
		j.UpdatedAt = Now.Add(d)
		j.ExpiresAt = Now.Add(d + retention)
		return j
	}
	waiting := at(base, store.StatusWaiting, 0)
	queued := at(base, store.StatusQueued, 2*time.Second)
	queued.Pool = "gpu-a10"
	queued.QueuedAt = Now.Add(2 * time.Second)
	running := at(base, store.StatusInProgress, 30*time.Second)
	running.StartedAt = Now.Add(30 * time.Second)
	running.RunnerName = "skiff-gpu-a10-i-0abc"
	running.RunnerID = 77
	done := at(base, store.StatusCompleted, 5*time.Minute)
	done.StartedAt = Now.Add(30 * time.Second)
	done.CompletedAt = Now.Add(5 * time.Minute)
	done.RunnerName = "skiff-gpu-a10-i-0abc"
	done.RunnerID = 77
	done.Conclusion = "success"
	return map[store.Status]store.JobRecord{
		store.StatusWaiting: waiting, store.StatusQueued: queued,
		store.StatusInProgress: running, store.StatusCompleted: done,
	}
}

// full is the record of a job whose four events all arrived.
func full(id int64) store.JobRecord {
	ev := lifecycle(id)
	j := ev[store.StatusCompleted]
	j.Pool = ev[store.StatusQueued].Pool
	j.QueuedAt = ev[store.StatusQueued].QueuedAt
	return j
}

type jobStep struct {
	ev           store.JobRecord
	wantAdvanced bool
}

// recordJobCase is one RecordJob scenario: the events in the order they
// arrive, and the record they must leave.
type recordJobCase struct {
	name  string
	steps []jobStep
	want  store.JobRecord
}

func testRecordJob(t *testing.T, newStore func(t *testing.T) store.Store) {
	for _, tc := range recordJobCases() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			runRecordJobCase(t, newStore(t), tc)
		})
	}
	t.Run("jobs are independent", func(t *testing.T) {
		t.Parallel()
		testJobsIndependent(t, newStore(t))
	})
}

// recordJobCases are the RecordJob merge rules, one scenario each, all on
// job recordJobID.
func recordJobCases() []recordJobCase {
	const id = recordJobID
	ev := lifecycle(id)
	waiting, queued, running, done := ev[store.StatusWaiting], ev[store.StatusQueued], ev[store.StatusInProgress], ev[store.StatusCompleted]
	with := func(j store.JobRecord, f func(*store.JobRecord)) store.JobRecord {
		j.Labels = slices.Clone(j.Labels)
		f(&j)
		return j
	}
	return []recordJobCase{
		{"first event creates the record", []jobStep{{queued, true}}, queued},
		{"lifecycle in order advances at every step", []jobStep{
			{waiting, true}, {queued, true}, {running, true}, {done, true}}, full(id)},
		{"completed first, then the rest only fill", []jobStep{
			{done, true}, {running, false}, {queued, false}, {waiting, false}}, full(id)},
		{"late in_progress fills the runner and never reopens", []jobStep{
			{queued, true},
			{with(done, func(j *store.JobRecord) { j.RunnerName, j.RunnerID, j.StartedAt = "", 0, time.Time{} }), true},
			{running, false}}, full(id)},
		{"same status only fills missing fields", []jobStep{
			{with(queued, func(j *store.JobRecord) { j.Pool, j.Branch = "", "" }), true},
			{with(queued, func(j *store.JobRecord) { j.Labels, j.Pool, j.JobName = []string{"other"}, "cpu", "test" }), false}},
			with(queued, func(j *store.JobRecord) { j.Pool = "cpu" })},
		{"earlier status never overrides a known field", []jobStep{
			{done, true},
			{with(running, func(j *store.JobRecord) { j.RunnerName, j.RunnerID, j.Labels = "someone-else", 12, []string{"x"} }), false}},
			done},
		{"later status overrides known fields and keeps the rest", []jobStep{
			{queued, true},
			{with(running, func(j *store.JobRecord) {
				j.Labels, j.Pool, j.Branch, j.Owner = []string{"self-hosted", "relabelled"}, "gpu-l4", "", ""
			}), true}},
			with(running, func(j *store.JobRecord) {
				j.Labels, j.Pool, j.QueuedAt = []string{"self-hosted", "relabelled"}, "gpu-l4", queued.QueuedAt
			})},
		{"zero values never clear a field", []jobStep{
			{running, true},
			{store.JobRecord{ID: id, Status: store.StatusCompleted, Conclusion: "failure"}, true}},
			with(running, func(j *store.JobRecord) { j.Status, j.Conclusion = store.StatusCompleted, "failure" })},
		{"advance with an older timestamp keeps the newer UpdatedAt and ExpiresAt", []jobStep{
			{running, true},
			{with(done, func(j *store.JobRecord) { j.UpdatedAt, j.ExpiresAt = Now, Now.Add(retention) }), true}},
			with(done, func(j *store.JobRecord) { j.UpdatedAt, j.ExpiresAt = running.UpdatedAt, running.ExpiresAt })},
		{"fill with a newer timestamp moves UpdatedAt and ExpiresAt forward", []jobStep{
			{done, true},
			{with(queued, func(j *store.JobRecord) {
				j.UpdatedAt, j.ExpiresAt = Now.Add(time.Hour), Now.Add(time.Hour+retention)
			}), false}},
			with(full(id), func(j *store.JobRecord) { j.UpdatedAt, j.ExpiresAt = Now.Add(time.Hour), Now.Add(time.Hour+retention) })},
		{"an event with only id and status", []jobStep{
			{store.JobRecord{ID: id, Status: store.StatusQueued}, true},
			{store.JobRecord{ID: id, Status: store.StatusQueued}, false}},
			store.JobRecord{ID: id, Status: store.StatusQueued}},
	}
}

// recordJobID is the job every recordJobCase is about.
const recordJobID = 9001

// runRecordJobCase records tc's events in order into s, checking what each
// call says it advanced, then checks the record left.
func runRecordJobCase(t *testing.T, s store.Store, tc recordJobCase) {
	t.Helper()
	ctx := context.Background()
	for i, st := range tc.steps {
		adv, err := s.RecordJob(ctx, st.ev)
		if err != nil {
			t.Fatalf("step %d (%s): %v", i, st.ev.Status, err)
		}
		if adv != st.wantAdvanced {
			t.Errorf("step %d (%s): advanced = %v, want %v", i, st.ev.Status, adv, st.wantAdvanced)
		}
	}
	got, err := s.Job(ctx, recordJobID)
	if err != nil {
		t.Fatalf("Job: %v", err)
	}
	check(t, "job", got, tc.want)
}

// testJobsIndependent: two jobs' records do not touch each other.
func testJobsIndependent(t *testing.T, s store.Store) {
	t.Helper()
	ctx := context.Background()
	a, b := lifecycle(1)[store.StatusCompleted], lifecycle(2)[store.StatusQueued]
	for _, j := range []store.JobRecord{a, b} {
		if adv, err := s.RecordJob(ctx, j); err != nil || !adv {
			t.Fatalf("RecordJob(%d) = %v, %v; want true, nil", j.ID, adv, err)
		}
	}
	for _, want := range []store.JobRecord{a, b} {
		got, err := s.Job(ctx, want.ID)
		if err != nil {
			t.Fatalf("Job(%d): %v", want.ID, err)
		}
		check(t, fmt.Sprintf("job %d", want.ID), got, want)
	}
}

func testInvalidJob(t *testing.T, newStore func(t *testing.T) store.Store) {
	cases := []struct {
		name string
		job  store.JobRecord
	}{
		{"no id", store.JobRecord{Status: store.StatusQueued, Repository: "octo-org/hello"}},
		{"negative id", store.JobRecord{ID: -5, Status: store.StatusQueued}},
		{"no status", store.JobRecord{ID: 5, Repository: "octo-org/hello"}},
		{"status out of range", store.JobRecord{ID: 5, Status: store.StatusCompleted + 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t)
			ctx := context.Background()
			adv, err := s.RecordJob(ctx, tc.job)
			if err == nil || adv || errors.Is(err, store.ErrNotFound) {
				t.Fatalf("RecordJob = %v, %v; want false and a validation error", adv, err)
			}
			if _, err := s.Job(ctx, 5); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("Job after a rejected event: %v, want ErrNotFound", err)
			}
		})
	}
}

func testJobNotFound(t *testing.T, newStore func(t *testing.T) store.Store) {
	s := newStore(t)
	ctx := context.Background()
	if _, err := s.RecordJob(ctx, lifecycle(1)[store.StatusQueued]); err != nil {
		t.Fatal(err)
	}
	for _, id := range []int64{2, 0, -1} {
		if j, err := s.Job(ctx, id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Job(%d) = %+v, %v; want ErrNotFound", id, j, err)
		}
	}
}

func testJobLabelsCopied(t *testing.T, newStore func(t *testing.T) store.Store) {
	s := newStore(t)
	ctx := context.Background()
	j := lifecycle(3)[store.StatusQueued]
	want := slices.Clone(j.Labels)
	if _, err := s.RecordJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	j.Labels[0] = "changed-by-caller"
	got, err := s.Job(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	got.Labels[1] = "changed-by-reader"
	again, err := s.Job(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	check(t, "labels", again.Labels, want)
}

func testConcurrentRecordJob(t *testing.T, newStore func(t *testing.T) store.Store) {
	const jobs = 8
	s := newStore(t)
	ctx := context.Background()
	type result struct {
		id       int64
		status   store.Status
		advanced bool
		err      error
	}
	results := make(chan result, jobs*4)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for id := int64(1); id <= jobs; id++ {
		ev := lifecycle(id)
		// Start the four events in a random order; the scheduler shuffles further.
		for _, i := range rand.Perm(4) {
			j := ev[store.Status(i+1)]
			wg.Go(func() {
				<-start
				adv, err := s.RecordJob(ctx, j)
				results <- result{j.ID, j.Status, adv, err}
			})
		}
	}
	close(start)
	wg.Wait()
	close(results)
	advances := map[int64]int{}
	for r := range results {
		if r.err != nil {
			t.Errorf("RecordJob(%d, %s): %v", r.id, r.status, r.err)
			continue
		}
		if r.advanced {
			advances[r.id]++
		}
		if r.status == store.StatusCompleted && !r.advanced {
			t.Errorf("RecordJob(%d, completed) did not advance: nothing is later than completed", r.id)
		}
	}
	for id := int64(1); id <= jobs; id++ {
		if advances[id] < 1 || advances[id] > 4 {
			t.Errorf("job %d advanced %d times, want 1 to 4", id, advances[id])
		}
		got, err := s.Job(ctx, id)
		if err != nil {
			t.Fatalf("Job(%d): %v", id, err)
		}
		check(t, fmt.Sprintf("job %d", id), got, full(id))
	}
}

func testRuns(t *testing.T, newStore func(t *testing.T) store.Store) {
	run := func(attempt int, event, workflow string) store.RunRecord {
		d := time.Duration(attempt) * time.Minute
		return store.RunRecord{ID: 555, Attempt: attempt, Event: event, WorkflowName: workflow, Repository: "octo-org/hello",
			UpdatedAt: Now.Add(d), ExpiresAt: Now.Add(d + retention)}
	}
	cases := []struct {
		name string
		runs []store.RunRecord
		want store.RunRecord
	}{
		{"record and read back", []store.RunRecord{run(1, "push", "CI")}, run(1, "push", "CI")},
		{"fork facts read back", []store.RunRecord{func() store.RunRecord {
			r := run(1, "pull_request", "CI")
			r.HeadRepository, r.FromFork, r.Actor = "mallory/hello", true, "mallory"
			return r
		}()}, func() store.RunRecord {
			r := run(1, "pull_request", "CI")
			r.HeadRepository, r.FromFork, r.Actor = "mallory/hello", true, "mallory"
			return r
		}()},
		{"a fork's run without a head repository (the fork deleted) reads back as a fork's", []store.RunRecord{func() store.RunRecord {
			r := run(1, "pull_request", "CI")
			r.FromFork, r.Actor = true, "mallory"
			return r
		}()}, func() store.RunRecord {
			r := run(1, "pull_request", "CI")
			r.FromFork, r.Actor = true, "mallory"
			return r
		}()},
		{"newer attempt replaces", []store.RunRecord{run(1, "push", "CI"), run(2, "workflow_dispatch", "CI v2")}, run(2, "workflow_dispatch", "CI v2")},
		{"older attempt is ignored", []store.RunRecord{run(3, "schedule", "Nightly"), run(2, "push", "CI")}, run(3, "schedule", "Nightly")},
		{"same attempt replaces", []store.RunRecord{run(1, "push", "CI"), run(1, "pull_request", "CI")}, run(1, "pull_request", "CI")},
		{"same attempt replaces known fields with zero values", []store.RunRecord{
			run(1, "push", "CI"), {ID: 555, Attempt: 1, Event: "push"}}, store.RunRecord{ID: 555, Attempt: 1, Event: "push"}},
		{"attempt zero", []store.RunRecord{{ID: 555, Event: "push"}}, store.RunRecord{ID: 555, Event: "push"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t)
			ctx := context.Background()
			for i, r := range tc.runs {
				if err := s.RecordRun(ctx, r); err != nil {
					t.Fatalf("RecordRun %d: %v", i, err)
				}
			}
			got, err := s.Run(ctx, 555)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			check(t, "run", got, tc.want)
		})
	}
	t.Run("not found", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		ctx := context.Background()
		if err := s.RecordRun(ctx, run(1, "push", "CI")); err != nil {
			t.Fatal(err)
		}
		if r, err := s.Run(ctx, 556); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Run(556) = %+v, %v; want ErrNotFound", r, err)
		}
	})
	t.Run("id is required", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		ctx := context.Background()
		for _, id := range []int64{0, -1} {
			err := s.RecordRun(ctx, store.RunRecord{ID: id, Attempt: 1, Event: "push"})
			if err == nil || errors.Is(err, store.ErrNotFound) {
				t.Errorf("RecordRun(id %d) = %v, want a validation error", id, err)
			}
		}
	})
}

func testConcurrentRecordRun(t *testing.T, newStore func(t *testing.T) store.Store) {
	const attempts = 10
	s := newStore(t)
	ctx := context.Background()
	start := make(chan struct{})
	errs := make(chan error, attempts)
	var wg sync.WaitGroup
	for _, i := range rand.Perm(attempts) {
		r := store.RunRecord{ID: 77, Attempt: i + 1, Event: fmt.Sprintf("event-%d", i+1), Repository: "octo-org/hello"}
		wg.Go(func() {
			<-start
			errs <- s.RecordRun(ctx, r)
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("RecordRun: %v", err)
		}
	}
	got, err := s.Run(ctx, 77)
	if err != nil {
		t.Fatal(err)
	}
	check(t, "run", got, store.RunRecord{ID: 77, Attempt: attempts, Event: fmt.Sprintf("event-%d", attempts), Repository: "octo-org/hello"})
}

func testCanceled(t *testing.T, newStore func(t *testing.T) store.Store) {
	s := newStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	job := lifecycle(8)[store.StatusQueued]
	calls := []struct {
		name string
		call func() error
	}{
		{"RecordJob", func() error { _, err := s.RecordJob(ctx, job); return err }},
		{"Job", func() error { _, err := s.Job(ctx, job.ID); return err }},
		{"RecordRun", func() error { return s.RecordRun(ctx, store.RunRecord{ID: 8, Attempt: 1}) }},
		{"Run", func() error { _, err := s.Run(ctx, 8); return err }},
	}
	for _, c := range calls {
		if err := c.call(); !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a canceled context: %v, want context.Canceled", c.name, err)
		}
	}
	// Nothing was written.
	live := context.Background()
	if _, err := s.Job(live, job.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Job after a canceled RecordJob: %v, want ErrNotFound", err)
	}
	if _, err := s.Run(live, 8); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Run after a canceled RecordRun: %v, want ErrNotFound", err)
	}
}

// check fails t when got and want differ, comparing times as instants.
func check(t *testing.T, what string, got, want any) {
	t.Helper()
	got, want = normalize(got), normalize(want)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s:\n got %+v\nwant %+v", what, got, want)
	}
}

func normalize(v any) any {
	utc := func(t time.Time) time.Time {
		if t.IsZero() {
			return time.Time{}
		}
		return t.UTC()
	}
	switch x := v.(type) {
	case store.JobRecord:
		x.QueuedAt, x.StartedAt, x.CompletedAt = utc(x.QueuedAt), utc(x.StartedAt), utc(x.CompletedAt)
		x.UpdatedAt, x.ExpiresAt = utc(x.UpdatedAt), utc(x.ExpiresAt)
		if len(x.Labels) == 0 {
			x.Labels = nil
		}
		return x
	case store.RunRecord:
		x.UpdatedAt, x.ExpiresAt = utc(x.UpdatedAt), utc(x.ExpiresAt)
		return x
	}
	return v
}

// RunExpiry checks that records past their expiry are gone, as DynamoDB's
// TTL makes them (reads treat an item past expires_at as absent before
// DynamoDB deletes it): an expired job or run record is not found and is
// replaced whole by the next event. newStore returns an empty store whose
// clock is now (the suite moves it).
func RunExpiry(t *testing.T, newStore func(t *testing.T, now func() time.Time) store.Store) {
	t.Run("Expiry", func(t *testing.T) {
		t.Parallel()
		var mu sync.Mutex
		at := Now
		clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return at }
		set := func(d time.Duration) { mu.Lock(); at = Now.Add(d); mu.Unlock() }
		s := newStore(t, clock)
		ctx := context.Background()

		old := store.JobRecord{ID: 7001, Status: store.StatusInProgress, RunnerName: "old-runner", Repository: "o/r",
			UpdatedAt: Now, ExpiresAt: Now.Add(time.Hour)}
		if _, err := s.RecordJob(ctx, old); err != nil {
			t.Fatal(err)
		}
		if err := s.RecordRun(ctx, store.RunRecord{ID: 8001, Attempt: 2, Event: "push", UpdatedAt: Now, ExpiresAt: Now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		set(2 * time.Hour)
		if _, err := s.Job(ctx, 7001); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("expired job read = %v, want ErrNotFound", err)
		}
		if _, err := s.Run(ctx, 8001); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("expired run read = %v, want ErrNotFound", err)
		}
		advanced, err := s.RecordJob(ctx, store.JobRecord{ID: 7001, Status: store.StatusQueued, Repository: "o/r",
			UpdatedAt: Now.Add(2 * time.Hour), ExpiresAt: Now.Add(3 * time.Hour)})
		if err != nil || !advanced {
			t.Fatalf("recording over an expired job: advanced %v, %v; want a new record", advanced, err)
		}
		if j, err := s.Job(ctx, 7001); err != nil || j.Status != store.StatusQueued || j.RunnerName != "" {
			t.Errorf("job after replacing the expired record = %+v, %v; want queued without the old runner", j, err)
		}
		if err := s.RecordRun(ctx, store.RunRecord{ID: 8001, Attempt: 1, Event: "pull_request", UpdatedAt: Now.Add(2 * time.Hour),
			ExpiresAt: Now.Add(3 * time.Hour)}); err != nil {
			t.Fatal(err)
		}
		if r, err := s.Run(ctx, 8001); err != nil || r.Event != "pull_request" {
			t.Errorf("run after its expired record = %+v, %v; want the new attempt 1", r, err)
		}
	})
}

// ExactlyOneWins calls try n times at once: exactly one call must
// succeed and every other fail with store.ErrConflict; what names the
// calls in a failure.
func ExactlyOneWins(t *testing.T, n int, what string, try func() error) {
	t.Helper()
	var won atomic.Int64
	Together(n, func(int) {
		switch err := try(); {
		case err == nil:
			won.Add(1)
		case !errors.Is(err, store.ErrConflict):
			t.Errorf("a concurrent %s: %v", what, err)
		}
	})
	if won.Load() != 1 {
		t.Errorf("%d of %d concurrent %ss won, want exactly 1", won.Load(), n, what)
	}
}

// Together runs f(0), …, f(n-1) at once and waits for them.
func Together(n int, f func(i int)) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(i)
		}()
	}
	wg.Wait()
}
