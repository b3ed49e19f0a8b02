package sqlitestore_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/ledger/ledgertest"
	"github.com/skiffci/skiff/pkg/room"
	"github.com/skiffci/skiff/pkg/room/roomtest"
	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/store/sqlitestore"
	"github.com/skiffci/skiff/pkg/store/storetest"
)

func TestLaunchesConformance(t *testing.T) {
	t.Parallel()
	ledgertest.RunLaunches(t, func(t *testing.T) ledger.Launches {
		return sqlitestore.NewLaunches(open(t, "", sqlitestore.Options{}), func() time.Time { return storetest.Now })
	})
}

func TestLedgerConformance(t *testing.T) {
	t.Parallel()
	ledgertest.RunLedger(t, func(t *testing.T, now func() time.Time) ledger.Ledger {
		return sqlitestore.NewLedger(open(t, "", sqlitestore.Options{}), now)
	})
}

func TestInterruptionsConformance(t *testing.T) {
	t.Parallel()
	ledgertest.RunInterruptions(t, func(t *testing.T, now func() time.Time) ledgertest.InterruptLedger {
		return sqlitestore.NewLedger(open(t, "", sqlitestore.Options{}), now)
	})
}

// TestLedgerSweep: Sweep deletes ended runners past their retention and
// their instance pointers and awaiting rows, and expired claims and launch records;
// a live runner stays. A reservation over an expired record drops the old
// record's instance pointer and awaiting row first, so the old instance
// does not find the new runner, nor is the new runner awaited.
func TestLedgerSweep(t *testing.T) {
	t.Parallel()
	var now atomic.Int64
	now.Store(storetest.Now.UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()).UTC() }
	db := open(t, "", sqlitestore.Options{})
	l, ls := sqlitestore.NewLedger(db, clock), sqlitestore.NewLaunches(db, clock)
	ctx := context.Background()
	at := storetest.Now
	rs := []ledger.Runner{
		{Name: "skiff-1-1", Pool: "cpu", JobID: 1, ReservedAt: at},
		{Name: "skiff-2-1", Pool: "cpu", JobID: 2, ReservedAt: at},
		{Name: "skiff-3-1", Pool: "cpu", JobID: 3, ReservedAt: at},
	}
	if n, err := l.Reserve(ctx, "cpu", 10, rs); err != nil || n != 3 {
		t.Fatalf("Reserve = %d, %v", n, err)
	}
	for i, r := range rs[:2] {
		if err := l.Launched(ctx, r.Name, ledger.LaunchReport{InstanceID: fmt.Sprintf("i-0%d", i+1), At: at}); err != nil {
			t.Fatal(err)
		}
		if _, err := l.EndAwaiting(ctx, r.Name, at, "done"); err != nil {
			t.Fatal(err)
		}
	}
	if err := ls.ClaimLaunch(ctx, ledger.Claim{JobID: 1, Attempt: 1, Gen: 1, Token: "t", ExpiresAt: at.Add(time.Hour)}, 0, at); err != nil {
		t.Fatal(err)
	}
	if err := ls.PutLaunch(ctx, ledger.Launch{Token: "t", State: ledger.LaunchIntent, Members: []ledger.Member{{JobID: 1, Attempt: 1}},
		CreatedAt: at, ExpiresAt: at.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}

	now.Store(at.Add(ledger.DefaultRunnerTTL + time.Second).UnixNano())
	if err := ls.FinishLaunch(ctx, "t", []string{"i-0late"}, ""); !errors.Is(err, store.ErrConflict) {
		t.Errorf("finishing an expired launch: %v, want ErrConflict (it is gone)", err)
	}
	// skiff-2-1's name reserved again (never in practice: names carry the
	// claim's gen) must not inherit i-02.
	if n, err := l.Reserve(ctx, "cpu", 10, rs[1:2]); err != nil || n != 1 {
		t.Fatalf("Reserve over an expired record = %d, %v; want 1", n, err)
	}
	if _, err := l.RunnerByInstance(ctx, "i-02"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the old instance of a reserved-again name: %v, want ErrNotFound", err)
	}
	if got, err := l.Awaiting(ctx, "cpu"); err != nil || len(got) != 0 {
		t.Errorf("awaiting runners = %+v, %v; want none: one expired, one's name reserved again", got, err)
	}
	// Deleted: runner 1, its pointer and its awaiting row, the claim, the
	// launch record.
	if n, err := db.Sweep(ctx, clock()); err != nil || n != 5 {
		t.Errorf("Sweep = %d, %v; want 5", n, err)
	}
	if _, err := l.RunnerByInstance(ctx, "i-01"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a swept runner's instance: %v, want ErrNotFound", err)
	}
	if got, err := l.LiveRunners(ctx, "cpu"); err != nil || len(got) != 2 || got[0].Name != "skiff-2-1" || got[1].Name != "skiff-3-1" {
		t.Errorf("live runners after the sweep = %+v, %v; want skiff-2-1 and skiff-3-1", got, err)
	}
}

