package store_test

import (
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/store/storetest"
)

func TestLedgerMemoryInterruptions(t *testing.T) {
	t.Parallel()
	storetest.RunInterruptions(t, func(_ *testing.T, now func() time.Time) storetest.InterruptLedger { return store.NewLedgerMemory(now) })
}
