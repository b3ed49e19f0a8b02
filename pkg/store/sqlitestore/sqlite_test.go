package sqlitestore_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/metrics"
	"github.com/skiffci/skiff/pkg/metrics/recordstest"
	"github.com/skiffci/skiff/pkg/queue"
	"github.com/skiffci/skiff/pkg/queue/queuetest"
	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/store/sqlitestore"
	"github.com/skiffci/skiff/pkg/store/storetest"
)

func open(t testing.TB, path string, o sqlitestore.Options) *sqlitestore.DB {
	t.Helper()
	if path == "" {
		path = filepath.Join(t.TempDir(), "skiff.db")
	}
	db, err := sqlitestore.Open(path, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestStoreConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) store.Store {
		return sqlitestore.NewStore(open(t, "", sqlitestore.Options{}), func() time.Time { return storetest.Now })
	})
	storetest.RunExpiry(t, func(t *testing.T, now func() time.Time) store.Store {
		return sqlitestore.NewStore(open(t, "", sqlitestore.Options{}), now)
	})
}

// TestStoreExpiry: a record past its expiry is absent to every read and
// write, as with DynamoDB's TTL, and Sweep deletes it.
func TestStoreExpiry(t *testing.T) {
	t.Parallel()
	var now atomic.Int64
	now.Store(storetest.Now.UnixNano())
	db := open(t, "", sqlitestore.Options{})
	s := sqlitestore.NewStore(db, func() time.Time { return time.Unix(0, now.Load()) })
	ctx := context.Background()
	at := storetest.Now
	if _, err := s.RecordJob(ctx, store.JobRecord{ID: 1, Status: store.StatusCompleted, ExpiresAt: at.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordRun(ctx, store.RunRecord{ID: 2, Attempt: 3, Event: "push", ExpiresAt: at.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	now.Add(int64(time.Hour))
	if _, err := s.Job(ctx, 1); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("expired job: %v, want ErrNotFound", err)
	}
	if adv, err := s.RecordJob(ctx, store.JobRecord{ID: 1, Status: store.StatusQueued}); err != nil || !adv {
		t.Errorf("an event for an expired job: %v, %v; want a new record", adv, err)
	}
	if err := s.RecordRun(ctx, store.RunRecord{ID: 2, Attempt: 1, Event: "schedule"}); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Run(ctx, 2); err != nil || r.Event != "schedule" {
		t.Errorf("run after its older attempt expired: %+v, %v", r, err)
	}
	if n, err := db.Sweep(ctx, time.Unix(0, now.Load())); err != nil || n != 0 {
		t.Errorf("Sweep = %d, %v; want 0 (the expired records were replaced)", n, err)
	}
}

func jobN(id int64) queue.Job {
	return queue.Job{JobID: id, RunID: 7, Attempt: 1, Repository: "acme/app", Owner: "acme", Labels: []string{"self-hosted"}, Pool: "cpu"}
}

// TestReceiver: the receiver's promises (queuetest.RunReceiver, as for the
// in-memory queue), the queue's counts along the way, and a stale receipt
// refused.
func TestReceiver(t *testing.T) {
	t.Parallel()
	var now atomic.Int64
	now.Store(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC).UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	q := sqlitestore.NewQueue(open(t, "", sqlitestore.Options{}), sqlitestore.QueueOptions{Visibility: time.Minute, Now: clock, PollWait: time.Millisecond})
	ctx := context.Background()
	retried, dead := queuetest.RunReceiver(t, q, func(d time.Duration) { now.Add(int64(d)) }, func() {
		if c, err := q.Counts(ctx); err != nil || c != (sqlitestore.Counts{InFlight: 3}) {
			t.Errorf("Counts = %+v, %v; want 3 in flight", c, err)
		}
	}, func() ([]queue.DeadLetterRecord, error) { return q.DeadLetters(ctx) })
	if n, _ := q.Depth(ctx); n != 1 {
		t.Fatalf("a retried message must stay: depth %d", n)
	}
	if c, err := q.Counts(ctx); err != nil || c != (sqlitestore.Counts{InFlight: 1, DeadLetters: 1}) {
		t.Errorf("Counts = %+v, %v; want the retried message in flight until its visibility ends, and one dead letter", c, err)
	}
	if len(dead) != 1 || !dead[0].DeadAt.Equal(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)) {
		t.Errorf("dead letters %+v, want job 2's, dead at the start", dead)
	}
	// A receiver that outlived its visibility cannot complete for the newer one.
	now.Add(int64(time.Minute))
	newer, _ := q.Receive(ctx, 10)
	if len(newer) != 1 {
		t.Fatalf("third receive: %+v", newer)
	}
	if err := q.Complete(ctx, retried, queue.Answer{Verdict: queue.Done}); !errors.Is(err, sqlitestore.ErrStaleReceipt) {
		t.Errorf("completing with a stale receipt: %v, want ErrStaleReceipt", err)
	}
	if err := q.Complete(ctx, newer[0], queue.Answer{Verdict: queue.Done}); err != nil {
		t.Errorf("completing with the current receipt: %v", err)
	}
	if n, _ := q.Depth(ctx); n != 0 {
		t.Errorf("depth %d after the last Done, want 0", n)
	}
	if err := q.Send(ctx, queue.Job{JobID: 9}); !errors.Is(err, queue.ErrInvalidJob) {
		t.Errorf("Send(invalid job) = %v, want ErrInvalidJob", err)
	}
}

// TestRedrive: a message received MaxReceives times without being completed
// goes to the dead letters instead of being delivered again.
func TestRedrive(t *testing.T) {
	t.Parallel()
	var now atomic.Int64
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	q := sqlitestore.NewQueue(open(t, "", sqlitestore.Options{}), sqlitestore.QueueOptions{Visibility: time.Second, MaxReceives: 3, Now: clock, PollWait: time.Millisecond})
	ctx := context.Background()
	if err := q.Send(ctx, jobN(5)); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		ds, err := q.Receive(ctx, 1)
		if err != nil || len(ds) != 1 || ds[0].ReceiveCount != i {
			t.Fatalf("receive %d: %+v, %v", i, ds, err)
		}
		now.Add(int64(time.Second))
	}
	if ds, _ := q.Receive(ctx, 1); len(ds) != 0 {
		t.Fatalf("a fourth delivery: %+v", ds)
	}
	dead, _ := q.DeadLetters(ctx)
	if len(dead) != 1 || dead[0].JobID != 5 || dead[0].Reason != sqlitestore.ReasonMaxReceives || dead[0].ReceiveCount != 3 {
		t.Errorf("dead letters %+v", dead)
	}
}

// TestConsumeConcurrently: receivers sharing the queue, through queue.Consume,
// see every job exactly once while it is being handled, and complete them all.
func TestConsumeConcurrently(t *testing.T) {
	t.Parallel()
	q := sqlitestore.NewQueue(open(t, "", sqlitestore.Options{Synchronous: sqlitestore.Normal}), sqlitestore.QueueOptions{PollWait: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const jobs = 60
	for id := int64(1); id <= jobs; id++ {
		if err := q.Send(ctx, jobN(id)); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	seen := map[int64]int{}
	var wg sync.WaitGroup
	log := slog.New(slog.NewJSONHandler(&testenv.SyncBuffer{}, nil))
	for range 4 {
		wg.Go(func() {
			queue.Consume(ctx, q, 5, func(_ context.Context, ds []queue.Delivery) []queue.Answer {
				mu.Lock()
				defer mu.Unlock()
				for _, d := range ds {
					seen[d.Job.JobID]++
				}
				if len(seen) == jobs {
					cancel()
				}
				return make([]queue.Answer, len(ds))
			}, log)
		})
	}
	wg.Wait()
	for id := int64(1); id <= jobs; id++ {
		if seen[id] != 1 {
			t.Errorf("job %d handled %d times, want once", id, seen[id])
		}
	}
	if n, _ := q.Depth(context.Background()); n != 0 {
		t.Errorf("depth %d after every job was done", n)
	}
}

// The durability test's child: it runs the webhook's writes and the
// ledger's for job after job and prints each job id once its writes
// returned (acknowledged).
const childEnv = "SKIFF_SQLITE_DURABILITY_CHILD"

func TestMain(m *testing.M) {
	if path := os.Getenv(childEnv); path != "" {
		os.Exit(durabilityChild(path))
	}
	os.Exit(m.Run())
}

func durabilityChild(path string) int {
	db, err := sqlitestore.Open(path, sqlitestore.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	s, q := sqlitestore.NewStore(db, nil), sqlitestore.NewQueue(db, sqlitestore.QueueOptions{})
	l := sqlitestore.NewLedger(db, nil)
	out := bufio.NewWriter(os.Stdout)
	for id := int64(1); ; id++ {
		if err := webhookWrites(context.Background(), s, q, id); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if err := ledgerWrites(context.Background(), l, id); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Fprintln(out, id)
		out.Flush() // acknowledged: the parent may count on it
	}
}

// webhookWrites is what the webhook writes for one queued job: its record
// (the conditional write that dedupes deliveries) and its message.
func webhookWrites(ctx context.Context, s *sqlitestore.Store, q *sqlitestore.Queue, id int64) error {
	now := time.Now()
	if _, err := s.RecordJob(ctx, store.JobRecord{ID: id, RunID: 7, Attempt: 1, Repository: "acme/app", Status: store.StatusQueued,
		Labels: []string{"self-hosted", "linux"}, Pool: "cpu", QueuedAt: now, UpdatedAt: now, ExpiresAt: now.Add(336 * time.Hour)}); err != nil {
		return err
	}
	return q.Send(ctx, jobN(id))
}

// durablePool is the pool of the durability test's runners; its max is
// never reached.
const durablePool = "cpu"

// durableRunners are the runners the durability test reserves for a job,
// in one call: enough that a reservation written runner by runner would
// be caught half done by the kill.
func durableRunners(id int64) []ledger.Runner {
	rs := make([]ledger.Runner, 8)
	for i := range rs {
		rs[i] = ledger.Runner{Name: fmt.Sprintf("skiff-%d-%d", id, i+1), Pool: durablePool, JobID: id, RunID: 7, Attempt: 1, Token: "tok"}
	}
	return rs
}

// ledgerWrites is what scale-up and the state-change handler write for one
// job in the durability test: its runners reserved in one call, all but
// the first released (ends), the first launched.
func ledgerWrites(ctx context.Context, l *sqlitestore.Ledger, id int64) error {
	rs, now := durableRunners(id), time.Now()
	if n, err := l.Reserve(ctx, durablePool, 1<<30, rs); err != nil || n != len(rs) {
		return fmt.Errorf("reserving the runners of job %d: %d, %w", id, n, err)
	}
	for _, r := range rs[1:] {
		if ended, err := l.End(ctx, r.Name, now, "released"); err != nil || !ended {
			return fmt.Errorf("releasing %s: %v, %w", r.Name, ended, err)
		}
	}
	return l.Launched(ctx, rs[0].Name, ledger.LaunchReport{InstanceID: "i-" + strconv.FormatInt(id, 10), At: now})
}

// TestKill9LosesNothing: a process writing in a loop is killed with SIGKILL;
// reopening the file finds every write it acknowledged — the delivery
// finished, the job recorded, its message queued exactly once, its runners
// reserved, one launched and the others ended (off the pool's count,
// once) — and the writes in flight at the kill either whole or absent. The
// kill is aimed at the next job's reservation: it lands as soon as a
// reader on the file sees the reservation's first runner, so a reservation
// written runner by runner would be caught half done.
func TestKill9LosesNothing(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "skiff.db")
	acked := killMidReservation(t, path)

	db := open(t, path, sqlitestore.Options{})
	ctx := context.Background()
	checkQueuedOnce(ctx, t, db, acked)
	l := sqlitestore.NewLedger(db, nil)
	checkAckedRunners(ctx, t, l, acked)
	found, inflight := checkReservationInFlight(ctx, t, l, acked)
	// Every acknowledged end left the count once: one live runner per
	// acknowledged job, plus the job in flight's.
	live, err := l.LiveRunners(ctx, durablePool)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := l.Live(ctx, durablePool); err != nil || int64(n) != acked+inflight || n != len(live) {
		t.Errorf("live count %d (%v), %d live runners; want %d (%d acknowledged + %d in flight)", n, err, len(live), acked+inflight, acked, inflight)
	}
	for _, r := range durableRunners(acked) {
		if ended, err := l.End(ctx, r.Name, time.Now(), "again"); err != nil || ended != (r.Name == durableRunners(acked)[0].Name) {
			t.Errorf("End(%s) after the restart = %v, %v; want an end only for the launched runner", r.Name, ended, err)
		}
	}
	t.Logf("%d jobs acknowledged before SIGKILL, all found; the reservation in flight: %d runners, %d live", acked, found, inflight)
}

// killMidReservation starts the child writing jobs to the file at path,
// kills it with SIGKILL as soon as the reservation of the job after the
// first 150 it acknowledges is seen on the file, and returns the last job it
// acknowledged.
func killMidReservation(t *testing.T, path string) int64 {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+path)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() }) // a test that fails before its kill; done already otherwise
	lines := bufio.NewScanner(stdout)
	var acked int64
	for acked < 150 && lines.Scan() {
		acked, _ = strconv.ParseInt(lines.Text(), 10, 64)
	}
	reader := sqlitestore.NewLedger(open(t, path, sqlitestore.Options{}), nil)
	next := durableRunners(acked + 1)[0].Name
	// No pause between reads: the kill must land while the child writes.
	testenv.Await(t, "the child to reserve runner "+next, 0, func() bool {
		_, err := reader.Runner(context.Background(), next)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("waiting for runner %s: %v", next, err)
		}
		return err == nil
	}, nil)
	// The reservation was just seen: the kill lands in the middle of it,
	// were it not one transaction, or in the ledger writes after it.
	_ = cmd.Process.Signal(syscall.SIGKILL)
	for lines.Scan() { // acknowledged before the kill landed
		acked, _ = strconv.ParseInt(lines.Text(), 10, 64)
	}
	err = cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v, want killed by SIGKILL", err)
	}
	if acked < 150 {
		t.Fatalf("the child acknowledged %d jobs before the kill, want at least 150", acked)
	}
	return acked
}

