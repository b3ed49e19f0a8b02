package store_test

import (
	"testing"

	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/store/storetest"
)

func TestLaunchMemory(t *testing.T) {
	t.Parallel()
	storetest.RunLaunches(t, func(*testing.T) store.Launches { return store.NewLaunchMemory() })
}
