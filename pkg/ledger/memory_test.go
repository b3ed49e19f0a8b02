package ledger_test

import (
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/ledger/ledgertest"
)

func TestLedgerMemoryConformance(t *testing.T) {
	t.Parallel()
	ledgertest.RunLedger(t, func(_ *testing.T, now func() time.Time) ledger.Ledger { return ledger.NewMemory(now) })
}
