// Package container is the compute provider that runs each runner as one
// container on a Docker or Podman engine of the machine skiff runs on,
// through the Docker Engine API (the moby client), so that one
// implementation serves Docker and Podman's Docker-compatible service.
//
// A runner is at most two engine objects, created in this order, and a
// directory of skiff's own:
//
//	directory  DIR/skiff-<hash>/     0700, skiff's: jitconfig (the JIT
//	                                 configuration) and usage/ (where the
//	                                 entrypoint leaves what the runner used)
//	network    skiff-<hash>          a bridge of the runner's own (none for a
//	                                 pool with network: host)
//	container  skiff-<hash>          labels skiff.managed, skiff.deployment,
//	                                 skiff.pool, skiff.token, skiff.runner and
//	                                 skiff.tags (skiff's tags as JSON)
//
// Launching a runner is three engine calls (network create, container
// create, start); a pass is one label-filtered container list, plus one
// inspect and one remove per runner that has just ended.
//
// The JIT configuration is never in the container's environment or labels,
// which whoever may inspect containers reads: it is a file bind-mounted
// read-only at /run/skiff/jit/jitconfig into that container only, and the
// entrypoint (cmd/skiff-podhelper) reads the file SKIFF_JITCONFIG_FILE
// names. The container is never privileged, has every capability dropped,
// no new privileges, a read-only root with a tmpfs /tmp and a volume of its
// own at the runner's home, a pids limit, and no engine socket.
//
// The names derive from the launch token and the runner's name, so a
// replayed create finds the name taken (409) and returns the container the
// first launch made.
//
// A container's life, as List reports it:
//
//	created ──(start)──► running ──(the runner exits, is OOM-killed)──► exited
//	   pending            running                                     terminated
//	exited, dead ──(List reads how it ended)──► removed, kept in memory for Retain
//	any state ──(Terminate: forced remove)──► removed
//
// Errors are classified in errors.go: no such image is final and names the
// image; the engine down or a lost answer is transient; the engine or this
// host out of memory, CPUs or GPUs is capacity.
package container

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/skiffci/skiff/pkg/metrics"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provider"
)

// Labels of skiff's containers.
const (
	LabelManaged    = "skiff.managed"
	LabelDeployment = "skiff.deployment"
	LabelPool       = "skiff.pool"
	LabelToken      = "skiff.token"
	LabelRunner     = "skiff.runner"
	// LabelTags holds the instance's tags (names.Tag*) as a JSON object.
	LabelTags = "skiff.tags"
	// LabelLimits holds the container's limits (pool.ContainerLimits) as
	// JSON, for the host's ceiling.
	LabelLimits = "skiff.limits"
	// LabelLifetime is the runner's lifetime (a Go duration): List removes
	// a runner past it.
	LabelLifetime = "skiff.lifetime"
)

// The runner container's contract with its entrypoint (the Kubernetes
// image's, cmd/skiff-podhelper).
const (
	// JITFile is where the JIT configuration is mounted.
	JITFile = "/run/skiff/jit/jitconfig"
	// UsageDir is where the entrypoint writes what the runner used
	// (UsageFile, podusage's encoding) when it exits.
	UsageDir  = "/run/skiff/usage"
	UsageFile = UsageDir + "/usage"
	// RunnerHome is the runner's home in the image: a volume of the
	// container's own (the image's files copied in), writable under a
	// read-only root.
	RunnerHome = "/home/runner"
	// EnvJITConfigFile, EnvTerminationLog and EnvInstanceID are the
	// entrypoint's variables.
	EnvJITConfigFile  = "SKIFF_JITCONFIG_FILE"
	EnvTerminationLog = "SKIFF_TERMINATION_LOG"
	EnvInstanceID     = "SKIFF_INSTANCE_ID"
)

