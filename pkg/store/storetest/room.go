package storetest

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/store"
)

// RunRoom is the conformance suite of store.Room: entries keep their first
// time, offers are exclusive until they end, the fair order's served
// times, leaving, expiry. newRoom returns an empty room.
func RunRoom(t *testing.T, newRoom func(*testing.T) store.Room) {
	t.Run("Enter", func(t *testing.T) { t.Parallel(); testRoomEnter(t, newRoom(t)) })
	t.Run("Offer", func(t *testing.T) { t.Parallel(); testRoomOffer(t, newRoom(t)) })
	t.Run("ConcurrentOffers", func(t *testing.T) { t.Parallel(); testRoomConcurrentOffers(t, newRoom(t)) })
	t.Run("LeaveAndExpiry", func(t *testing.T) { t.Parallel(); testRoomLeave(t, newRoom(t)) })
	t.Run("Invalid", func(t *testing.T) { t.Parallel(); testRoomInvalid(t, newRoom(t)) })
}

func waiting(pool string, job int64, repo string, since time.Duration) store.Waiting {
	at := Now.Add(since)
	return store.Waiting{Pool: pool, JobID: job, Repository: repo, Message: `{"job_id":` + strconv.FormatInt(job, 10) + `}`,
		Since: at, Reason: "max_runners", ExpiresAt: at.Add(store.RoomLimit)}
}

