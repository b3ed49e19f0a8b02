package dynamostore_test

import (
	"testing"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/store/dynamostore"
	"github.com/skiffci/skiff/pkg/store/storetest"
)

func TestRoomDynamo(t *testing.T) {
	t.Parallel()
	storetest.RunRoom(t, func(t *testing.T) store.Room {
		client := testenv.DynamoClient(t, testenv.Moto(t))
		return dynamostore.NewRoomDynamo(client, storetest.NewTable(t, client, "skiff-room"))
	})
}

func newLaunchDynamo(t *testing.T) store.Launches {
	t.Helper()
	// moto: the fenced fleet intent is a transaction, which dynalite lacks.
	endpoint := testenv.Moto(t)
	client := testenv.DynamoClient(t, endpoint)
	return dynamostore.NewLaunchDynamo(client, storetest.NewTable(t, client, "skiff-launch"))
}

func TestLaunchDynamo(t *testing.T) {
	t.Parallel()
	storetest.RunLaunches(t, newLaunchDynamo)
}

// TestInstallationsDynamo runs the suite against DynamoDB (dynalite)
// through the real SDK: the conditional PutItem is the ordering.
func TestInstallationsDynamo(t *testing.T) {
	t.Parallel()
	client := testenv.DynamoClient(t, testenv.Dynalite(t))
	storetest.RunInstallations(t, func(t *testing.T) store.Installations {
		return dynamostore.NewInstallationsDynamo(client, storetest.NewTable(t, client, "installations"))
	})
}
