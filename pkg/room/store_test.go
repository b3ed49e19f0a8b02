package room_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/room"
	"github.com/skiffci/skiff/pkg/room/roomtest"
	"github.com/skiffci/skiff/pkg/store/storetest"
)

func TestMemory(t *testing.T) {
	t.Parallel()
	roomtest.Run(t, func(*testing.T) room.Store { return room.NewMemory() })
}

// TestBackoffProperty: over seeded sequences of refusals and recoveries at
// random times, a refusal always leaves a backoff under way; the backoff
// grows only when a refusal finds none under way, by one failure, and its
// length follows room.CapacityBackoff (15 s doubling, at most 5 min, ±20 %).
func TestBackoffProperty(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for seed := range uint64(50) {
		rng := rand.New(rand.NewPCG(seed, 1))
		r := room.NewMemory()
		now := storetest.Now
		var prev room.Backoff
		for step := range 200 {
			now = now.Add(time.Duration(rng.Int64N(int64(2 * time.Minute))))
			if rng.IntN(10) == 0 {
				if _, err := r.Recovered(ctx, "gpu", "p"); err != nil {
					t.Fatal(err)
				}
				prev = room.Backoff{}
				continue
			}
			jitter := rng.Float64()
			b, err := r.Refused(ctx, "gpu", "p", now, func(f int) time.Duration { return room.CapacityBackoff(f, jitter) })
			if err != nil {
				t.Fatal(err)
			}
			if !b.Until.After(now) {
				t.Fatalf("seed %d step %d: backoff %+v not under way at %s", seed, step, b, now)
			}
			switch under := now.Before(prev.Until); {
			case under && b != prev:
				t.Fatalf("seed %d step %d: a refusal during %+v changed it to %+v", seed, step, prev, b)
			case !under:
				want := prev.Failures + 1
				if prev.Until.IsZero() || !now.Before(prev.Until.Add(room.BackoffLimit)) {
					want = 1
				}
				d := room.CapacityBackoff(want, jitter)
				if b.Failures != want || !b.Until.Equal(now.Add(d)) {
					t.Fatalf("seed %d step %d: after %+v got %+v; want %d failures until +%s", seed, step, prev, b, want, d)
				}
				if d < 12*time.Second || d > 6*time.Minute {
					t.Fatalf("seed %d step %d: backoff %s outside 12 s .. 6 min", seed, step, d)
				}
			}
			prev = b
		}
	}
}
