package store_test

import (
	"testing"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/store/storetest"
)

func TestRoomMemory(t *testing.T) {
	t.Parallel()
	storetest.RunRoom(t, func(*testing.T) store.Room { return store.NewRoomMemory() })
}

func TestRoomDynamo(t *testing.T) {
	t.Parallel()
	storetest.RunRoom(t, func(t *testing.T) store.Room {
		client := testenv.DynamoClient(t, testenv.Moto(t))
		return store.NewRoomDynamo(client, storetest.NewTable(t, client, "skiff-room"))
	})
}
