package ledgertest

import (
	"context"
	"errors"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/ledger"
)

// launchNow is the instant the launch suite treats as the present.
var launchNow = Now

// RunLaunches is the conformance suite of ledger.Launches: claims and their
// leases, fenced launch records (the first finish wins), and the capacity
// memory. newStore returns an empty store whose clock is launchNow.
func RunLaunches(t *testing.T, newStore func(*testing.T) ledger.Launches) {
	t.Run("Claims", func(t *testing.T) { t.Parallel(); testLaunchClaims(t, newStore(t)) })
	t.Run("ConcurrentClaims", func(t *testing.T) { t.Parallel(); testConcurrentLaunchClaims(t, newStore(t)) })
	t.Run("Records", func(t *testing.T) { t.Parallel(); testLaunchRecords(t, newStore(t)) })
	t.Run("OnDemand", func(t *testing.T) { t.Parallel(); testLaunchOnDemand(t, newStore(t)) })
}

func launchClaim(id int64, attempt, gen int, lease time.Duration) ledger.Claim {
	return ledger.Claim{
		JobID: id, Attempt: attempt, Gen: gen, Token: "tok-" + strconv.Itoa(attempt), Pool: "cpu",
		LeaseUntil: launchNow.Add(lease), UpdatedAt: launchNow, ExpiresAt: launchNow.Add(time.Hour),
	}
}

func testLaunchClaims(t *testing.T, s ledger.Launches) {
	ctx := context.Background()
	conflict := ledger.ErrConflict
	steps := []struct {
		name    string
		c       ledger.Claim
		prevGen int
		at      time.Duration
		want    error
	}{
		{"fresh claim wins", launchClaim(1, 1, 1, time.Minute), 0, 0, nil},
		{"second fresh claim conflicts", launchClaim(1, 1, 1, time.Minute), 0, 0, conflict},
		{"claim over the gen read wins", launchClaim(1, 2, 2, time.Minute), 1, 0, nil},
		{"claim over a stale gen conflicts", launchClaim(1, 2, 2, time.Minute), 1, 0, conflict},
		{"claim over an absent record with a gen conflicts", launchClaim(2, 1, 2, time.Minute), 1, 0, conflict},
		{"expired record counts as absent", launchClaim(1, 1, 1, time.Minute), 0, 2 * time.Hour, nil},
	}
	for _, st := range steps {
		err := s.ClaimLaunch(ctx, st.c, st.prevGen, launchNow.Add(st.at))
		if !errors.Is(err, st.want) || (st.want == nil && err != nil) {
			t.Fatalf("%s: err = %v, want %v", st.name, err, st.want)
		}
	}
	if err := s.ClaimLaunch(ctx, launchClaim(3, 1, 1, time.Minute), 0, launchNow); err != nil {
		t.Fatal(err)
	}
	got, err := s.LaunchClaims(ctx, []int64{1, 3, 3, 4}, launchNow.Add(30*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	want := map[int64]ledger.Claim{1: launchClaim(1, 1, 1, time.Minute), 3: launchClaim(3, 1, 1, time.Minute)}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("claims = %+v, want %+v", got, want)
	}
	if got, err := s.LaunchClaims(ctx, []int64{1, 3}, launchNow.Add(2*time.Hour)); err != nil || len(got) != 0 {
		t.Errorf("expired claims = %+v, %v", got, err)
	}
	if _, ok := got[4]; ok {
		t.Error("unknown job has a claim")
	}
	if err := s.ClaimLaunch(ctx, ledger.Claim{JobID: 5, Attempt: 1, Gen: 3, Token: "x"}, 0, launchNow); err == nil {
		t.Error("a gen that is not prevGen+1 was accepted")
	}
	testLaunchClaimExpirySecond(t, s)
}

// testLaunchClaimExpirySecond: every store ends a record at the same moment,
// its expiry rounded up to the second as DynamoDB's TTL keeps it
// (pkg/store/expiry). A claim that expires 1.5 s after launchNow is still
// there at 1.9 s, and gone at 2 s.
func testLaunchClaimExpirySecond(t *testing.T, s ledger.Launches) {
	ctx := context.Background()
	c := launchClaim(6, 1, 1, time.Minute)
	c.ExpiresAt = launchNow.Add(1500 * time.Millisecond)
	if err := s.ClaimLaunch(ctx, c, 0, launchNow); err != nil {
		t.Fatal(err)
	}
	for _, at := range []struct {
		after time.Duration
		live  bool
	}{{1400 * time.Millisecond, true}, {1900 * time.Millisecond, true}, {2 * time.Second, false}, {2100 * time.Millisecond, false}} {
		got, err := s.LaunchClaims(ctx, []int64{6}, launchNow.Add(at.after))
		if _, ok := got[6]; err != nil || ok != at.live {
			t.Errorf("a claim expiring at +1.5s, read at +%v: present %v, %v; want %v", at.after, ok, err, at.live)
		}
	}
}

func testConcurrentLaunchClaims(t *testing.T, s ledger.Launches) {
	exactlyOneWins(t, 8, "claim", func() error {
		return s.ClaimLaunch(context.Background(), launchClaim(7, 1, 1, time.Minute), 0, launchNow)
	})
}

func testLaunchRecords(t *testing.T, s ledger.Launches) {
	ctx := context.Background()
	f := ledger.Launch{
		Token: "skiff-abc", Pool: "cpu", State: ledger.LaunchIntent, Plan: `{"count":2}`,
		Members:   []ledger.Member{{JobID: 11, Attempt: 1}, {JobID: 12, Attempt: 3}},
		CreatedAt: launchNow, ExpiresAt: launchNow.Add(time.Hour),
	}
	if _, err := s.Launch(ctx, f.Token, launchNow); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("missing launch: %v", err)
	}
	for _, m := range f.Members { // the members' claims name the launch
		c := ledger.Claim{JobID: m.JobID, Attempt: m.Attempt, Gen: 1, Token: f.Token, Pool: "cpu",
			LeaseUntil: launchNow.Add(10 * time.Minute), UpdatedAt: launchNow, ExpiresAt: launchNow.Add(time.Hour)}
		if err := s.ClaimLaunch(ctx, c, 0, launchNow); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PutLaunch(ctx, f); err != nil {
		t.Fatal(err)
	}
	if err := s.PutLaunch(ctx, f); !errors.Is(err, ledger.ErrConflict) {
		t.Fatalf("second PutLaunch: %v", err)
	}
	// The fence: a member's claim taken over by another invocation (a new
	// attempt with another token) refuses the launch.
	taken := ledger.Launch{Token: "skiff-stale", Pool: "cpu", State: ledger.LaunchIntent, Plan: "{}",
		Members: []ledger.Member{{JobID: 11, Attempt: 1}}, CreatedAt: launchNow, ExpiresAt: launchNow.Add(time.Hour)}
	if err := s.PutLaunch(ctx, taken); !errors.Is(err, ledger.ErrConflict) {
		t.Errorf("a launch whose member's claim names another launch: %v, want ErrConflict", err)
	}
	if _, err := s.Launch(ctx, taken.Token, launchNow); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("the fenced-off launch was recorded: %v", err)
	}
	got, err := s.Launch(ctx, f.Token, launchNow)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, f) {
		t.Errorf("launch = %+v, want %+v", got, f)
	}
	if err := s.FinishLaunch(ctx, f.Token, []string{"i-0abc", ""}, "capacity"); err != nil {
		t.Fatal(err)
	}
	got, err = s.Launch(ctx, f.Token, launchNow)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != ledger.LaunchDone || !reflect.DeepEqual(got.Instances, []string{"i-0abc", ""}) || got.Reason != "capacity" {
		t.Errorf("finished launch = %+v", got)
	}
	if id, member := got.Instance(11); id != "i-0abc" || !member {
		t.Errorf("Instance(11) = %q %v", id, member)
	}
	if id, member := got.Instance(12); id != "" || !member {
		t.Errorf("Instance(12) = %q %v", id, member)
	}
	if _, member := got.Instance(13); member {
		t.Error("job 13 is not a member")
	}
	if err := s.FinishLaunch(ctx, "skiff-unknown", nil, ""); !errors.Is(err, ledger.ErrConflict) {
		t.Errorf("finishing an unknown launch: %v, want ErrConflict", err)
	}
	if err := s.FinishLaunch(ctx, f.Token, []string{"i-0late", "i-0late2"}, "recovered"); !errors.Is(err, ledger.ErrConflict) {
		t.Errorf("a second finish: %v, want ErrConflict (the first finish wins)", err)
	}
	if got, _ := s.Launch(ctx, f.Token, launchNow); !reflect.DeepEqual(got.Instances, []string{"i-0abc", ""}) {
		t.Errorf("a second finish changed the launch: %+v", got)
	}
	if _, err := s.Launch(ctx, f.Token, launchNow.Add(2*time.Hour)); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("expired launch: %v", err)
	}
	empty := ledger.Launch{Token: "skiff-empty", Pool: "cpu", State: ledger.LaunchDone, Reason: "github", CreatedAt: launchNow}
	if err := s.PutLaunch(ctx, empty); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Launch(ctx, empty.Token, launchNow); err != nil || got.State != ledger.LaunchDone || len(got.Members) != 0 {
		t.Errorf("empty launch = %+v, %v", got, err)
	}
}