// checkQueuedOnce checks that every acknowledged job is recorded and queued
// exactly once, and that at most the job in flight at the kill is queued
// beyond them.
func checkQueuedOnce(ctx context.Context, t *testing.T, db *sqlitestore.DB, acked int64) {
	t.Helper()
	s := sqlitestore.NewStore(db, nil)
	q := sqlitestore.NewQueue(db, sqlitestore.QueueOptions{PollWait: time.Millisecond})
	queued := map[int64]int{}
	for {
		ds, err := q.Receive(ctx, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) == 0 {
			break
		}
		for _, d := range ds {
			queued[d.Job.JobID]++
		}
	}
	for id := int64(1); id <= acked; id++ {
		if queued[id] != 1 {
			t.Errorf("job %d: queued %d times, want once", id, queued[id])
		}
		if j, err := s.Job(ctx, id); err != nil || j.Status != store.StatusQueued || !slices.Equal(j.Labels, []string{"self-hosted", "linux"}) {
			t.Errorf("job %d: %+v, %v", id, j, err)
		}
	}
	// At most the job in flight at the kill is beyond the acknowledged ones.
	for id, n := range queued {
		if id > acked+1 || n != 1 {
			t.Errorf("job %d queued %d times (acknowledged up to %d)", id, n, acked)
		}
	}
}