// Engine is the part of the moby client the provider calls, with the
// client's own signatures.
type Engine interface {
	ContainerCreate(ctx context.Context, options client.ContainerCreateOptions) (client.ContainerCreateResult, error)
	ContainerStart(ctx context.Context, containerID string, options client.ContainerStartOptions) (client.ContainerStartResult, error)
	ContainerInspect(ctx context.Context, containerID string, options client.ContainerInspectOptions) (client.ContainerInspectResult, error)
	ContainerList(ctx context.Context, options client.ContainerListOptions) (client.ContainerListResult, error)
	ContainerRemove(ctx context.Context, containerID string, options client.ContainerRemoveOptions) (client.ContainerRemoveResult, error)
	NetworkCreate(ctx context.Context, name string, options client.NetworkCreateOptions) (client.NetworkCreateResult, error)
	NetworkRemove(ctx context.Context, networkID string, options client.NetworkRemoveOptions) (client.NetworkRemoveResult, error)
	ImageInspect(ctx context.Context, imageID string, inspectOpts ...client.ImageInspectOption) (client.ImageInspectResult, error)
	ImagePull(ctx context.Context, refStr string, options client.ImagePullOptions) (client.ImagePullResponse, error)
}

var _ Engine = (*client.Client)(nil)

// Ceiling is what this host gives skiff's runners at most: their limits
// together never exceed it (0: no bound).
type Ceiling struct {
	NanoCPUs    int64
	MemoryBytes int64
	GPUs        int
}

// Options configures a Provider.
type Options struct {
	// Engine is the engine's client. Required.
	Engine Engine
	// Dir holds each runner's directory (its JIT file and usage). Required;
	// created 0700. It must be on the engine's host.
	Dir string
	// Default is the container settings of a launch whose spec has no
	// container part (skiff local running another backend's pools file).
	Default *pool.Container
	// Env are extra KEY=VALUE entries for every runner.
	Env []string
	// Ceiling bounds the limits of the runners alive at once.
	Ceiling Ceiling
	// Deployment names the skiff deployment: every container carries it,
	// and List sees only containers carrying it.
	Deployment string
	// DefaultLifetime caps a runner whose spec has no MaxLifetime.
	DefaultLifetime time.Duration
	// Retain is how long an ended runner stays listed (default provider.DefaultRetain).
	Retain time.Duration
	// Host describes this machine in the metrics records.
	Host   string
	Logger *slog.Logger
	Now    func() time.Time
}

// Provider runs runners as containers. The engine holds what is alive; the
// provider keeps in memory the runners it saw end (for Retain). It is safe
// for concurrent use.
type Provider struct {
	o Options

	mu      sync.Mutex
	ended   map[string]ended
	running map[string]time.Time
	pulled  map[string]bool
	// ending are the ended containers a List is reading and removing,
	// closed when it is done: another List at once waits for it.
	ending map[string]chan struct{}
	// versions is the runner version each image reference's label names
	// ("" for none), read once per reference and pull.
	versions map[string]string
}

// ended is a runner List saw end: its instance as last listed, how it
// ended, and what it used.
type ended struct {
	in     provider.Instance
	reason string
	peaks  *metrics.Peaks
	at     time.Time
}

var _ provider.Provider = (*Provider)(nil)

// New returns a provider, or an error naming what is missing.
func New(o Options) (*Provider, error) {
	var errs []error
	if o.Engine == nil {
		errs = append(errs, errors.New("container provider: Engine is required"))
	}
	if o.Dir == "" {
		errs = append(errs, errors.New("container provider: Dir is required"))
	}
	if o.Deployment != "" && !names.ValidDeployment(o.Deployment) {
		errs = append(errs, fmt.Errorf("container provider: deployment %q is not a deployment id", o.Deployment))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("container provider: creating %s: %w", o.Dir, err)
	}
	if o.Retain <= 0 {
		o.Retain = provider.DefaultRetain
	}
	provider.FillDefaults(&o.DefaultLifetime, &o.Logger, &o.Now)
	return &Provider{o: o, ended: map[string]ended{}, running: map[string]time.Time{}, pulled: map[string]bool{},
		ending: map[string]chan struct{}{}, versions: map[string]string{}}, nil
}

// Name implements provider.Provider.
func (p *Provider) Name() string { return "container" }

// Capabilities implements provider.Provider: the container backend's
// declared ones.
func (p *Provider) Capabilities() provider.Capabilities { return pool.Declared[pool.BackendContainer] }

// plan is a launch as stored: the pool's settings resolved.
type plan struct {
	Token    string                   `json:"token"`
	Pool     string                   `json:"pool"`
	Settings pool.Container           `json:"settings"`
	Limits   pool.ContainerLimits     `json:"limits"`
	Lifetime time.Duration            `json:"lifetime"`
	Runners  []provider.RunnerRequest `json:"runners"`
	// RunnerVersion is the runner version the image's label names, read
	// at launch ("" when it names none).
	RunnerVersion string `json:"-"`
}

