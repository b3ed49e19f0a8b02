// Package ledgertest is the conformance suite of the ledger's ports
// (ledger.Ledger, ledger.Interruptions, ledger.Launches): every
// implementation runs it (the in-memory ones of package ledger, the
// DynamoDB ones of package dynamostore, the SQLite ones of package
// sqlitestore), so that they cannot drift apart.
package ledgertest

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/ledger"
)

// Now is the instant the suites treat as the present (storetest.Now's): a
// ledger whose clock the suite does not pass reads it (for Dynamo:
// dynamostore.WithClock(func() time.Time { return ledgertest.Now })).
var Now = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

// exactlyOneWins calls try n times at once: exactly one call must succeed
// and every other fail with ledger.ErrConflict; what names the calls in a
// failure.
func exactlyOneWins(t *testing.T, n int, what string, try func() error) {
	t.Helper()
	var won atomic.Int64
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			switch err := try(); {
			case err == nil:
				won.Add(1)
			case !errors.Is(err, ledger.ErrConflict):
				t.Errorf("a concurrent %s: %v", what, err)
			}
		})
	}
	wg.Wait()
	if won.Load() != 1 {
		t.Errorf("%d of %d concurrent %ss won, want exactly 1", won.Load(), n, what)
	}
}
