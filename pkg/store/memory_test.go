package store_test

import (
	"testing"

	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/store/storetest"
)

func TestMemoryConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(*testing.T) store.Store { return store.NewMemory() })
}
