package scaledown_test

import (
	"context"
	"testing"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/metrics"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// collect lists the records the passes wrote.
func collect(t *testing.T, out *metrics.MemoryRecords) []metrics.Record {
	t.Helper()
	var recs []metrics.Record
	for r, err := range out.List(context.Background(), metrics.Filter{}) {
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	return recs
}
