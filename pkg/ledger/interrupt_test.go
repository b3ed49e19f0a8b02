package ledger_test

import (
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/ledger/ledgertest"
)

func TestLedgerMemoryInterruptions(t *testing.T) {
	t.Parallel()
	ledgertest.RunInterruptions(t, func(_ *testing.T, now func() time.Time) ledgertest.InterruptLedger { return ledger.NewMemory(now) })
}
