package store_test

import (
	"testing"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/store/storetest"
)

func TestInstallationsMemory(t *testing.T) {
	t.Parallel()
	storetest.RunInstallations(t, func(*testing.T) store.Installations { return store.NewInstallationsMemory() })
}

// TestInstallationsDynamo runs the suite against DynamoDB (dynalite)
// through the real SDK: the conditional PutItem is the ordering.
func TestInstallationsDynamo(t *testing.T) {
	t.Parallel()
	client := testenv.DynamoClient(t, testenv.Dynalite(t))
	storetest.RunInstallations(t, func(t *testing.T) store.Installations {
		return store.NewInstallationsDynamo(client, storetest.NewTable(t, client, "installations"))
	})
}
