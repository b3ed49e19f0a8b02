package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/skiffci/skiff/internal/podman"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/provider/container"
	"github.com/skiffci/skiff/pkg/provider/process"
)

// demoImage is the runner image `--provider container` builds: the runner
// image's entrypoint (skiff-podhelper) around the stand-in runner.
const demoImage = "localhost/skiff-demo-runner:1"

// demoBackend is where the demo's runners run: nil provider for the
// process provider skiff local builds itself, else the container
// provider on a Podman service of the demo's own.
type demoBackend struct {
	provider   provider.Provider
	deployment string
	service    *podman.Service
}

// podmanStartWait bounds how long the demo waits for its Podman service
// to answer: a first start on a loaded machine migrates its fresh storage
// in seconds.
const podmanStartWait = time.Minute

// newDemoBackend starts the backend o asks for; data is skiff local's
// data directory (the containers' JIT files and usage are kept there).
func newDemoBackend(ctx context.Context, o demoOptions, data string, log *slog.Logger) (*demoBackend, error) {
	if o.Provider != "container" {
		return &demoBackend{}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, podmanStartWait)
	defer cancel()
	svc, err := podman.Start(ctx)
	if err != nil {
		return nil, fmt.Errorf("starting the demo's Podman service: %w", err)
	}
	b := &demoBackend{service: svc, deployment: "demo"}
	// The image holds static builds of this module's stand-in and
	// entrypoint: the demo runs from the repository (make demo).
	if err := svc.ImportStandinRunner(demoImage); err != nil {
		b.stop()
		return nil, fmt.Errorf("building the demo's runner image: %w", err)
	}
	// The pools file's process pools run in the image, on the host's
	// network: the stand-in reaches the simulator on 127.0.0.1.
	def := &pool.Container{Image: demoImage, Pids: pool.DefaultContainerPids, GPUMode: pool.ContainerGPUCDI,
		Network: pool.ContainerNetworkHost, Pull: pool.ContainerPullNever}
	p, err := container.New(container.Options{Engine: svc.Client, Dir: filepath.Join(data, "containers"), Default: def,
		Deployment: b.deployment, Ceiling: container.HostCeiling(), Logger: log, Env: demoRunnerEnv(o)})
	if err != nil {
		b.stop()
		return nil, err
	}
	b.provider = p
	return b, nil
}

// demoRunnerEnv is every stand-in's environment: its job's length, how
// long it waits idle for a job, its work.
func demoRunnerEnv(o demoOptions) []string {
	return []string{"SKIFF_STANDIN_DURATION=" + o.Duration.String(), "SKIFF_STANDIN_IDLE=20s", "SKIFF_STANDIN_WORK=" + o.Work}
}

// stop stops the backend's engine, removing what it made.
func (b *demoBackend) stop() {
	if b.service != nil {
		b.service.Stop()
		b.service = nil
	}
}

// engineCPU is the CPU time the Podman service process has used so far
// (user and system, with its waited-for children), read from /proc.
func (b *demoBackend) engineCPU() (time.Duration, bool) {
	if b.service == nil || b.service.PID() == 0 {
		return 0, false
	}
	return process.ProcessCPU(b.service.PID())
}
