package metrics

import (
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/pool"
)

// TestWarmCount: the warm count is the 95th percentile, over the jobs
// queued while the schedule is on, of the jobs queued within one
// replacement time before each (itself included).
func TestWarmCount(t *testing.T) {
	t.Parallel()
	monday := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC) // a Monday
	at := func(ts ...time.Duration) []int64 {
		out := make([]int64, len(ts))
		for i, d := range ts {
			out[i] = monday.Add(d).UnixNano()
		}
		return out
	}
	always := &pool.Warm{Hot: 1}
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	office := &pool.Warm{Hot: 1, TimeZone: "Europe/Berlin", Location: berlin,
		Schedules: []pool.Schedule{{Days: []time.Weekday{time.Monday}, From: 8 * 60, To: 18 * 60}}}
	var sparse []time.Duration
	for i := range 20 {
		sparse = append(sparse, time.Duration(i)*time.Hour)
	}
	cases := []struct {
		name      string
		queued    []int64
		w         *pool.Warm
		replenish time.Duration
		jobs      int
		count     int
	}{
		// needs 1, 2, 3, 1, 1: the burst of three sets the p95.
		{"a burst of three", at(0, 10*time.Second, 20*time.Second, 200*time.Second, 400*time.Second), always, time.Minute, 5, 3},
		// 21 needs of 1, then 2 and 3: the 22nd of 23 is 2.
		{"one burst among many", at(append(sparse, 30*time.Minute+10*time.Second, 30*time.Minute+20*time.Second,
			30*time.Minute+30*time.Second)...), always, time.Minute, 23, 2},
		// A job one replacement time after another finds it replaced.
		{"replaced in time", at(0, time.Minute), always, time.Minute, 2, 1},
		{"a slower replacement", at(0, time.Minute), always, 2 * time.Minute, 2, 2},
		// 06:30 and 07:30 UTC are 07:30 (outside) and 08:30 in Berlin in winter.
		{"the schedule's hours only", at(6*time.Hour+30*time.Minute, 7*time.Hour+30*time.Minute), office, 2 * time.Hour, 1, 2},
		{"no job in the schedule", at(6 * time.Hour), office, time.Minute, 0, 0},
	}
	for _, tc := range cases {
		jobs, count := WarmCount(tc.queued, tc.w, tc.replenish)
		if jobs != tc.jobs || count != tc.count {
			t.Errorf("%s: %d jobs, count %d; want %d, %d", tc.name, jobs, count, tc.jobs, tc.count)
		}
	}
}

// TestWarmHeldAndServed: the held hours are the configured machines for
// each hour the schedule is on between the first and the last job queued
// (Berlin's 08:00–18:00 on a Monday and a Tuesday: 20 hours on, times 3
// machines), and the jobs served are those started stopped or hot.
func TestWarmHeldAndServed(t *testing.T) {
	t.Parallel()
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	w := &pool.Warm{Stopped: 2, Hot: 1, TimeZone: "Europe/Berlin", Location: berlin,
		Schedules: []pool.Schedule{{Days: []time.Weekday{time.Monday, time.Tuesday}, From: 8 * 60, To: 18 * 60}}}
	c, err := NewCollector("pool", false)
	if err != nil {
		t.Fatal(err)
	}
	monday := time.Date(2026, 11, 30, 0, 0, 0, 0, berlin)
	for i, kind := range []string{StartCold, StartHot, StartStopped, StartStopped} {
		q := monday.Add(time.Duration(i) * 16 * time.Hour) // Mon 00:00 … Tue 24:00
		c.Add(&Record{Pool: "p", QueuedAt: &q, Start: &Start{Kind: kind}})
	}
	got := c.AdviseWarm(map[string]*pool.Warm{"p": w})
	if len(got) != 1 || got[0].Served != 3 || got[0].HeldHours != 60 {
		t.Errorf("advice = %+v; want 3 served and 60 held hours", got)
	}
}