// testLaunchOnDemand: a run's mark is per pool, a later mark replaces an
// earlier one, and it is gone once expired.
func testLaunchOnDemand(t *testing.T, s ledger.Launches) {
	ctx := context.Background()
	for _, bad := range []struct {
		run     int64
		pool    string
		attempt int
	}{{0, "gpu", 2}, {7, "", 2}, {7, "gpu", 1}} {
		if err := s.MarkOnDemand(ctx, bad.run, bad.pool, bad.attempt, launchNow.Add(time.Hour)); err == nil {
			t.Errorf("MarkOnDemand(%d, %q, %d) accepted", bad.run, bad.pool, bad.attempt)
		}
	}
	if err := s.MarkOnDemand(ctx, 7, "gpu", 2, launchNow.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkOnDemand(ctx, 8, "gpu", 2, launchNow.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkOnDemand(ctx, 8, "gpu", 3, launchNow.Add(3*time.Hour)); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		run  int64
		pool string
		at   time.Duration
		want int
	}{
		{"marked", 7, "gpu", time.Minute, 2},
		{"other pool", 7, "cpu", time.Minute, 0},
		{"other run", 9, "gpu", time.Minute, 0},
		{"expired", 7, "gpu", 2 * time.Hour, 0},
		{"replaced by a later mark", 8, "gpu", time.Minute, 3},
		{"the later mark's expiry", 8, "gpu", 2 * time.Hour, 3},
	}
	for _, tc := range cases {
		got, err := s.OnDemandFrom(ctx, tc.run, tc.pool, launchNow.Add(tc.at))
		if err != nil || got != tc.want {
			t.Errorf("%s: OnDemandFrom(%d, %q) = %d, %v; want %d", tc.name, tc.run, tc.pool, got, err, tc.want)
		}
	}
}
