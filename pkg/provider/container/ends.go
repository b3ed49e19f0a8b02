package container

// How a runner's container ended and what it used: read once, kept for Retain.

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"github.com/moby/moby/client"

	"github.com/skiffci/skiff/pkg/metrics"
	"github.com/skiffci/skiff/pkg/metrics/fromusage"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/provider/podusage"
)

// end reads how an ended container ended and what it used (one inspect),
// then removes it; the instance is kept for Retain. Of Lists at once that
// see the container ended, one reads it and the others wait for it and
// return what it kept: no later reader, finding the container removed,
// overwrites its end with an empty one.
func (p *Provider) end(ctx context.Context, name string, in provider.Instance) provider.Instance {
	p.mu.Lock()
	if e, ok := p.ended[name]; ok {
		p.mu.Unlock()
		return e.in.Clone()
	}
	if done, ok := p.ending[name]; ok {
		p.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			return in
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		if e, ok := p.ended[name]; ok {
			return e.in.Clone()
		}
		return in // the reader failed to remove it: the next List reads it again
	}
	done := make(chan struct{})
	p.ending[name] = done
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.ending, name)
		p.mu.Unlock()
		close(done)
	}()
	e := ended{in: in, at: p.o.Now()}
	u, measured := p.readUsage(name)
	var l pool.ContainerLimits
	got, err := p.o.Engine.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
	if err == nil && got.Container.State != nil {
		st := got.Container.State
		if got.Container.Config != nil {
			_ = json.Unmarshal([]byte(got.Container.Config.Labels[LabelLimits]), &l)
		}
		code := st.ExitCode
		in.EndReason, e.reason = EndReason(code, st.OOMKilled, u.PeakMemoryBytes, l.MemoryBytes, st.Error)
		in.ExitCode = &code
		if in.EndReason == provider.EndRunnerOutdated {
			// GitHub refused the image's runner for its version: scale-down
			// holds the pool (package freshness).
			in.Tags[names.TagRunnerOutdated] = "unknown"
		}
		e.in = in
	}
	if measured {
		e.peaks = fromusage.Peaks(u, l.MemoryBytes)
	}
	if err := p.remove(ctx, name); err != nil {
		p.o.Logger.Warn("removing an ended runner container", "container", name, "err", err)
		return in
	}
	p.o.Logger.Info("a runner container ended", "container", name, "end_reason", e.reason)
	p.keep(e)
	return in
}

// kill removes a running container (forced) and keeps it as ended.
func (p *Provider) kill(ctx context.Context, name string, in provider.Instance, reason string) provider.Instance {
	if err := p.remove(ctx, name); err != nil {
		p.o.Logger.Warn("removing a runner container", "container", name, "err", err)
		return in
	}
	return p.keepRemoved(name, in, reason)
}

// keepRemoved keeps a container skiff removed as ended (EndRemoved), with
// the usage its entrypoint wrote.
func (p *Provider) keepRemoved(name string, in provider.Instance, reason string) provider.Instance {
	in.State, in.EndReason = provider.Terminated, provider.EndRemoved
	e := ended{in: in, at: p.o.Now(), reason: reason}
	if u, ok := p.readUsage(name); ok {
		// Removed before any inspect: the limit is not read, so the
		// memory peak is in GiB only.
		e.peaks = fromusage.Peaks(u, 0)
	}
	p.keep(e)
	return in
}

func (p *Provider) keep(e ended) {
	e.in.State = provider.Terminated
	p.mu.Lock()
	p.ended[e.in.ID] = e
	delete(p.running, e.in.ID)
	p.mu.Unlock()
	_ = os.RemoveAll(filepath.Join(p.o.Dir, e.in.ID))
}

// EndReason is how a container ended, in neutral words and as skiff's log
// says it: OOMKilled (and its exit code), the engine's error, GitHub's
// refusal of the runner's version, or the runner's exit code. OOM is the
// engine's word, or, where the engine does not say (Podman on cgroup v1),
// a runner killed by SIGKILL (137) whose entrypoint measured a peak memory
// within oomMargin of the container's limit: the kernel's OOM killer
// ended it.
func EndReason(exit int, oom bool, peak, limit int64, engineErr string) (provider.EndReason, string) {
	switch {
	case oom:
		return provider.EndOOMKilled, fmt.Sprintf("OOMKilled: exit code %d", exit)
	case exit == 137 && limit > 0 && peak >= limit-limit/oomMargin:
		return provider.EndOOMKilled, "OOMKilled: killed by SIGKILL at its memory limit (exit code 137)"
	case engineErr != "":
		return provider.EndBackendError, fmt.Sprintf("Error: %s (exit code %d)", engineErr, exit)
	case exit == provider.ExitVersionDeprecated:
		return provider.EndRunnerOutdated, fmt.Sprintf("exit code %d", exit)
	case exit != 0:
		return provider.EndFailed, fmt.Sprintf("exit code %d", exit)
	}
	return provider.EndExited, "exit code 0"
}

// Ended returns how a runner List saw end ended (EndReason), and whether
// the provider knows.
func (p *Provider) Ended(id string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.ended[id]
	return e.reason, ok
}

// readUsage reads what the entrypoint left in a runner's usage directory.
func (p *Provider) readUsage(name string) (podusage.Usage, bool) {
	b, err := os.ReadFile(filepath.Join(p.o.Dir, name, "usage", "usage"))
	if err != nil {
		return podusage.Usage{}, false
	}
	u, err := podusage.Decode(string(b))
	return u, err == nil
}

// RecordHost describes this host in the metrics records: its CPUs, memory
// and GPUs as the ceiling states them; nil without a ceiling.
func (p *Provider) RecordHost() *metrics.Host {
	c := p.o.Ceiling
	if c == (Ceiling{}) {
		return nil
	}
	h := &metrics.Host{CPUs: int(c.NanoCPUs / 1e9)}
	if c.MemoryBytes > 0 {
		gib := math.Round(float64(c.MemoryBytes)/(1<<30)*100) / 100
		h.MemoryGiB = &gib
	}
	if c.GPUs > 0 {
		n := c.GPUs
		h.GPUs = &n
	}
	return h
}

// Peaks implements writer.UsageSource.
func (p *Provider) Peaks(id string) (*metrics.Peaks, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.ended[id]
	return e.peaks, ok && e.peaks != nil
}

// UsagePending implements writer.PendingUsage: the runner was alive at
// the last List that saw it.
func (p *Provider) UsagePending(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.running[id]
	return ok
}
