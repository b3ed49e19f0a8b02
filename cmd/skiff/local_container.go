package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/moby/moby/client"

	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/provider/container"
)

// containerProvider builds skiff local's container provider for the pools
// that run on it (cfg): each pool's container: section says its containers; a pool without
// one takes --container-image, which it then requires. The engine is the
// one DOCKER_HOST names (default the Docker socket; Podman's service with
// DOCKER_HOST=unix:///run/podman/podman.sock). The host's CPUs and memory
// are the ceiling of the runners' limits, and the pools' images are pulled
// before the first job.
func containerProvider(cfg *pool.Config, image, dataDir string, deployment func() (string, error), logger *slog.Logger) (provider.Provider, error) {
	var def *pool.Container
	if image != "" {
		def = &pool.Container{Image: image, Pids: pool.DefaultContainerPids, GPUMode: pool.ContainerGPUCDI,
			Network: pool.ContainerNetworkRunner, Pull: pool.ContainerPullMissing}
	}
	var images []*pool.Container
	for _, p := range cfg.Pools {
		switch {
		case p.Container != nil:
			images = append(images, p.Container)
		case def == nil:
			return nil, fmt.Errorf("pool %q has no container: section: give it one, or --container-image", p.Name)
		}
	}
	if def != nil {
		images = append(images, def)
	}
	engine, err := client.New(client.FromEnv) // negotiates the API version on the first request
	if err != nil {
		return nil, fmt.Errorf("container provider: the engine's client: %w", err)
	}
	id, err := deployment()
	if err != nil {
		return nil, err
	}
	p, err := container.New(container.Options{Engine: engine, Dir: filepath.Join(dataDir, "containers"), Default: def,
		Deployment: id, Ceiling: container.HostCeiling(), Logger: logger})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := p.Prepare(ctx, images); err != nil {
		logger.Warn("pulling the pools' images ahead", "err", err)
	}
	return p, nil
}
