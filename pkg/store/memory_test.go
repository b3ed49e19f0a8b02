package store_test

import (
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/store/storetest"
)

func TestMemoryConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(*testing.T) store.Store {
		m := store.NewMemory()
		m.SetClock(func() time.Time { return storetest.Now })
		return m
	})
	storetest.RunExpiry(t, func(_ *testing.T, now func() time.Time) store.Store {
		m := store.NewMemory()
		m.SetClock(now)
		return m
	})
}