// checkAckedRunners checks the runners of every acknowledged job: the first
// launched on its instance, the others ended as released.
func checkAckedRunners(ctx context.Context, t *testing.T, l *sqlitestore.Ledger, acked int64) {
	t.Helper()
	for id := int64(1); id <= acked; id++ {
		rs := durableRunners(id)
		if r, err := l.Runner(ctx, rs[0].Name); err != nil || r.State != ledger.StateLaunched || r.InstanceID != "i-"+strconv.FormatInt(id, 10) {
			t.Errorf("job %d's launched runner: %+v, %v", id, r, err)
		}
		for _, r := range rs[1:] {
			if got, err := l.Runner(ctx, r.Name); err != nil || got.State != ledger.StateTerminated || got.Reason != "released" || got.EndedAt.IsZero() {
				t.Errorf("job %d's released runner: %+v, %v", id, got, err)
			}
		}
	}
}

// checkReservationInFlight checks that the reservation of the job in
// flight at the kill is whole or absent and that the job after it reserved
// nothing. It returns how many of its runners were found and how many of
// them are live.
func checkReservationInFlight(ctx context.Context, t *testing.T, l *sqlitestore.Ledger, acked int64) (found int, inflight int64) {
	t.Helper()
	for _, r := range durableRunners(acked + 1) {
		got, err := l.Runner(ctx, r.Name)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			t.Fatal(err)
		}
		if err == nil {
			found++
			if got.State.Live() {
				inflight++
			}
		}
	}
	if found != 0 && found != len(durableRunners(0)) {
		t.Errorf("the reservation in flight at the kill is half applied: %d of its %d runners found", found, len(durableRunners(0)))
	}
	if _, err := l.Runner(ctx, durableRunners(acked + 2)[0].Name); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a runner of job %d, never reserved: %v", acked+2, err)
	}
	return found, inflight
}

