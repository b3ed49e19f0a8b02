package room_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/room"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func TestFairOrder(t *testing.T) {
	t.Parallel()
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	cs := []room.Candidate{
		{Repository: "a/big", JobID: 1, Since: at(0)},
		{Repository: "a/big", JobID: 2, Since: at(1)},
		{Repository: "a/big", JobID: 3, Since: at(2)},
		{Repository: "b/one", JobID: 4, Since: at(5)},
		{Repository: "c/two", JobID: 5, Since: at(3)},
		{Repository: "c/two", JobID: 6, Since: at(4), WakeAt: at(100)},       // backing off
		{Repository: "b/one", JobID: 7, Since: at(6), OfferedUntil: at(100)}, // offered already
	}
	cases := []struct {
		name   string
		served map[string]time.Time
		want   []int64
	}{
		{"none served: oldest repository first, round-robin", nil, []int64{1, 5, 4, 2, 3}},
		{"a served just now goes last", map[string]time.Time{"a/big": at(9)}, []int64{5, 4, 1, 2, 3}},
		{"served longest ago first", map[string]time.Time{"a/big": at(9), "b/one": at(7), "c/two": at(8)}, []int64{4, 5, 1, 2, 3}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got []int64
			for _, i := range room.FairOrder(cs, tc.served, at(10)) {
				got = append(got, cs[i].JobID)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("order %v, want %v", got, tc.want)
			}
		})
	}
}

// TestFairOrderProperty: repository A queues 200 jobs, then B queues 5.
// Offering one job per freed slot and recording its repository as served
// (as the room does), all five of B's jobs go within the next 10 slots,
// and no job is offered twice.
func TestFairOrderProperty(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 50 {
		var cs []room.Candidate
		for i := range 200 {
			cs = append(cs, room.Candidate{Repository: "acme/matrix", JobID: int64(i + 1), Since: t0.Add(time.Duration(i) * time.Millisecond)})
		}
		bFrom := t0.Add(time.Second + time.Duration(rng.IntN(1000))*time.Millisecond)
		for i := range 5 {
			cs = append(cs, room.Candidate{Repository: "acme/single", JobID: int64(1000 + i), Since: bFrom.Add(time.Duration(i) * time.Millisecond)})
		}
		served := map[string]time.Time{}
		// A has been served a few times before B arrived.
		if rng.IntN(2) == 0 {
			served["acme/matrix"] = t0.Add(time.Duration(rng.IntN(3000)) * time.Millisecond)
		}
		offered := map[int64]bool{}
		bDone := 0
		now := t0.Add(5 * time.Second)
		for slot := 1; slot <= 10; slot++ {
			now = now.Add(time.Second)
			order := room.FairOrder(cs, served, now)
			if len(order) == 0 {
				t.Fatalf("trial %d: nothing to offer at slot %d", trial, slot)
			}
			c := &cs[order[0]]
			if offered[c.JobID] {
				t.Fatalf("trial %d: job %d offered twice", trial, c.JobID)
			}
			offered[c.JobID] = true
			c.OfferedUntil = now.Add(time.Hour)
			served[c.Repository] = now
			if c.Repository == "acme/single" {
				bDone++
			}
		}
		if bDone != 5 {
			t.Errorf("trial %d: %d of B's 5 jobs in the first 10 freed slots, want 5", trial, bDone)
		}
	}
}

func TestCapacityBackoff(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		tries  int
		jitter float64
		want   time.Duration
	}{
		{1, 0.5, 15 * time.Second}, {2, 0.5, 30 * time.Second}, {3, 0.5, time.Minute}, {5, 0.5, 4 * time.Minute},
		{6, 0.5, 5 * time.Minute}, {40, 0.5, 5 * time.Minute}, {1, 0, 12 * time.Second}, {6, 0.999999, 6 * time.Minute},
	} {
		if got := room.CapacityBackoff(tc.tries, tc.jitter).Round(time.Second); got != tc.want {
			t.Errorf("CapacityBackoff(%d, %v) = %s, want %s", tc.tries, tc.jitter, got, tc.want)
		}
	}
}

func TestProbeInterval(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		jitter float64
		want   time.Duration
	}{{0, 20 * time.Second}, {0.5, 25 * time.Second}, {0.999999, 30 * time.Second}} {
		if got := room.ProbeInterval(tc.jitter).Round(time.Second); got != tc.want {
			t.Errorf("ProbeInterval(%v) = %s, want %s", tc.jitter, got, tc.want)
		}
	}
}
