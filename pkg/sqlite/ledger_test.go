package sqlite_test

import (
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/sqlite"
	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/store/storetest"
)

func TestLaunchesConformance(t *testing.T) {
	t.Parallel()
	storetest.RunLaunches(t, func(t *testing.T) store.Launches {
		return sqlite.NewLaunches(open(t, "", sqlite.Options{}), func() time.Time { return storetest.Now })
	})
}

func TestLedgerConformance(t *testing.T) {
	t.Parallel()
	storetest.RunLedger(t, func(t *testing.T, now func() time.Time) store.Ledger {
		return sqlite.NewLedger(open(t, "", sqlite.Options{}), now)
	})
}

func TestInterruptionsConformance(t *testing.T) {
	t.Parallel()
	storetest.RunInterruptions(t, func(t *testing.T, now func() time.Time) storetest.InterruptLedger {
		return sqlite.NewLedger(open(t, "", sqlite.Options{}), now)
	})
}
