package store_test

import (
	"testing"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/store/storetest"
)

func newLaunchDynamo(t *testing.T) store.Launches {
	t.Helper()
	// moto: the fenced fleet intent is a transaction, which dynalite lacks.
	endpoint := testenv.Moto(t)
	client := testenv.DynamoClient(t, endpoint)
	return store.NewLaunchDynamo(client, storetest.NewTable(t, client, "skiff-launch"))
}

func TestLaunchMemory(t *testing.T) {
	t.Parallel()
	storetest.RunLaunches(t, func(*testing.T) store.Launches { return store.NewLaunchMemory() })
}

func TestLaunchDynamo(t *testing.T) {
	t.Parallel()
	storetest.RunLaunches(t, newLaunchDynamo)
}
