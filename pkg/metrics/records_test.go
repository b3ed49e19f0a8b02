package metrics_test

import (
	"testing"

	"github.com/skiffci/skiff/pkg/metrics"
	"github.com/skiffci/skiff/pkg/metrics/recordstest"
)

func TestMemoryConformance(t *testing.T) {
	t.Parallel()
	recordstest.Run(t, func(t *testing.T) metrics.Records { return &metrics.MemoryRecords{} })
}
