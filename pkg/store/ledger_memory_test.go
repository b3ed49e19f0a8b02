package store_test

import (
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/store/storetest"
)

func TestLedgerMemoryConformance(t *testing.T) {
	t.Parallel()
	storetest.RunLedger(t, func(_ *testing.T, now func() time.Time) store.Ledger { return store.NewLedgerMemory(now) })
}
