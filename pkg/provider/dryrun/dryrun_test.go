package dryrun_test

import (
	"log/slog"
	"testing"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/provider/dryrun"
	"github.com/skiffci/skiff/pkg/provider/providertest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	providertest.Run(t, func(t *testing.T) providertest.Harness {
		logs := &testenv.SyncBuffer{}
		p := dryrun.New(slog.New(slog.NewJSONHandler(logs, nil)), nil)
		return providertest.Harness{
			Provider: p,
			Spec: pool.Spec{Shared: pool.Shared{Pool: "conformance", Backend: pool.BackendEC2},
				EC2: &pool.EC2{InstanceTypes: []string{"c7i.large"}, Capacity: "spot-then-on-demand", Subnets: []string{"local"}}},
			Delivered: p.Delivered,
			FailCapacity: func() {
				p.FailNext(&provider.Error{Kind: provider.ErrCapacity, Code: "NoCapacity", Message: "dry-run capacity failure"})
			},
			Logs:        logs.String,
			HoldInQueue: p.HoldInQueue,
			Dequeue:     p.Dequeue,
		}
	})
}
