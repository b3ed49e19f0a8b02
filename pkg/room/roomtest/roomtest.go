package roomtest

import (
	"context"
	"errors"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/room"
	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/store/storetest"
)

// Run is the conformance suite of room.Store: entries keep their first
// time, offers are exclusive until they end, the fair order's served
// times, leaving, expiry. newRoom returns an empty room.
func Run(t *testing.T, newRoom func(*testing.T) room.Store) {
	t.Run("Enter", func(t *testing.T) { t.Parallel(); testRoomEnter(t, newRoom(t)) })
	t.Run("Offer", func(t *testing.T) { t.Parallel(); testRoomOffer(t, newRoom(t)) })
	t.Run("ConcurrentOffers", func(t *testing.T) { t.Parallel(); testRoomConcurrentOffers(t, newRoom(t)) })
	t.Run("LeaveAndExpiry", func(t *testing.T) { t.Parallel(); testRoomLeave(t, newRoom(t)) })
	t.Run("Invalid", func(t *testing.T) { t.Parallel(); testRoomInvalid(t, newRoom(t)) })
	t.Run("Backoff", func(t *testing.T) { t.Parallel(); testRoomBackoff(t, newRoom(t)) })
	t.Run("FailedCapacity", func(t *testing.T) { t.Parallel(); testFailedCapacity(t, newRoom(t)) })
	t.Run("ConcurrentRefusals", func(t *testing.T) { t.Parallel(); testRoomConcurrentRefusals(t, newRoom(t)) })
	t.Run("Resume", func(t *testing.T) { t.Parallel(); testRoomResume(t, newRoom(t)) })
	t.Run("Probe", func(t *testing.T) { t.Parallel(); testRoomProbe(t, newRoom(t)) })
	t.Run("ConcurrentProbes", func(t *testing.T) { t.Parallel(); testRoomConcurrentProbes(t, newRoom(t)) })
}

// doubling is a backoff rule without jitter: 15 s, 30 s, 60 s, …
func doubling(failures int) time.Duration { return 15 * time.Second << (failures - 1) }

