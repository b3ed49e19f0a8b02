package store_test

import (
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/store/storetest"
)

var launchTableSeq atomic.Int64

func newLaunchDynamo(t *testing.T) store.Launches {
	t.Helper()
	// moto: the fenced fleet intent is a transaction, which dynalite lacks.
	endpoint := testenv.Moto(t)
	client := testenv.DynamoClient(t, endpoint)
	table := "skiff-launch-" + strconv.FormatInt(launchTableSeq.Add(1), 10)
	if err := store.CreateTable(t.Context(), client, table); err != nil {
		t.Fatalf("creating table: %v", err)
	}
	return store.NewLaunchDynamo(client, table)
}

func TestLaunchMemory(t *testing.T) {
	t.Parallel()
	storetest.RunLaunches(t, func(*testing.T) store.Launches { return store.NewLaunchMemory() })
}

func TestLaunchDynamo(t *testing.T) {
	t.Parallel()
	storetest.RunLaunches(t, newLaunchDynamo)
}
