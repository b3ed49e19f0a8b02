package container_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/moby/moby/client"

	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/provider/container"
	"github.com/skiffci/skiff/pkg/provider/providertest"
)

// imageEngine counts the image calls the provider makes.
type imageEngine struct {
	container.Engine
	inspects, pulls atomic.Int64
}

func (c *imageEngine) ImageInspect(ctx context.Context, id string, o ...client.ImageInspectOption) (client.ImageInspectResult, error) {
	c.inspects.Add(1)
	return c.Engine.ImageInspect(ctx, id, o...)
}

func (c *imageEngine) ImagePull(ctx context.Context, ref string, o client.ImagePullOptions) (client.ImagePullResponse, error) {
	c.pulls.Add(1)
	return c.Engine.ImagePull(ctx, ref, o)
}

// TestPrepare: the pools' images are pulled ahead (Prepare, at skiff
// local's start) as their policy says, so a launch pays no pull: with
// pull: missing, an image the engine has costs one inspect at Prepare and
// no image call at launch; one it lacks is pulled, and the failure names
// it; never makes no call.
func TestPrepare(t *testing.T) {
	t.Parallel()
	e := needEngine(t)
	for _, tc := range []struct {
		name                  string
		image                 string
		pull                  string
		inspects, pulls       int64
		wantErr               bool
		launchInspectsOrPulls int64
	}{
		{"missing, image present", testImage, pool.ContainerPullMissing, 1, 0, false, 0},
		{"missing, image absent", "localhost/skiff-absent:1", pool.ContainerPullMissing, 1, 1, true, -1},
		{"never", "localhost/skiff-absent:1", pool.ContainerPullNever, 0, 0, false, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			eng := &imageEngine{Engine: e.client}
			p, err := container.New(container.Options{Engine: eng, Dir: t.TempDir(), Deployment: "prepare" + strings.ReplaceAll(tc.pull, "-", ""),
				Env: []string{"SKIFF_TEST_MODE=exit"}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			s := spec("prepare")
			s.Container.Image, s.Container.Pull = tc.image, tc.pull
			err = p.Prepare(context.Background(), []*pool.Container{s.Container})
			if (err != nil) != tc.wantErr || err != nil && !strings.Contains(err.Error(), tc.image) {
				t.Errorf("Prepare: %v; want an error %v, naming %s", err, tc.wantErr, tc.image)
			}
			if i, n := eng.inspects.Load(), eng.pulls.Load(); i != tc.inspects || n != tc.pulls {
				t.Errorf("Prepare made %d image inspects and %d pulls, want %d and %d", i, n, tc.inspects, tc.pulls)
			}
			if tc.launchInspectsOrPulls < 0 {
				return
			}
			eng.inspects.Store(0)
			eng.pulls.Store(0)
			l := provider.Launch{Token: "tok-prepare", Spec: s, Runners: []provider.RunnerRequest{{Name: "prepare-a"}}}
			_, res := providertest.PlanAndLaunch(t, p, l, []provider.Registration{{Mode: provider.ModeJIT, JITConfig: "x", RunnerName: "prepare-a"}})
			if res.Runners[0].Err != nil {
				t.Fatalf("Launch: %+v", res.Runners)
			}
			t.Cleanup(func() { _ = p.Terminate(context.Background(), []string{res.Runners[0].Instance.ID}) })
			if n := eng.inspects.Load() + eng.pulls.Load(); n != tc.launchInspectsOrPulls {
				t.Errorf("a launch after Prepare made %d image calls, want %d: the job paid for the image", n, tc.launchInspectsOrPulls)
			}
		})
	}
}