// Plan implements provider.Provider. It refuses, as a final ErrInvalid, a
// spec without a container part (and no Default), a pool without an image
// and limits that do not parse.
func (p *Provider) Plan(_ context.Context, l provider.Launch) (provider.Plan, error) {
	c, err := provider.SpecPart(l, l.Spec.Container, p.o.Default, "container")
	if err != nil {
		return "", err
	}
	if c.Image == "" {
		return "", provider.Invalid("NoImage", fmt.Sprintf("pool %s has no runner image", l.Spec.Pool))
	}
	lim, err := c.Limits(l.Spec.Sizes)
	if err != nil {
		return "", provider.Invalid("BadLimit", fmt.Sprintf("pool %s: %v", l.Spec.Pool, err))
	}
	lifetime := l.Lifetime(p.o.DefaultLifetime)
	b, err := json.Marshal(plan{Token: l.Token, Pool: l.Spec.Pool, Settings: *c, Limits: lim, Lifetime: lifetime, Runners: l.Runners})
	if err != nil {
		return "", fmt.Errorf("encoding plan: %w", err)
	}
	return provider.Plan(b), nil
}

// Name is the container (and network) of one runner of a launch: the same
// token and runner always give the same name.
func Name(token, runner string) string { return provider.LaunchName(token, runner) }

// Launch implements provider.Provider: per runner its directory, network,
// container and start. A name taken already (a replay) returns that
// container. With regs nil it creates nothing: it returns the containers
// the plan made.
func (p *Provider) Launch(ctx context.Context, pl provider.Plan, regs []provider.Registration) (provider.Result, error) {
	var pn plan
	if err := provider.BeginLaunch(ctx, pl, &pn, "container", regs, func() (bool, int) { return pn.Token != "" && pn.Settings.Image != "", len(pn.Runners) }); err != nil {
		return provider.Result{}, err
	}
	res := provider.Result{Runners: make([]provider.Launched, len(pn.Runners))}
	if regs != nil {
		if err := p.pull(ctx, pn.Settings); err != nil {
			return res, err
		}
		pn.RunnerVersion = p.imageVersion(ctx, pn.Settings.Image)
	}
	room := p.room(ctx, pn)
	for i, r := range pn.Runners {
		var in provider.Instance
		var err error
		if regs == nil {
			in, err = p.find(ctx, Name(pn.Token, r.Name))
		} else {
			in, err = p.launchOne(ctx, pn, r, regs[i], &room)
		}
		if err != nil {
			res.Runners[i].Err = err
			continue
		}
		res.Runners[i].Instance = in
	}
	return res, res.Err()
}

// room is what the host's ceiling leaves for new runners.
type room struct {
	nanoCPUs, memory int64
	gpus             int
	err              error
}

// room reads the limits of the runners alive (one list) against the ceiling.
func (p *Provider) room(ctx context.Context, pn plan) room {
	c := p.o.Ceiling
	if c == (Ceiling{}) {
		return room{nanoCPUs: -1, memory: -1, gpus: -1}
	}
	items, err := p.listRaw(ctx, "")
	if err != nil {
		return room{err: err}
	}
	r := room{nanoCPUs: c.NanoCPUs, memory: c.MemoryBytes, gpus: c.GPUs}
	for _, s := range items {
		if s.State != container.StateRunning && s.State != container.StateCreated {
			continue
		}
		var l pool.ContainerLimits
		_ = json.Unmarshal([]byte(s.Labels[LabelLimits]), &l)
		r.take(l)
	}
	return r
}

// take takes a runner's limits out of the room (fits ignores the bounds
// the ceiling does not set).
func (r *room) take(l pool.ContainerLimits) {
	n, _ := strconv.Atoi(l.GPUs)
	r.nanoCPUs -= l.NanoCPUs
	r.memory -= l.MemoryBytes
	r.gpus -= n
}

// fits reports whether a runner of limits l fits in the room.
func (r room) fits(l pool.ContainerLimits, c Ceiling) bool {
	n, _ := strconv.Atoi(l.GPUs)
	return (c.NanoCPUs == 0 || l.NanoCPUs <= r.nanoCPUs) && (c.MemoryBytes == 0 || l.MemoryBytes <= r.memory) &&
		(c.GPUs == 0 || n <= r.gpus)
}

