package store_test

import (
	"testing"

	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/store/storetest"
)

func TestRunnerMemoryConformance(t *testing.T) {
	t.Parallel()
	storetest.RunRunnerState(t, func(*testing.T) store.RunnerState { return store.NewRunnerMemory() })
}
