package ledger_test

import (
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/ledger/ledgertest"
)

// The in-memory ledger and launch records pass the conformance suites every
// store passes.

func TestLedgerMemoryConformance(t *testing.T) {
	t.Parallel()
	ledgertest.RunLedger(t, func(_ *testing.T, now func() time.Time) ledger.Ledger { return ledger.NewMemory(now) })
}

func TestLedgerMemoryInterruptions(t *testing.T) {
	t.Parallel()
	ledgertest.RunInterruptions(t, func(_ *testing.T, now func() time.Time) ledgertest.InterruptLedger { return ledger.NewMemory(now) })
}

func TestLaunchMemory(t *testing.T) {
	t.Parallel()
	ledgertest.RunLaunches(t, func(*testing.T) ledger.Launches { return ledger.NewLaunchMemory() })
}