// pull pulls the pool's image as its policy says: once per provider for
// missing (when the engine lacks it), before every launch for always.
func (p *Provider) pull(ctx context.Context, c pool.Container) error {
	p.mu.Lock()
	done := p.pulled[c.Image]
	p.mu.Unlock()
	if c.Pull == pool.ContainerPullNever || done && c.Pull != pool.ContainerPullAlways {
		return nil
	}
	if c.Pull != pool.ContainerPullAlways {
		if img, err := p.o.Engine.ImageInspect(ctx, c.Image); err == nil {
			p.mu.Lock()
			p.pulled[c.Image] = true
			p.versions[c.Image] = labelVersion(img.Config)
			p.mu.Unlock()
			return nil
		}
	}
	resp, err := p.o.Engine.ImagePull(ctx, c.Image, client.ImagePullOptions{})
	if err == nil {
		err = resp.Wait(ctx)
		_ = resp.Close()
	}
	if err != nil {
		return classify("pulling image "+c.Image, c.Image, err)
	}
	p.forgetVersion(c.Image)
	p.mu.Lock()
	p.pulled[c.Image] = true
	p.mu.Unlock()
	return nil
}

// Prepare pulls the images of the pools ahead of their first job.
func (p *Provider) Prepare(ctx context.Context, cs []*pool.Container) error {
	var errs []error
	for _, c := range cs {
		if c != nil && c.Image != "" {
			if err := p.pull(ctx, *c); err != nil {
				errs = append(errs, err)
				continue
			}
			if c.Pull != pool.ContainerPullNever {
				p.imageVersion(ctx, c.Image) // read now: the first launch pays no inspect
			}
		}
	}
	return errors.Join(errs...)
}

// launchOne creates and starts one runner's container.
func (p *Provider) launchOne(ctx context.Context, pn plan, r provider.RunnerRequest, reg provider.Registration, rm *room) (provider.Instance, error) {
	if reg.Mode != provider.ModeJIT || reg.JITConfig == "" {
		return provider.Instance{}, provider.Invalid("NotJIT", "the container provider runs just-in-time registered runners only")
	}
	name := Name(pn.Token, r.Name)
	log := p.o.Logger.With("pool", pn.Pool, "container", name, "job_id", r.JobID, "runner_name", r.Name)
	// A replay finds the name taken at create (409); only a launch the
	// ceiling refuses looks first, since its container may be there.
	if rm.err != nil || !rm.fits(pn.Limits, p.o.Ceiling) {
		if in, err := p.find(ctx, name); err == nil {
			log.Info("the runner's container exists already (a replay)")
			return in, nil
		}
		if rm.err != nil {
			return provider.Instance{}, rm.err
		}
		return provider.Instance{}, &provider.Error{Kind: provider.ErrCapacity, Code: "HostFull",
			Message: fmt.Sprintf("this host's ceiling for runners is taken (asked %s)", pn.Limits)}
	}
	dir := filepath.Join(p.o.Dir, name)
	if err := writeDir(dir, reg.JITConfig); err != nil {
		return provider.Instance{}, &provider.Error{Kind: provider.ErrTransient, Code: "Registration", Message: "writing the runner's registration: " + err.Error()}
	}
	cleanup := func() { // a runner that could not start leaves nothing
		_ = p.remove(context.WithoutCancel(ctx), name)
		_ = os.RemoveAll(dir)
	}
	netMode := container.NetworkMode("host")
	if pn.Settings.Network != pool.ContainerNetworkHost {
		_, err := p.o.Engine.NetworkCreate(ctx, name, client.NetworkCreateOptions{Driver: "bridge",
			Labels: map[string]string{LabelManaged: "true", LabelDeployment: p.o.Deployment}})
		if err != nil && !taken(err) {
			cleanup()
			return provider.Instance{}, classify("creating network "+name, pn.Settings.Image, err)
		}
		netMode = container.NetworkMode(name)
	}
	cfg, hc := p.spec(pn, r, name, dir, netMode)
	_, err := p.o.Engine.ContainerCreate(ctx, client.ContainerCreateOptions{Name: name, Config: cfg, HostConfig: hc})
	if taken(err) {
		in, ferr := p.find(ctx, name)
		if ferr != nil { // not ours after all: the engine's words misled
			cleanup()
			return provider.Instance{}, classify("creating container "+name, pn.Settings.Image, err)
		}
		log.Info("the runner's container exists already (a replay)")
		return in, nil
	}
	if err != nil {
		cleanup()
		return provider.Instance{}, classify("creating container "+name, pn.Settings.Image, err)
	}
	if _, err := p.o.Engine.ContainerStart(ctx, name, client.ContainerStartOptions{}); err != nil {
		cleanup()
		return provider.Instance{}, classify("starting container "+name, pn.Settings.Image, err)
	}
	rm.take(pn.Limits)
	log.Info("launched a runner container", "lifetime", pn.Lifetime.String(), "limits", pn.Limits.String(), "registration", reg)
	now := p.o.Now().UTC()
	return provider.Instance{ID: name, Pool: pn.Pool, InstanceType: instanceType(pn.Limits), Zone: zone(p.o.Host),
		Capacity: provider.OnDemand, State: provider.Running, LaunchedAt: now, Tags: tags(pn, r, p.o.Deployment)}, nil
}