// testFailedCapacity: the room's backoffs as the memory of failed capacity
// (room.CapacityMemory): the places remembered are listed per pool until
// their backoff ends, a failure during one changes nothing, a recovery
// forgets it, and a probe armed on a place does not hide it.
func testFailedCapacity(t *testing.T, r room.Store) {
	ctx := context.Background()
	mem := room.CapacityMemory{Store: r}
	keys := []string{"g6.xlarge/subnet-a/spot", "g5.xlarge/subnet-b/spot"}
	if err := mem.MarkCapacityFailed(ctx, "gpu", keys, storetest.Now, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := mem.MarkCapacityFailed(ctx, "gpu", keys[:1], storetest.Now.Add(time.Minute), 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := mem.MarkCapacityFailed(ctx, "gpu", []string{"g6.xlarge/subnet-c/spot"}, storetest.Now, time.Minute); err != nil {
		t.Fatal(err)
	}
	if ok, err := r.Recovered(ctx, "gpu", "g6.xlarge/subnet-c/spot"); err != nil || !ok {
		t.Fatalf("recovering: %v, %v", ok, err)
	}
	if ok, err := r.ArmProbe(ctx, "gpu", keys[1], storetest.Now, storetest.Now.Add(20*time.Second)); err != nil || !ok {
		t.Fatalf("arming a probe: %v, %v", ok, err)
	}
	cases := []struct {
		name string
		pool string
		at   time.Duration
		want map[string]bool
	}{
		{"both remembered", "gpu", time.Minute, map[string]bool{keys[0]: true, keys[1]: true}},
		{"not renewed while under way", "gpu", 3*time.Minute - time.Nanosecond, map[string]bool{keys[0]: true, keys[1]: true}},
		{"all forgotten", "gpu", 3 * time.Minute, map[string]bool{}},
		{"other pool", "cpu", time.Minute, map[string]bool{}},
	}
	for _, tc := range cases {
		got, err := mem.FailedCapacity(ctx, tc.pool, storetest.Now.Add(tc.at))
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
	bs, err := r.Backoffs(ctx, "gpu", storetest.Now.Add(time.Minute))
	if b := bs[keys[1]]; err != nil || b.Failures != 1 || !b.Until.Equal(storetest.Now.Add(3*time.Minute)) ||
		!b.ProbeAt.Equal(storetest.Now.Add(20*time.Second)) || b.Pool != "gpu" || b.Place != keys[1] {
		t.Errorf("backoff as listed: %+v, %v; want 1 failure until +3m, its probe at +20s", b, err)
	}
	// Once ended, the next failure is the place's second.
	if err := mem.MarkCapacityFailed(ctx, "gpu", keys[:1], storetest.Now.Add(4*time.Minute), 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	if bs, err := r.Backoffs(ctx, "gpu", storetest.Now.Add(5*time.Minute)); err != nil || len(bs) != 1 || bs[keys[0]].Failures != 2 {
		t.Errorf("after a failure past the end: %+v, %v; want %s's second failure", bs, err, keys[0])
	}
}

func testRoomBackoff(t *testing.T, r room.Store) {
	ctx := context.Background()
	const place = "g6.xlarge@subnet-a,subnet-b"
	b, err := r.Refused(ctx, "gpu", place, storetest.Now, doubling)
	if err != nil {
		t.Fatal(err)
	}
	if b.Failures != 1 || !b.Until.Equal(storetest.Now.Add(15*time.Second)) || b.Pool != "gpu" || b.Place != place {
		t.Fatalf("first refusal: %+v; want 1 failure until +15s", b)
	}
	// A refusal while the backoff is under way (a job that tried before it
	// ended) changes nothing: the whole place shares one backoff.
	if b, err = r.Refused(ctx, "gpu", place, storetest.Now.Add(10*time.Second), doubling); err != nil {
		t.Fatal(err)
	}
	if b.Failures != 1 || !b.Until.Equal(storetest.Now.Add(15*time.Second)) {
		t.Errorf("a refusal during the backoff: %+v; want it unchanged", b)
	}
	// Another place of the pool, and the same place in another pool, have their own.
	if b, err = r.Refused(ctx, "gpu", "g6.2xlarge@subnet-a", storetest.Now.Add(10*time.Second), doubling); err != nil {
		t.Fatal(err)
	}
	if b.Failures != 1 || !b.Until.Equal(storetest.Now.Add(25*time.Second)) {
		t.Errorf("another place: %+v; want its own first backoff", b)
	}
	if b, err = r.Refused(ctx, "cpu", place, storetest.Now.Add(10*time.Second), doubling); err != nil {
		t.Fatal(err)
	}
	if b.Failures != 1 {
		t.Errorf("another pool: %+v; want its own first backoff", b)
	}
	// The probe at the end fails: the backoff doubles from then.
	if b, err = r.Refused(ctx, "gpu", place, storetest.Now.Add(15*time.Second), doubling); err != nil {
		t.Fatal(err)
	}
	if b.Failures != 2 || !b.Until.Equal(storetest.Now.Add(45*time.Second)) {
		t.Errorf("the failed probe: %+v; want 2 failures until +45s", b)
	}
	// A launch in the place succeeds: the backoff ends, once.
	if ok, err := r.Recovered(ctx, "gpu", place); err != nil || !ok {
		t.Errorf("recovering: %v, %v; want true", ok, err)
	}
	if ok, err := r.Recovered(ctx, "gpu", place); err != nil || ok {
		t.Errorf("recovering again: %v, %v; want false", ok, err)
	}
	if b, err = r.Refused(ctx, "gpu", place, storetest.Now.Add(20*time.Second), doubling); err != nil {
		t.Fatal(err)
	}
	if b.Failures != 1 || !b.Until.Equal(storetest.Now.Add(35*time.Second)) {
		t.Errorf("after the recovery: %+v; want a first backoff again", b)
	}
	// Long after a backoff ended, a refusal starts from the first again.
	later := storetest.Now.Add(35*time.Second + room.BackoffLimit)
	if b, err = r.Refused(ctx, "gpu", place, later, doubling); err != nil {
		t.Fatal(err)
	}
	if b.Failures != 1 || !b.Until.Equal(later.Add(15*time.Second)) {
		t.Errorf("a refusal long after: %+v; want a first backoff", b)
	}
	// The other place is untouched by all this.
	if ok, err := r.Recovered(ctx, "gpu", "g6.2xlarge@subnet-a"); err != nil || !ok {
		t.Errorf("recovering the other place: %v, %v; want true", ok, err)
	}
}

func testRoomConcurrentRefusals(t *testing.T, r room.Store) {
	ctx := context.Background()
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := r.Refused(ctx, "gpu", "", storetest.Now, doubling)
			if err != nil || b.Failures != 1 || !b.Until.Equal(storetest.Now.Add(15*time.Second)) {
				t.Errorf("a concurrent refusal: %+v, %v; want 1 failure until +15s", b, err)
			}
		}()
	}
	wg.Wait()
	b, err := r.Refused(ctx, "gpu", "", storetest.Now.Add(time.Second), doubling)
	if err != nil || b.Failures != 1 {
		t.Errorf("after 8 concurrent refusals of one outage: %+v, %v; want one failure, not 8", b, err)
	}
}

func testRoomProbe(t *testing.T, r room.Store) {
	ctx := context.Background()
	const place = "g6.xlarge@subnet-a"
	arm := func(now, due time.Duration) bool {
		t.Helper()
		ok, err := r.ArmProbe(ctx, "gpu", place, storetest.Now.Add(now), storetest.Now.Add(due))
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	probeAt := func(now time.Duration) time.Time {
		t.Helper()
		b, err := r.Refused(ctx, "gpu", place, storetest.Now.Add(now), doubling)
		if err != nil {
			t.Fatal(err)
		}
		return b.ProbeAt
	}
	if arm(0, 25*time.Second) {
		t.Errorf("a probe armed in a place without a backoff")
	}
	if _, err := r.Refused(ctx, "gpu", place, storetest.Now, doubling); err != nil { // until +15s
		t.Fatal(err)
	}
	if !arm(time.Second, 10*time.Second) {
		t.Fatalf("no probe armed while the place backs off")
	}
	if got := probeAt(2 * time.Second); !got.Equal(storetest.Now.Add(10 * time.Second)) {
		t.Errorf("the probe read back due at %s, want +10s", got)
	}
	// One probe at a time: another arms only once it fired (or was lost).
	if arm(2*time.Second, 12*time.Second) {
		t.Errorf("a second probe armed while the first is due")
	}
	if arm(9*time.Second, 20*time.Second) {
		t.Errorf("a second probe armed a second before the first is due")
	}
	if !arm(10*time.Second, 14*time.Second) {
		t.Errorf("no probe armed after the first came due")
	}
	// The backoff doubles at its end (+15s → +45s): the probe stays armed.
	if got := probeAt(15 * time.Second); !got.Equal(storetest.Now.Add(14 * time.Second)) {
		t.Errorf("after the backoff doubled the probe is due at %s, want +14s", got)
	}
	if !arm(16*time.Second, 40*time.Second) {
		t.Errorf("no probe armed in the doubled backoff")
	}
	// Past the backoff's end no probe is armed: the jobs' own tries are due.
	if arm(45*time.Second, 70*time.Second) {
		t.Errorf("a probe armed after the backoff ended")
	}
	// Another place and another pool have none.
	if b, err := r.Refused(ctx, "gpu", "other", storetest.Now.Add(20*time.Second), doubling); err != nil || !b.ProbeAt.IsZero() {
		t.Errorf("another place's backoff: %+v, %v; want no probe", b, err)
	}
	// A recovery ends the probe with the backoff.
	if ok, err := r.Recovered(ctx, "gpu", place); err != nil || !ok {
		t.Fatalf("recovering: %v, %v", ok, err)
	}
	if got := probeAt(50 * time.Second); !got.IsZero() {
		t.Errorf("after the recovery a new backoff has a probe due at %s, want none", got)
	}
}

func testRoomConcurrentProbes(t *testing.T, r room.Store) {
	ctx := context.Background()
	if _, err := r.Refused(ctx, "gpu", "", storetest.Now, doubling); err != nil {
		t.Fatal(err)
	}
	var armed atomic.Int32
	storetest.Together(8, func(i int) {
		ok, err := r.ArmProbe(ctx, "gpu", "", storetest.Now.Add(time.Second), storetest.Now.Add(time.Duration(20+i)*time.Second))
		if err != nil {
			t.Errorf("arming: %v", err)
		}
		if ok {
			armed.Add(1)
		}
	})
	if n := armed.Load(); n != 1 {
		t.Errorf("%d of 8 concurrent callers armed the probe, want 1", n)
	}
}

func testRoomResume(t *testing.T, r room.Store) {
	ctx := context.Background()
	const place = "g6.xlarge@subnet-a"
	enter := func(job int64, place string, wake time.Duration) {
		w := waiting("gpu", job, "acme/app", 0)
		w.Reason, w.Place = "launch_capacity", place
		if wake != 0 {
			w.WakeAt = storetest.Now.Add(wake)
			w.OfferedUntil = w.WakeAt.Add(2 * time.Minute)
		}
		if _, err := r.Enter(ctx, w); err != nil {
			t.Fatal(err)
		}
	}
	enter(1, place, 4*time.Minute)
	enter(2, place, 5*time.Minute)
	enter(3, "other", 4*time.Minute) // another place's backoff
	enter(4, place, 0)               // waits for a slot, not the backoff
	n, err := r.Resume(ctx, "gpu", place, storetest.Now.Add(time.Minute))
	if err != nil || n != 2 {
		t.Fatalf("resuming: %d, %v; want 2", n, err)
	}
	ws, _, err := r.Waiting(ctx, "gpu", storetest.Now.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		resumed := w.JobID == 1 || w.JobID == 2 || w.JobID == 4 // 4 had no wake time
		if resumed != (w.WakeAt.IsZero() && w.OfferedUntil.IsZero()) {
			t.Errorf("job %d after resuming %q: wake %s offered until %s", w.JobID, place, w.WakeAt, w.OfferedUntil)
		}
		if w.JobID == 3 && w.Place != "other" {
			t.Errorf("job 3's place read back as %q", w.Place)
		}
	}
	if err := r.Offer(ctx, "gpu", 1, storetest.Now.Add(time.Minute), storetest.Now.Add(3*time.Minute)); err != nil {
		t.Errorf("offering a resumed job: %v", err)
	}
	if err := r.Offer(ctx, "gpu", 3, storetest.Now.Add(time.Minute), storetest.Now.Add(3*time.Minute)); !errors.Is(err, store.ErrConflict) {
		t.Errorf("offering another place's held job: %v, want ErrConflict", err)
	}
	// An offer under way (its wake time passed) is not resumed again.
	if n, err := r.Resume(ctx, "gpu", place, storetest.Now.Add(2*time.Minute)); err != nil || n != 0 {
		t.Errorf("resuming again: %d, %v; want 0", n, err)
	}
}

func waiting(pool string, job int64, repo string, since time.Duration) room.Waiting {
	at := storetest.Now.Add(since)
	return room.Waiting{Pool: pool, JobID: job, Repository: repo, Message: `{"job_id":` + strconv.FormatInt(job, 10) + `}`,
		Since: at, Reason: "max_runners", ExpiresAt: at.Add(room.Limit)}
}

func testRoomEnter(t *testing.T, r room.Store) {
	ctx := context.Background()
	first, err := r.Enter(ctx, waiting("gpu", 7, "acme/app", 0))
	if err != nil {
		t.Fatal(err)
	}
	if first.Tries != 1 || !first.Since.Equal(storetest.Now) {
		t.Errorf("first entry: tries %d since %s, want 1 and %s", first.Tries, first.Since, storetest.Now)
	}
	again := waiting("gpu", 7, "acme/app", time.Minute)
	again.Reason, again.Detail, again.WakeAt = "launch_capacity", "g6.xlarge: no capacity in us-east-1a", storetest.Now.Add(90*time.Second)
	got, err := r.Enter(ctx, again)
	if err != nil {
		t.Fatal(err)
	}
	if got.Tries != 2 || !got.Since.Equal(storetest.Now) || got.Reason != "launch_capacity" || got.Detail != again.Detail ||
		!got.WakeAt.Equal(again.WakeAt) || got.ExpiresAt.Unix() != storetest.Now.Add(room.Limit).Unix() {
		t.Errorf("second entry: %+v; want tries 2, the first since and expiry, the new reason, detail and wake", got)
	}
	if _, err := r.Enter(ctx, waiting("gpu", 8, "acme/lib", -time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Enter(ctx, waiting("cpu", 9, "acme/app", 0)); err != nil {
		t.Fatal(err)
	}
	ws, _, err := r.Waiting(ctx, "gpu", storetest.Now.Add(2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 2 || ws[0].JobID != 8 || ws[1].JobID != 7 {
		t.Fatalf("the gpu room: %+v; want jobs 8 then 7 (oldest first), not cpu's", ws)
	}
	if w := ws[1]; w.Repository != "acme/app" || w.Message != `{"job_id":7}` || w.Pool != "gpu" || w.Tries != 2 {
		t.Errorf("entry read back: %+v", w)
	}
}

func testRoomOffer(t *testing.T, r room.Store) {
	ctx := context.Background()
	if _, err := r.Enter(ctx, waiting("gpu", 7, "acme/app", 0)); err != nil {
		t.Fatal(err)
	}
	if err := r.Offer(ctx, "gpu", 99, storetest.Now, storetest.Now.Add(time.Minute)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("offering a job not in the room: %v, want ErrNotFound", err)
	}
	if err := r.Offer(ctx, "gpu", 7, storetest.Now, storetest.Now.Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := r.Offer(ctx, "gpu", 7, storetest.Now.Add(time.Minute), storetest.Now.Add(3*time.Minute)); !errors.Is(err, store.ErrConflict) {
		t.Errorf("a second offer while the first is under way: %v, want ErrConflict", err)
	}
	ws, served, err := r.Waiting(ctx, "gpu", storetest.Now.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 1 || !ws[0].OfferedUntil.Equal(storetest.Now.Add(2*time.Minute)) {
		t.Errorf("after the offer: %+v; want it offered until %s", ws, storetest.Now.Add(2*time.Minute))
	}
	if at, ok := served["acme/app"]; !ok || !at.Equal(storetest.Now) {
		t.Errorf("served times %v; want acme/app at %s", served, storetest.Now)
	}
	// Once the offer's time is over it counts as lost: offered again.
	if err := r.Offer(ctx, "gpu", 7, storetest.Now.Add(2*time.Minute), storetest.Now.Add(4*time.Minute)); err != nil {
		t.Errorf("offering again once the first offer ended: %v", err)
	}
	// A new entry (scale-up refused it again) ends the offer at once.
	if _, err := r.Enter(ctx, waiting("gpu", 7, "acme/app", 3*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := r.Offer(ctx, "gpu", 7, storetest.Now.Add(3*time.Minute), storetest.Now.Add(5*time.Minute)); err != nil {
		t.Errorf("offering after a new entry: %v", err)
	}
	// An entry whose caller scheduled its own offer (a delayed send) is
	// not offered before that offer's time is over.
	held := waiting("gpu", 7, "acme/app", 4*time.Minute)
	held.WakeAt, held.OfferedUntil = storetest.Now.Add(5*time.Minute), storetest.Now.Add(7*time.Minute)
	if _, err := r.Enter(ctx, held); err != nil {
		t.Fatal(err)
	}
	if err := r.Offer(ctx, "gpu", 7, storetest.Now.Add(6*time.Minute), storetest.Now.Add(8*time.Minute)); !errors.Is(err, store.ErrConflict) {
		t.Errorf("offering an entry whose own offer is scheduled: %v, want ErrConflict", err)
	}
	ws, _, err = r.Waiting(ctx, "gpu", storetest.Now.Add(6*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 1 || !ws[0].WakeAt.Equal(held.WakeAt) || !ws[0].OfferedUntil.Equal(held.OfferedUntil) {
		t.Errorf("the held entry read back: %+v", ws)
	}
}

func testRoomConcurrentOffers(t *testing.T, r room.Store) {
	ctx := context.Background()
	if _, err := r.Enter(ctx, waiting("gpu", 7, "acme/app", 0)); err != nil {
		t.Fatal(err)
	}
	storetest.ExactlyOneWins(t, 8, "offer", func() error { return r.Offer(ctx, "gpu", 7, storetest.Now, storetest.Now.Add(time.Minute)) })
}

func testRoomLeave(t *testing.T, r room.Store) {
	ctx := context.Background()
	for job := int64(1); job <= 3; job++ {
		if _, err := r.Enter(ctx, waiting("gpu", job, "acme/app", time.Duration(job)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Leave(ctx, "gpu", 2); err != nil {
		t.Fatal(err)
	}
	if err := r.Leave(ctx, "gpu", 2); err != nil {
		t.Errorf("leaving twice: %v", err)
	}
	ws, _, err := r.Waiting(ctx, "gpu", storetest.Now)
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 2 || ws[0].JobID != 1 || ws[1].JobID != 3 {
		t.Errorf("after job 2 left: %+v", ws)
	}
	// GitHub's limit: past RoomLimit the entries are gone.
	ws, _, err = r.Waiting(ctx, "gpu", storetest.Now.Add(room.Limit+time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 0 {
		t.Errorf("entries past the room's limit: %+v", ws)
	}
	if err := r.Offer(ctx, "gpu", 1, storetest.Now.Add(room.Limit+time.Minute), storetest.Now.Add(room.Limit+2*time.Minute)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("offering an expired entry: %v, want ErrNotFound", err)
	}
	// An expired entry entered again starts anew.
	w, err := r.Enter(ctx, waiting("gpu", 1, "acme/app", room.Limit+2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if w.Tries != 1 || !w.Since.Equal(storetest.Now.Add(room.Limit+2*time.Minute)) {
		t.Errorf("re-entered after expiry: %+v; want a new entry", w)
	}
}

func testRoomInvalid(t *testing.T, r room.Store) {
	ctx := context.Background()
	for _, w := range []room.Waiting{
		{JobID: 1, Repository: "a/b", Message: "m", Since: storetest.Now},
		{Pool: "gpu", Repository: "a/b", Message: "m", Since: storetest.Now},
		{Pool: "gpu", JobID: 1, Message: "m", Since: storetest.Now},
		{Pool: "gpu", JobID: 1, Repository: "a/b", Since: storetest.Now},
		{Pool: "gpu", JobID: 1, Repository: "a/b", Message: "m"},
	} {
		if _, err := r.Enter(ctx, w); err == nil {
			t.Errorf("entry %+v accepted", w)
		}
	}
}
