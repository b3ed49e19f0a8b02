package ledgertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/ledger"
)

// InterruptLedger is a ledger that records spot interruption warnings.
type InterruptLedger interface {
	ledger.Ledger
	ledger.Interruptions
}

// RunInterruptions is the conformance suite of ledger.Interruptions: the
// first warning's time is kept, on a live or an ended runner, the state
// never moves, and an unknown instance is ErrNotFound.
func RunInterruptions(t *testing.T, newLedger func(t *testing.T, now func() time.Time) InterruptLedger) {
	t.Run("FirstWarningWins", func(t *testing.T) {
		t.Parallel()
		l := newLedger(t, func() time.Time { return Now })
		ctx := context.Background()
		rs := runners("spot", 1, 2)
		for i, r := range rs {
			mustReserve(t, l, r)
			if err := l.Launched(ctx, r.Name, ledger.LaunchReport{InstanceID: []string{"i-0s1", "i-0s2"}[i], Spot: true, At: Now}); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.Advance(ctx, rs[0].Name, ledger.StateJobStarted, Now.Add(time.Minute), rs[0].JobID); err != nil {
			t.Fatal(err)
		}
		if _, err := l.End(ctx, rs[1].Name, Now.Add(time.Minute), "state_terminated"); err != nil {
			t.Fatal(err)
		}
		for _, at := range []time.Duration{2 * time.Minute, 3 * time.Minute, time.Minute} {
			for _, id := range []string{"i-0s1", "i-0s2"} {
				if err := l.MarkInterrupted(ctx, id, Now.Add(at)); err != nil {
					t.Fatalf("MarkInterrupted(%s) = %v", id, err)
				}
			}
		}
		for i, want := range []ledger.State{ledger.StateJobStarted, ledger.StateTerminated} {
			got, err := l.Runner(ctx, rs[i].Name)
			if err != nil || got.State != want || !got.InterruptedAt.Equal(Now.Add(2*time.Minute)) {
				t.Errorf("runner %s = %s interrupted %v, %v; want %s interrupted at the first warning", rs[i].Name, got.State, got.InterruptedAt, err, want)
			}
		}
		if live, _ := l.Live(ctx, "spot"); live != 1 {
			t.Errorf("live %d, want 1: a warning ends nothing", live)
		}
	})
	t.Run("UnknownInstance", func(t *testing.T) {
		t.Parallel()
		l := newLedger(t, func() time.Time { return Now })
		if err := l.MarkInterrupted(context.Background(), "i-0nope", Now); !errors.Is(err, ledger.ErrNotFound) {
			t.Errorf("MarkInterrupted(unknown) = %v, want ErrNotFound", err)
		}
	})
}