// taken reports whether a create failed because the name is taken: a 409
// from Docker, a 500 saying so from Podman.
func taken(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	return cerrdefs.IsConflict(err) || cerrdefs.IsAlreadyExists(err) ||
		strings.Contains(msg, "name") && (strings.Contains(msg, "already in use") || strings.Contains(msg, "already exists") || strings.Contains(msg, "already used"))
}

// writeDir makes a runner's directory: 0700 and skiff's, holding the JIT
// file (readable in the container by its user: the directory keeps every
// other account out on the host) and the usage directory the entrypoint
// writes.
func writeDir(dir, jit string) error {
	if err := os.MkdirAll(filepath.Join(dir, "usage"), 0o700); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return err
	}
	if err := os.Chmod(filepath.Join(dir, "usage"), 0o777); err != nil { // the runner's user writes it
		return err
	}
	return os.WriteFile(filepath.Join(dir, "jitconfig"), []byte(jit), 0o444)
}

// spec is a runner's container configuration.
func (p *Provider) spec(pn plan, r provider.RunnerRequest, name, dir string, net container.NetworkMode) (*container.Config, *container.HostConfig) {
	s, l := pn.Settings, pn.Limits
	tagJSON, _ := json.Marshal(tags(pn, r, p.o.Deployment)) // a map of strings always encodes
	limJSON, _ := json.Marshal(l)
	env := append([]string{EnvJITConfigFile + "=" + JITFile, EnvTerminationLog + "=" + UsageFile, EnvInstanceID + "=" + name,
		"SKIFF_CGROUP_ROOT=/sys/fs/cgroup", provider.EnvDeprecatedExitCode + "=1"}, p.o.Env...)
	cfg := &container.Config{
		Image: s.Image, Env: env, User: s.User, Hostname: name,
		Labels: map[string]string{LabelManaged: "true", LabelDeployment: p.o.Deployment, LabelPool: pn.Pool, LabelToken: pn.Token,
			LabelRunner: r.Name, LabelTags: string(tagJSON), LabelLimits: string(limJSON), LabelLifetime: pn.Lifetime.String()},
	}
	pids := l.Pids
	hc := &container.HostConfig{
		NetworkMode:    net,
		Privileged:     false,
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges"},
		ReadonlyRootfs: true,
		Tmpfs:          map[string]string{"/tmp": "rw,nosuid,nodev,exec,mode=1777"},
		Binds: []string{filepath.Join(dir, "jitconfig") + ":" + JITFile + ":ro",
			filepath.Join(dir, "usage") + ":" + UsageDir + ":rw"},
		Mounts: []mount.Mount{{Type: mount.TypeVolume, Target: RunnerHome}},
		Resources: container.Resources{
			NanoCPUs: l.NanoCPUs, Memory: l.MemoryBytes, PidsLimit: &pids,
		},
	}
	if l.MemoryBytes > 0 {
		hc.MemorySwap = l.MemoryBytes // no swap: a runner above its memory is OOM-killed, as on Kubernetes
	}
	if l.DiskGiB > 0 {
		hc.StorageOpt = map[string]string{"size": strconv.Itoa(l.DiskGiB) + "G"}
	}
	for _, m := range s.Mounts {
		hc.Binds = append(hc.Binds, m.Source+":"+m.Target+":ro")
	}
	if l.GPUs != "" {
		if s.GPUMode == pool.ContainerGPURequest {
			n := -1
			if l.GPUs != "all" {
				n, _ = strconv.Atoi(l.GPUs)
			}
			hc.DeviceRequests = []container.DeviceRequest{{Driver: "nvidia", Count: n, Capabilities: [][]string{{"gpu"}}}}
		} else {
			hc.Devices = cdiDevices(l.GPUs)
		}
	}
	return cfg, hc
}

