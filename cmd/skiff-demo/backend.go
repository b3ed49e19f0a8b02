package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/skiffci/skiff/internal/podman"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/provider/container"
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

// newDemoBackend starts the backend o asks for; data is skiff local's
// data directory (the containers' JIT files and usage are kept there).
func newDemoBackend(o demoOptions, data string, log *slog.Logger) (*demoBackend, error) {
	if o.Provider != "container" {
		return &demoBackend{}, nil
	}
	svc, err := podman.Start()
	if err != nil {
		return nil, fmt.Errorf("starting the demo's Podman service: %w", err)
	}
	b := &demoBackend{service: svc, deployment: "demo"}
	// The image holds static builds of this module's stand-in and
	// entrypoint: the demo runs from the repository (make demo).
	if err := svc.Import(demoImage, map[string]string{
		"skiff-podhelper": "github.com/skiffci/skiff/cmd/skiff-podhelper",
		"skiff-standin":   "github.com/skiffci/skiff/cmd/skiff-standin",
	}, `ENTRYPOINT ["/skiff-podhelper", "--", "/skiff-standin"]`); err != nil {
		b.stop()
		return nil, fmt.Errorf("building the demo's runner image: %w", err)
	}
	ceiling := container.Ceiling{NanoCPUs: int64(runtime.NumCPU()) * 1e9}
	var si syscall.Sysinfo_t
	if syscall.Sysinfo(&si) == nil {
		ceiling.MemoryBytes = int64(si.Totalram) * int64(si.Unit)
	}
	// The pools file's process pools run in the image, on the host's
	// network: the stand-in reaches the simulator on 127.0.0.1.
	def := &pool.Container{Image: demoImage, Pids: pool.DefaultContainerPids, GPUMode: pool.ContainerGPUCDI,
		Network: pool.ContainerNetworkHost, Pull: pool.ContainerPullNever}
	p, err := container.New(container.Options{Engine: svc.Client, Dir: filepath.Join(data, "containers"), Default: def,
		Deployment: b.deployment, Ceiling: ceiling, Logger: log, Env: demoRunnerEnv(o)})
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
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", b.service.PID()))
	if err != nil {
		return 0, false
	}
	// Fields after the command's closing parenthesis: state is field 3,
	// utime 14, stime 15, cutime 16, cstime 17, in clock ticks.
	i := strings.LastIndexByte(string(stat), ')')
	f := strings.Fields(string(stat)[i+1:])
	if len(f) < 15 {
		return 0, false
	}
	var ticks int64
	for _, v := range f[11:15] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, false
		}
		ticks += n
	}
	const hz = 100 // USER_HZ: the kernel reports /proc times in hundredths of a second on every Linux ABI
	return time.Duration(ticks) * time.Second / hz, true
}
