package ledger_test

import (
	"testing"

	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/ledger/ledgertest"
)

func TestLaunchMemory(t *testing.T) {
	t.Parallel()
	ledgertest.RunLaunches(t, func(*testing.T) ledger.Launches { return ledger.NewLaunchMemory() })
}