func testRoomEnter(t *testing.T, r store.Room) {
	ctx := context.Background()
	first, err := r.Enter(ctx, waiting("gpu", 7, "acme/app", 0))
	if err != nil {
		t.Fatal(err)
	}
	if first.Tries != 1 || !first.Since.Equal(Now) {
		t.Errorf("first entry: tries %d since %s, want 1 and %s", first.Tries, first.Since, Now)
	}
	again := waiting("gpu", 7, "acme/app", time.Minute)
	again.Reason, again.Detail, again.WakeAt = "launch_capacity", "g6.xlarge: no capacity in us-east-1a", Now.Add(90*time.Second)
	got, err := r.Enter(ctx, again)
	if err != nil {
		t.Fatal(err)
	}
	if got.Tries != 2 || !got.Since.Equal(Now) || got.Reason != "launch_capacity" || got.Detail != again.Detail ||
		!got.WakeAt.Equal(again.WakeAt) || got.ExpiresAt.Unix() != Now.Add(store.RoomLimit).Unix() {
		t.Errorf("second entry: %+v; want tries 2, the first since and expiry, the new reason, detail and wake", got)
	}
	if _, err := r.Enter(ctx, waiting("gpu", 8, "acme/lib", -time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Enter(ctx, waiting("cpu", 9, "acme/app", 0)); err != nil {
		t.Fatal(err)
	}
	ws, _, err := r.Waiting(ctx, "gpu", Now.Add(2*time.Minute))
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

func testRoomOffer(t *testing.T, r store.Room) {
	ctx := context.Background()
	if _, err := r.Enter(ctx, waiting("gpu", 7, "acme/app", 0)); err != nil {
		t.Fatal(err)
	}
	if err := r.Offer(ctx, "gpu", 99, Now, Now.Add(time.Minute)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("offering a job not in the room: %v, want ErrNotFound", err)
	}
	if err := r.Offer(ctx, "gpu", 7, Now, Now.Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := r.Offer(ctx, "gpu", 7, Now.Add(time.Minute), Now.Add(3*time.Minute)); !errors.Is(err, store.ErrConflict) {
		t.Errorf("a second offer while the first is under way: %v, want ErrConflict", err)
	}
	ws, served, err := r.Waiting(ctx, "gpu", Now.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 1 || !ws[0].OfferedUntil.Equal(Now.Add(2*time.Minute)) {
		t.Errorf("after the offer: %+v; want it offered until %s", ws, Now.Add(2*time.Minute))
	}
	if at, ok := served["acme/app"]; !ok || !at.Equal(Now) {
		t.Errorf("served times %v; want acme/app at %s", served, Now)
	}
	// Once the offer's time is over it counts as lost: offered again.
	if err := r.Offer(ctx, "gpu", 7, Now.Add(2*time.Minute), Now.Add(4*time.Minute)); err != nil {
		t.Errorf("offering again once the first offer ended: %v", err)
	}
	// A new entry (scale-up refused it again) ends the offer at once.
	if _, err := r.Enter(ctx, waiting("gpu", 7, "acme/app", 3*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := r.Offer(ctx, "gpu", 7, Now.Add(3*time.Minute), Now.Add(5*time.Minute)); err != nil {
		t.Errorf("offering after a new entry: %v", err)
	}
	// An entry whose caller scheduled its own offer (a delayed send) is
	// not offered before that offer's time is over.
	held := waiting("gpu", 7, "acme/app", 4*time.Minute)
	held.WakeAt, held.OfferedUntil = Now.Add(5*time.Minute), Now.Add(7*time.Minute)
	if _, err := r.Enter(ctx, held); err != nil {
		t.Fatal(err)
	}
	if err := r.Offer(ctx, "gpu", 7, Now.Add(6*time.Minute), Now.Add(8*time.Minute)); !errors.Is(err, store.ErrConflict) {
		t.Errorf("offering an entry whose own offer is scheduled: %v, want ErrConflict", err)
	}
	ws, _, err = r.Waiting(ctx, "gpu", Now.Add(6*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 1 || !ws[0].WakeAt.Equal(held.WakeAt) || !ws[0].OfferedUntil.Equal(held.OfferedUntil) {
		t.Errorf("the held entry read back: %+v", ws)
	}
}

func testRoomConcurrentOffers(t *testing.T, r store.Room) {
	ctx := context.Background()
	if _, err := r.Enter(ctx, waiting("gpu", 7, "acme/app", 0)); err != nil {
		t.Fatal(err)
	}
	var won atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := r.Offer(ctx, "gpu", 7, Now, Now.Add(time.Minute))
			switch {
			case err == nil:
				won.Add(1)
			case !errors.Is(err, store.ErrConflict):
				t.Errorf("a concurrent offer: %v", err)
			}
		}()
	}
	wg.Wait()
	if won.Load() != 1 {
		t.Errorf("%d of 8 concurrent offers won, want exactly 1", won.Load())
	}
}

func testRoomLeave(t *testing.T, r store.Room) {
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
	ws, _, err := r.Waiting(ctx, "gpu", Now)
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 2 || ws[0].JobID != 1 || ws[1].JobID != 3 {
		t.Errorf("after job 2 left: %+v", ws)
	}
	// GitHub's limit: past RoomLimit the entries are gone.
	ws, _, err = r.Waiting(ctx, "gpu", Now.Add(store.RoomLimit+time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 0 {
		t.Errorf("entries past the room's limit: %+v", ws)
	}
	if err := r.Offer(ctx, "gpu", 1, Now.Add(store.RoomLimit+time.Minute), Now.Add(store.RoomLimit+2*time.Minute)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("offering an expired entry: %v, want ErrNotFound", err)
	}
	// An expired entry entered again starts anew.
	w, err := r.Enter(ctx, waiting("gpu", 1, "acme/app", store.RoomLimit+2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if w.Tries != 1 || !w.Since.Equal(Now.Add(store.RoomLimit+2*time.Minute)) {
		t.Errorf("re-entered after expiry: %+v; want a new entry", w)
	}
}

func testRoomInvalid(t *testing.T, r store.Room) {
	ctx := context.Background()
	for _, w := range []store.Waiting{
		{JobID: 1, Repository: "a/b", Message: "m", Since: Now},
		{Pool: "gpu", Repository: "a/b", Message: "m", Since: Now},
		{Pool: "gpu", JobID: 1, Message: "m", Since: Now},
		{Pool: "gpu", JobID: 1, Repository: "a/b", Since: Now},
		{Pool: "gpu", JobID: 1, Repository: "a/b", Message: "m"},
	} {
		if _, err := r.Enter(ctx, w); err == nil {
			t.Errorf("entry %+v accepted", w)
		}
	}
}