// cdiDevices are the CDI device names of n GPUs ("all" or a count).
func cdiDevices(n string) []container.DeviceMapping {
	if n == "all" {
		return []container.DeviceMapping{{PathOnHost: "nvidia.com/gpu=all"}}
	}
	k, _ := strconv.Atoi(n)
	out := make([]container.DeviceMapping, 0, k)
	for i := range k {
		out = append(out, container.DeviceMapping{PathOnHost: "nvidia.com/gpu=" + strconv.Itoa(i)})
	}
	return out
}

// tags are a runner's instance tags.
func tags(pn plan, r provider.RunnerRequest, deployment string) map[string]string {
	t := r.Tags(pn.Pool, pn.Token)
	if deployment != "" {
		t[names.TagDeployment] = deployment
	}
	if pn.RunnerVersion != "" {
		t[names.TagRunnerVersion] = pn.RunnerVersion
	}
	return t
}

// instanceType names a runner's size, e.g. "container --cpus=2 --memory=8Gi".
func instanceType(l pool.ContainerLimits) string {
	return strings.TrimSpace("container " + l.String())
}

// zone is the host as an instance's zone.
func zone(host string) string {
	if host == "" {
		host, _ = os.Hostname()
	}
	if host == "" {
		return "local"
	}
	return host
}

// find returns a runner's container by name (one inspect): a capacity
// error "not launched" when there is none.
func (p *Provider) find(ctx context.Context, name string) (provider.Instance, error) {
	got, err := p.o.Engine.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return provider.Instance{}, &provider.Error{Kind: provider.ErrCapacity, Code: "NotLaunched", Message: "this runner was not launched"}
	}
	if err != nil {
		return provider.Instance{}, classify("inspecting container "+name, "", err)
	}
	c := got.Container
	if c.Config == nil || c.Config.Labels[LabelManaged] != "true" || c.Config.Labels[LabelDeployment] != p.o.Deployment {
		return provider.Instance{}, provider.Invalid("NotSkiffs", "container "+name+" is not this deployment's")
	}
	st := container.ContainerState("")
	if c.State != nil {
		st = c.State.Status
	}
	return p.instance(name, c.Config.Labels, st, created(c.Created)), nil
}

// created parses an inspect's creation time.
func created(s string) time.Time {
	t, _ := time.Parse(time.RFC3339Nano, s)
	return t.UTC()
}

// instance is a container as the provider reports it.
func (p *Provider) instance(name string, labels map[string]string, st container.ContainerState, at time.Time) provider.Instance {
	var l pool.ContainerLimits
	_ = json.Unmarshal([]byte(labels[LabelLimits]), &l)
	in := provider.Instance{ID: name, Pool: labels[LabelPool], InstanceType: instanceType(l), Zone: zone(p.o.Host),
		Capacity: provider.OnDemand, State: state(st), LaunchedAt: at, Tags: map[string]string{}}
	if in.LaunchedAt.IsZero() {
		in.LaunchedAt = p.o.Now().UTC()
	}
	_ = json.Unmarshal([]byte(labels[LabelTags]), &in.Tags)
	return in
}

// state maps an engine's container state to the neutral one.
func state(s container.ContainerState) provider.State {
	switch s {
	case container.StateCreated:
		return provider.Pending
	case container.StateRunning, container.StatePaused, container.StateRestarting:
		return provider.Running
	case container.StateRemoving:
		return provider.Stopping
	}
	return provider.Terminated // exited, dead
}

// listRaw is one label-filtered list of the deployment's containers
// (pool "" for all pools).
func (p *Provider) listRaw(ctx context.Context, poolName string) ([]container.Summary, error) {
	f := client.Filters{}.Add("label", LabelManaged+"=true", LabelDeployment+"="+p.o.Deployment)
	if poolName != "" {
		f.Add("label", LabelPool+"="+poolName)
	}
	res, err := p.o.Engine.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return nil, classify("listing containers", "", err)
	}
	return res.Items, nil
}