// TestEndLeases: local mode's start ends the leases its killed process
// held, so the jobs' next deliveries need not wait them out; a lease
// already over and an expired claim are left as they are, and nothing but
// the lease changes.
func TestEndLeases(t *testing.T) {
	t.Parallel()
	ls := sqlitestore.NewLaunches(open(t, "", sqlitestore.Options{}), nil)
	ctx := context.Background()
	at := storetest.Now
	claims := []ledger.Claim{
		{JobID: 1, Attempt: 1, Gen: 1, Token: "t1", Pool: "cpu", LeaseUntil: at.Add(10 * time.Minute), UpdatedAt: at.Add(-time.Minute), ExpiresAt: at.Add(time.Hour)},
		{JobID: 2, Attempt: 2, Gen: 1, Token: "t2", Pool: "cpu", LeaseUntil: at.Add(-time.Minute), UpdatedAt: at.Add(-time.Hour), ExpiresAt: at.Add(time.Hour)},
		{JobID: 3, Attempt: 1, Gen: 1, Token: "t3", Pool: "cpu", LeaseUntil: at.Add(10 * time.Minute), UpdatedAt: at.Add(-2 * time.Hour), ExpiresAt: at.Add(-time.Hour)},
	}
	for _, c := range claims {
		if err := ls.ClaimLaunch(ctx, c, 0, c.UpdatedAt); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := ls.EndLeases(ctx, at); err != nil || n != 1 {
		t.Fatalf("EndLeases = %d, %v; want the one live lease ended", n, err)
	}
	got, err := ls.LaunchClaims(ctx, []int64{1, 2, 3}, at)
	if err != nil {
		t.Fatal(err)
	}
	want1 := claims[0]
	want1.LeaseUntil = at
	if len(got) != 2 || !reflect.DeepEqual(got[1], want1) || !reflect.DeepEqual(got[2], claims[1]) {
		t.Errorf("claims after EndLeases:\n%+v\nwant job 1's lease ended at %v, job 2's as it was, job 3 expired", got, at)
	}
}

// TestLedgerTwoProcesses: two handles on one file (as two processes would
// open it) reserving concurrently never exceed the pool's max together,
// and see one count.
func TestLedgerTwoProcesses(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "skiff.db")
	ls := []*sqlitestore.Ledger{
		sqlitestore.NewLedger(open(t, path, sqlitestore.Options{Synchronous: sqlitestore.Normal}), nil),
		sqlitestore.NewLedger(open(t, path, sqlitestore.Options{Synchronous: sqlitestore.Normal}), nil),
	}
	ctx := context.Background()
	const max = 15
	var reserved atomic.Int64
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			r := ledger.Runner{Name: fmt.Sprintf("skiff-%d-1", i+1), Pool: "cpu", JobID: int64(i + 1)}
			n, err := ls[i%2].Reserve(ctx, "cpu", max, []ledger.Runner{r})
			if err != nil {
				t.Error(err)
			}
			reserved.Add(int64(n))
		})
	}
	wg.Wait()
	for i, l := range ls {
		if n, err := l.Live(ctx, "cpu"); err != nil || n != max || reserved.Load() != max {
			t.Errorf("handle %d: live %d, %v; %d reserved; want %d", i, n, err, reserved.Load(), max)
		}
	}
}

func TestRoomConformance(t *testing.T) {
	t.Parallel()
	roomtest.Run(t, func(t *testing.T) room.Store { return sqlitestore.NewRoom(open(t, "", sqlitestore.Options{})) })
}
