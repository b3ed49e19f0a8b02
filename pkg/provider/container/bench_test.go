package container_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/provider/container"
)

// countingEngine counts the engine calls the provider makes.
type countingEngine struct {
	container.Engine
	n atomic.Int64
}

func (c *countingEngine) ContainerCreate(ctx context.Context, o client.ContainerCreateOptions) (client.ContainerCreateResult, error) {
	c.n.Add(1)
	return c.Engine.ContainerCreate(ctx, o)
}

func (c *countingEngine) ContainerStart(ctx context.Context, id string, o client.ContainerStartOptions) (client.ContainerStartResult, error) {
	c.n.Add(1)
	return c.Engine.ContainerStart(ctx, id, o)
}

func (c *countingEngine) ContainerInspect(ctx context.Context, id string, o client.ContainerInspectOptions) (client.ContainerInspectResult, error) {
	c.n.Add(1)
	return c.Engine.ContainerInspect(ctx, id, o)
}

func (c *countingEngine) ContainerList(ctx context.Context, o client.ContainerListOptions) (client.ContainerListResult, error) {
	c.n.Add(1)
	return c.Engine.ContainerList(ctx, o)
}

func (c *countingEngine) NetworkCreate(ctx context.Context, name string, o client.NetworkCreateOptions) (client.NetworkCreateResult, error) {
	c.n.Add(1)
	return c.Engine.NetworkCreate(ctx, name, o)
}

// BenchmarkLaunch launches one runner per iteration (image present) and
// reports: container created → runner started (the stand-in's first
// write) p50 and p95, the engine calls of a launch per runner, and of a
// List pass.
//
//	go test -run '^$' -bench BenchmarkLaunch -benchtime 20x ./pkg/provider/container/
func BenchmarkLaunch(b *testing.B) {
	e := needEngine(b)
	eng := &countingEngine{Engine: e.client}
	dir := b.TempDir()
	p, err := container.New(container.Options{Engine: eng, Dir: dir, Deployment: "bench", Env: []string{"SKIFF_TEST_MODE=mark"},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	s := spec("bench")
	var lat []time.Duration
	var calls int64
	var ids []string
	b.ResetTimer()
	for i := range b.N {
		tok := fmt.Sprintf("tok-bench-%d", i)
		l := provider.Launch{Token: tok, Spec: s, Runners: []provider.RunnerRequest{{Name: tok}}}
		pl, err := p.Plan(context.Background(), l)
		if err != nil {
			b.Fatal(err)
		}
		before := eng.n.Load()
		start := time.Now()
		res, err := p.Launch(context.Background(), pl, []provider.Registration{{Mode: provider.ModeJIT, JITConfig: "x", RunnerName: tok}})
		if err != nil {
			b.Fatal(err)
		}
		calls += eng.n.Load() - before
		id := res.Runners[0].Instance.ID
		ids = append(ids, id)
		for {
			if _, err := os.Stat(filepath.Join(dir, id, "usage", "started")); err == nil {
				break
			}
			time.Sleep(time.Millisecond)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	before := eng.n.Load()
	if _, err := p.List(context.Background(), provider.Filter{}); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(eng.n.Load()-before), "calls/pass")
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Milliseconds()), "p50-ms")
	b.ReportMetric(float64(lat[(len(lat)*95)/100].Milliseconds()), "p95-ms")
	b.ReportMetric(float64(calls)/float64(b.N), "calls/runner")
	_ = p.Terminate(context.Background(), ids)
}