// List implements provider.Provider: one list of the deployment's
// containers. A container that has ended is inspected once (exit code,
// OOM), its usage read, and removed with its network and directory; it
// stays listed, terminated, for Retain. A runner past its lifetime is
// removed.
func (p *Provider) List(ctx context.Context, f provider.Filter) ([]provider.Instance, error) {
	if err := ctx.Err(); err != nil {
		return nil, provider.Canceled(err)
	}
	items, err := p.listRaw(ctx, f.Pool)
	if err != nil {
		return nil, err
	}
	now := p.o.Now()
	var out []provider.Instance
	seen := map[string]bool{}
	for _, s := range items {
		name := containerName(s)
		if name == "" {
			continue
		}
		in := p.instance(name, s.Labels, s.State, time.Unix(s.Created, 0).UTC())
		switch in.State {
		case provider.Terminated:
			in = p.end(ctx, name, in)
		case provider.Pending, provider.Running:
			p.mu.Lock()
			p.running[name] = now
			p.mu.Unlock()
			if lt := lifetimeOf(s.Labels); lt > 0 && now.Sub(in.LaunchedAt) > lt {
				p.o.Logger.Warn("a runner outlived its pool's lifetime; removing it", "container", name)
				in = p.kill(ctx, name, in, "LifetimeExceeded")
			}
		}
		seen[name] = true
		out = append(out, in)
	}
	p.mu.Lock()
	for id, e := range p.ended {
		if now.Sub(e.at) > p.o.Retain {
			delete(p.ended, id)
			continue
		}
		if !seen[id] && (f.Pool == "" || e.in.Pool == f.Pool) {
			out = append(out, e.in.Clone())
		}
	}
	for id, at := range p.running {
		if now.Sub(at) > p.o.Retain {
			delete(p.running, id)
		}
	}
	p.mu.Unlock()
	return slices.DeleteFunc(out, func(in provider.Instance) bool {
		return len(f.IDs) > 0 && !slices.Contains(f.IDs, in.ID) || f.Pool != "" && in.Pool != f.Pool || f.AliveOnly && !in.State.Alive()
	}), nil
}

// lifetimeOf is a container's lifetime from its tags' plan, 0 unknown.
func lifetimeOf(labels map[string]string) time.Duration {
	d, _ := time.ParseDuration(labels[LabelLifetime])
	return d
}

// containerName is a listed container's name without the engine's "/".
func containerName(s container.Summary) string {
	for _, n := range s.Names {
		n = strings.TrimPrefix(n, "/")
		if strings.HasPrefix(n, "skiff-") {
			return n
		}
	}
	return ""
}

// oomMargin: a peak within 1/oomMargin of the limit (5 %) is at the limit;
// the kernel reclaims caches before it kills, so the peak sits just under.
const oomMargin = 20

// Terminate implements provider.Provider: a forced remove of each
// container, its volumes, network and directory. An id gone or not
// skiff's is left alone.
func (p *Provider) Terminate(ctx context.Context, ids []string) error {
	if err := ctx.Err(); err != nil {
		return provider.Canceled(err)
	}
	var errs []error
	for _, id := range ids {
		if !strings.HasPrefix(id, "skiff-") {
			continue
		}
		in, err := p.find(ctx, id)
		if errors.Is(err, provider.ErrCapacity) || errors.Is(err, provider.ErrInvalid) {
			continue // gone, or not this deployment's
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := p.remove(ctx, id); err != nil {
			errs = append(errs, err)
			continue
		}
		p.keepRemoved(id, in, "Terminated")
		p.o.Logger.Info("removed a runner container", "instance_id", id)
	}
	return errors.Join(errs...)
}

// remove removes a runner's container (forced, with its volumes) and its
// network; gone is done.
func (p *Provider) remove(ctx context.Context, name string) error {
	_, err := p.o.Engine.ContainerRemove(ctx, name, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return classify("removing container "+name, "", err)
	}
	_, err = p.o.Engine.NetworkRemove(ctx, name, client.NetworkRemoveOptions{})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return classify("removing network "+name, "", err)
	}
	return nil
}