// BenchmarkWebhookWrites: the webhook's writes for one queued job
// (RecordJob and Send: two transactions) on a
// file in the test's temporary directory.
func BenchmarkWebhookWrites(b *testing.B) {
	for _, sync := range []sqlitestore.Synchronous{sqlitestore.Full, sqlitestore.Normal} {
		b.Run(string(sync), func(b *testing.B) {
			db := open(b, "", sqlitestore.Options{Synchronous: sync})
			s, q := sqlitestore.NewStore(db, nil), sqlitestore.NewQueue(db, sqlitestore.QueueOptions{})
			ctx := context.Background()
			b.ResetTimer()
			var id int64
			for b.Loop() {
				id++
				if err := webhookWrites(ctx, s, q, id); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(id)/b.Elapsed().Seconds(), "jobs/s")
		})
	}
}

func TestMetricsRecordsConformance(t *testing.T) {
	t.Parallel()
	recordstest.Run(t, func(t *testing.T) metrics.Records {
		return sqlitestore.NewMetricsRecords(open(t, "", sqlitestore.Options{}))
	})
}

// TestDurabilitySettings reads back what the file was opened with: WAL,
// the synchronous setting asked for (FULL by default), foreign keys on. A
// file left at synchronous=OFF would lose committed writes to a power loss.
func TestDurabilitySettings(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		opt  sqlitestore.Synchronous
		want sqlitestore.Synchronous
	}{{"", sqlitestore.Full}, {sqlitestore.Full, sqlitestore.Full}, {sqlitestore.Normal, sqlitestore.Normal}} {
		db, err := sqlitestore.Open(filepath.Join(t.TempDir(), "skiff.db"), sqlitestore.Options{Synchronous: tc.opt})
		if err != nil {
			t.Fatal(err)
		}
		got, err := db.Settings(context.Background())
		db.Close()
		if err != nil {
			t.Fatal(err)
		}
		if want := (sqlitestore.Settings{JournalMode: "wal", Synchronous: tc.want, ForeignKeys: true}); got != want {
			t.Errorf("opened with synchronous %q: settings %+v, want %+v", tc.opt, got, want)
		}
	}
	if _, err := sqlitestore.Open(filepath.Join(t.TempDir(), "skiff.db"), sqlitestore.Options{Synchronous: "OFF"}); err == nil {
		t.Error("synchronous OFF was accepted")
	}
}

func TestInstallationsConformance(t *testing.T) {
	t.Parallel()
	storetest.RunInstallations(t, func(t *testing.T) store.Installations {
		return sqlitestore.NewInstallations(open(t, "", sqlitestore.Options{}))
	})
}

func TestSecurityEventsConformance(t *testing.T) {
	t.Parallel()
	storetest.RunSecurityEvents(t, func(t *testing.T) store.SecurityEvents {
		return sqlitestore.NewSecurityEvents(open(t, "", sqlitestore.Options{}), nil)
	})
}

func TestRunnerStateConformance(t *testing.T) {
	t.Parallel()
	storetest.RunRunnerState(t, func(t *testing.T) store.RunnerState {
		return sqlitestore.NewRunnerState(open(t, "", sqlitestore.Options{}))
	})
}
