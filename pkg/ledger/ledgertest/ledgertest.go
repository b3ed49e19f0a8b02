// Package ledgertest is the conformance suite of the ledger's ports
// (ledger.Ledger, ledger.Interruptions, ledger.Launches): every
// implementation runs it (the in-memory ones of package ledger, the
// DynamoDB ones of package dynamostore, the SQLite ones of package
// sqlitestore), so that they cannot drift apart.
package ledgertest

import (
	"github.com/skiffci/skiff/pkg/store/storetest"
)

// Now is the instant the suites treat as the present (storetest.Now): a
// ledger whose clock the suite does not pass reads it (for Dynamo:
// dynamostore.WithClock(func() time.Time { return ledgertest.Now })).
var Now = storetest.Now

// exactlyOneWins is storetest.ExactlyOneWins: ledger.ErrConflict is
// store.ErrConflict.
var exactlyOneWins = storetest.ExactlyOneWins
