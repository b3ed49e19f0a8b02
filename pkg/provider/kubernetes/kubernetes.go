// Package kubernetes is the compute provider that runs each runner as one
// Pod on a Kubernetes cluster, through client-go.
//
// A runner is two objects, created in this order:
//
//	Pod    skiff-<hash>      restartPolicy Never, activeDeadlineSeconds = the
//	                         pool's lifetime, labels skiff/managed, skiff/pool,
//	                         skiff/token, skiff/runner (and skiff/api-server
//	                         for a pool with apiServerAccess); skiff's tags in
//	                         the annotation skiff/tags
//	Secret skiff-<hash>-jit  the JIT configuration, owned by the Pod
//	                         (ownerReference), mounted read-only as the file
//	                         /run/skiff/jit/jitconfig
//
// The registration is never in the Pod's spec or environment (whoever may
// read Pods would read it); the runner container's entrypoint
// (cmd/skiff-podhelper) reads the file named by SKIFF_JITCONFIG_FILE. The
// kubelet waits for the Secret before it starts the container, which is
// why the Pod can come first, and the Secret needs the Pod's uid to be
// owned by it. Deleting the Pod lets the cluster's garbage collector
// remove the Secret; Terminate deletes both, so that nothing depends on it.
//
// The names derive from the launch token and the runner's name, so a
// replayed Create finds AlreadyExists and returns the Pod the first launch
// made: a launch costs two API calls per runner, a replay one or two.
//
// A Pod's life, as List reports it:
//
//	Pending ──(bound, started)──► Running ──(the runner exits)──► Succeeded ─┐
//	   │  Unschedulable: pending, QueueReason the scheduler's message      ├─► terminated
//	   └──(deadline, eviction, a failed start)─────────────────► Failed ───┘
//	any phase ──(Terminate: Delete)──► stopping (deletionTimestamp) ──► gone
//
// A Pod the scheduler cannot place waits in the cluster's own queue: it is
// not a failed boot, and the pool's queueTimeout bounds it; the boot
// timeout counts from when it was bound (Instance.RunningSince).
//
// The launch spec's kubernetes part (the pool's kubernetes: section) says
// what the Pod looks like; a pool without one (skiff local running an
// EC2 pools file) takes Options.Default.
//
// List makes one label-selected List per runner namespace (paginated with
// continue tokens) and removes Pods that ended more than Options.Retain
// ago, with their Secrets.
//
// PrePull (prepull.go) keeps each pool's runner image on the nodes its
// runners may use: a DaemonSet per pool whose Pods run the image's
// entrypoint holding (SKIFF_PODHELPER_HOLD), made to match the pools file.
//
// Errors are classified in errors.go: RBAC's Forbidden and Invalid are final
// with the API server's message, an exhausted ResourceQuota is a quota to
// wait out, 429 is throttling, 5xx and lost answers are transient.
package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/skiffci/skiff/pkg/metrics"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provider"
)

// Labels and annotations of skiff's Pods and Secrets.
const (
	LabelManaged = "skiff/managed"
	LabelPool    = "skiff/pool"
	LabelToken   = "skiff/token"
	LabelRunner  = "skiff/runner"
	// LabelDeployment names the deployment that launched the Pod
	// (Options.Deployment): List selects on it.
	LabelDeployment = "skiff/deployment"
	// LabelAPIServer (value "true") marks the Pods of a pool with
	// apiServerAccess: infra/kubernetes/networkpolicy.yaml lets only
	// these reach the API server.
	LabelAPIServer = "skiff/api-server"
	// AnnotationTags holds the instance's tags (names.Tag*) as a JSON
	// object: their keys and values are not valid label syntax.
	AnnotationTags = "skiff/tags"
	// FinalizerUsage keeps a deleted runner Pod until List has read how it
	// ended: a Pod deleted while its runner still ran (the reconciler ends
	// a runner whose job completed) keeps its final status, and with it the
	// termination message, until skiff has read it.
	FinalizerUsage = "skiff/usage"
)

// FinalizerSlack is how long after its grace period a deleted Pod that
// never reports an end (its node is gone) keeps the finalizer.
const FinalizerSlack = 2 * time.Minute

// The runner container's contract with its entrypoint.
const (
	// ContainerName is the runner container's name.
	ContainerName = "runner"
	// JITDir is where the Secret is mounted; JITFile is the file in it.
	JITDir  = "/run/skiff/jit"
	JITFile = JITDir + "/" + secretKey
	// EnvJITConfigFile names the file holding the JIT configuration.
	EnvJITConfigFile = "SKIFF_JITCONFIG_FILE"
	// EnvInstanceID is the runner's instance id (namespace/pod).
	EnvInstanceID = "SKIFF_INSTANCE_ID"
	secretKey     = "jitconfig"
)

// Defaults of Options.
const (
	// DefaultLifetime caps a runner whose pool sets no MaxLifetime: GitHub's
	// default job timeout (timeout-minutes) is 360 minutes.
	DefaultLifetime = pool.DefaultMaxLifetime
	// DefaultPageSize is the List page size: 500 Pods is about 2 MB of
	// JSON, the size kubectl pages by.
	DefaultPageSize = 500
	// DefaultRetain is how long an ended Pod stays (and is listed): long
	// enough for the reconciler's next passes and the usage record to read
	// how it ended.
	DefaultRetain = provider.DefaultRetain
	// DefaultNamespace is the namespace of a pool that names none.
	DefaultNamespace = "default"
)

// Options configures a Provider.
type Options struct {
	// Client talks to the API server (a kubeconfig's, or in-cluster). Required.
	Client kubernetes.Interface
	// Namespaces are the runner namespaces List reads and Terminate acts
	// in: every pool's kubernetes.namespace (Namespaces of the pools
	// file). Default's namespace is added.
	Namespaces []string
	// Default is the Pod settings of a launch whose spec has no
	// kubernetes part (skiff local's --kube-image and --kube-namespace);
	// nil refuses such a launch. It needs a namespace and an image.
	Default *pool.Kubernetes
	// DefaultLifetime caps a runner whose spec has no MaxLifetime (default DefaultLifetime).
	DefaultLifetime time.Duration
	// PageSize is how many Pods one List page holds (default DefaultPageSize).
	PageSize int64
	// Retain is how long an ended Pod stays before List removes it (default DefaultRetain).
	Retain time.Duration
	// Logger gets the provider's logs (default slog.Default()).
	Logger *slog.Logger
	// Now is the clock of retention (default time.Now).
	Now func() time.Time
	// Deployment names the skiff deployment (names.ValidDeployment): every
	// Pod carries it (LabelDeployment, and names.TagDeployment among its
	// tags), and List selects only Pods carrying it, so that two
	// deployments sharing a namespace never list, and so never end, each
	// other's runners. Empty: Pods are not labelled and List sees every
	// skiff Pod.
	Deployment string
}

// Provider runs runners as Pods. It keeps no state of its own: the API
// server holds everything, so any number of skiff processes may share a
// cluster, and a restart loses nothing. It is safe for concurrent use.
type Provider struct {
	o          Options
	namespaces []string

	// usage holds what List read of ended runners' termination messages,
	// for the metrics records (Peaks), until their Pods are removed.
	mu    sync.Mutex
	usage map[string]measured
	// running are the runners List last saw alive, and when: their usage
	// is still to come (UsagePending).
	running map[string]time.Time
}

// measured is one ended runner's peaks and when List first read them.
type measured struct {
	peaks *metrics.Peaks
	at    time.Time
}

var _ provider.Provider = (*Provider)(nil)

// New returns a provider, or an error naming what is missing.
func New(o Options) (*Provider, error) {
	var errs []error
	if o.Client == nil {
		errs = append(errs, errors.New("kubernetes provider: Client is required"))
	}
	if o.Deployment != "" && !names.ValidDeployment(o.Deployment) {
		errs = append(errs, fmt.Errorf("kubernetes provider: deployment %q is not 1 to %d letters, digits and hyphens starting with a letter",
			o.Deployment, names.MaxDeploymentLen))
	}
	ns := map[string]bool{}
	for _, n := range o.Namespaces {
		if n == "" {
			errs = append(errs, errors.New("kubernetes provider: a runner namespace is empty"))
		}
		ns[n] = true
	}
	if d := o.Default; d != nil {
		if d.Namespace == "" || d.Image == "" {
			errs = append(errs, errors.New("kubernetes provider: the default pod settings need a namespace and an image"))
		}
		ns[d.Namespace] = true
	}
	if len(ns) == 0 {
		errs = append(errs, errors.New("kubernetes provider: no runner namespace (no pool has a kubernetes: section, and no default)"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if o.PageSize <= 0 {
		o.PageSize = DefaultPageSize
	}
	if o.Retain <= 0 {
		o.Retain = DefaultRetain
	}
	provider.FillDefaults(&o.DefaultLifetime, &o.Logger, &o.Now)
	p := &Provider{o: o, usage: map[string]measured{}, running: map[string]time.Time{}}
	for n := range ns {
		p.namespaces = append(p.namespaces, n)
	}
	sort.Strings(p.namespaces)
	return p, nil
}

// Name implements provider.Provider.
func (p *Provider) Name() string { return "kubernetes" }

// Capabilities implements provider.Provider: the Kubernetes backend's
// declared ones (sizes as requests and limits, GPUs as an extended
// resource, replay by deterministic names, the scheduler's queue, usage
// from the termination message).
func (p *Provider) Capabilities() provider.Capabilities {
	return pool.Declared[pool.BackendKubernetes]
}

// Namespaces are the namespaces the provider lists: its pools'.
func (p *Provider) Namespaces() []string { return slices.Clone(p.namespaces) }

// plan is a launch as stored: the pool's settings resolved, so that a
// replay after a restart builds the same Pods.
type plan struct {
	Token     string                      `json:"token"`
	Pool      string                      `json:"pool"`
	Settings  pool.Kubernetes             `json:"settings"`
	Resources corev1.ResourceRequirements `json:"resources"`
	Lifetime  time.Duration               `json:"lifetime"`
	Runners   []provider.RunnerRequest    `json:"runners"`
}

// Plan implements provider.Provider. It refuses, as a final ErrInvalid, a
// spec without a kubernetes part (and no Default), a namespace the
// provider does not list, a pool without an image and a quantity that
// does not parse.
func (p *Provider) Plan(_ context.Context, l provider.Launch) (provider.Plan, error) {
	k, err := provider.SpecPart(l, l.Spec.Kubernetes, p.o.Default, "kubernetes")
	if err != nil {
		return "", err
	}
	settings := *k
	switch {
	case settings.Image == "":
		return "", provider.Invalid("NoImage", fmt.Sprintf("pool %s has no runner image", l.Spec.Pool))
	case !slices.Contains(p.namespaces, settings.Namespace):
		return "", provider.Invalid("UnknownNamespace", fmt.Sprintf("pool %s: namespace %q is not one of the provider's runner namespaces %v",
			l.Spec.Pool, settings.Namespace, p.namespaces))
	}
	res, err := resources(&settings, l.Spec.Sizes)
	if err != nil {
		return "", provider.Invalid("BadQuantity", fmt.Sprintf("pool %s: %v", l.Spec.Pool, err))
	}
	lifetime := l.Lifetime(p.o.DefaultLifetime)
	b, err := json.Marshal(plan{Token: l.Token, Pool: l.Spec.Pool, Settings: settings, Resources: res, Lifetime: lifetime, Runners: l.Runners})
	if err != nil {
		return "", fmt.Errorf("encoding plan: %w", err)
	}
	return provider.Plan(b), nil
}

// PodName is the Pod of one runner of a launch: the same token and runner
// always give the same name (DNS-1123, 26 characters).
func PodName(token, runner string) string { return provider.LaunchName(token, runner) }

// SecretName is the Secret holding the JIT configuration of a runner's Pod.
func SecretName(pod string) string { return pod + "-jit" }

// Launch implements provider.Provider: per runner a Pod, then its Secret
// owned by it. A Pod that exists already (a replay) is returned as it is,
// and a Secret that exists already is taken as delivered. A runner whose
// Secret cannot be created has its Pod deleted and gets the error. With
// regs nil it creates nothing: it returns the Pods the plan made, and
// deletes (as not launched) any whose Secret is missing, since that Pod
// could never start.
func (p *Provider) Launch(ctx context.Context, pl provider.Plan, regs []provider.Registration) (provider.Result, error) {
	var pn plan
	if err := provider.BeginLaunch(ctx, pl, &pn, "kubernetes", regs, func() (bool, int) { return pn.Token != "" && pn.Settings.Image != "", len(pn.Runners) }); err != nil {
		return provider.Result{}, err
	}
	res := provider.Result{Runners: make([]provider.Launched, len(pn.Runners))}
	for i, r := range pn.Runners {
		var in provider.Instance
		var err error
		if regs == nil {
			in, err = p.find(ctx, pn, r)
		} else {
			in, err = p.launchOne(ctx, pn, i, r, regs[i])
		}
		if err != nil {
			res.Runners[i].Err = err
			continue
		}
		res.Runners[i].Instance = in
	}
	return res, res.Err()
}

// launchOne creates one runner's Pod and Secret (two API calls; three when
// the Pod exists already).
func (p *Provider) launchOne(ctx context.Context, pn plan, i int, r provider.RunnerRequest, reg provider.Registration) (provider.Instance, error) {
	if reg.Mode != provider.ModeJIT || reg.JITConfig == "" {
		return provider.Instance{}, provider.Invalid("NotJIT", "the kubernetes provider runs just-in-time registered runners only")
	}
	ns := pn.Settings.Namespace
	pod := buildPod(pn, i, r, p.o.Deployment)
	log := p.o.Logger.With("pool", pn.Pool, "namespace", ns, "pod", pod.Name, "job_id", r.JobID, "runner_name", r.Name)
	pods := p.o.Client.CoreV1().Pods(ns)
	got, err := pods.Create(ctx, pod, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		got, err = pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err == nil {
			log.Info("the runner's pod exists already (a replay)")
		}
	}
	if err != nil {
		return provider.Instance{}, classify("creating pod "+ns+"/"+pod.Name, err)
	}
	sec := buildSecret(got, reg)
	_, err = p.o.Client.CoreV1().Secrets(ns).Create(ctx, sec, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		perr := classify("creating secret "+ns+"/"+sec.Name, err)
		// Without its Secret the Pod could never start: it goes.
		if derr := p.deletePod(context.WithoutCancel(ctx), ns, got.Name); derr != nil {
			log.Error("deleting the pod whose secret failed", "err", derr)
		}
		return provider.Instance{}, perr
	}
	log.Info("launched a runner pod", "lifetime", pn.Lifetime.String(), "registration", reg)
	return instance(got, p.o.Now()), nil
}

// find returns the Pod a plan's runner got, for a replay without
// registrations: one Get of the Pod and one of its Secret.
func (p *Provider) find(ctx context.Context, pn plan, r provider.RunnerRequest) (provider.Instance, error) {
	ns, name := pn.Settings.Namespace, PodName(pn.Token, r.Name)
	notLaunched := &provider.Error{Kind: provider.ErrCapacity, Code: "NotLaunched", Message: "this runner was not launched"}
	got, err := p.o.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return provider.Instance{}, notLaunched
	case err != nil:
		return provider.Instance{}, classify("reading pod "+ns+"/"+name, err)
	}
	_, err = p.o.Client.CoreV1().Secrets(ns).Get(ctx, SecretName(name), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		p.o.Logger.Warn("a replayed runner's pod has no registration; deleting it", "namespace", ns, "pod", name)
		if derr := p.deletePod(ctx, ns, name); derr != nil {
			return provider.Instance{}, derr
		}
		return provider.Instance{}, notLaunched
	case err != nil:
		return provider.Instance{}, classify("reading secret "+ns+"/"+SecretName(name), err)
	}
	return instance(got, p.o.Now()), nil
}

// List implements provider.Provider: one List per runner namespace, by
// label, page by page. Pods that ended more than Retain ago are deleted
// (with their Secrets) and left out.
func (p *Provider) List(ctx context.Context, f provider.Filter) ([]provider.Instance, error) {
	if err := ctx.Err(); err != nil {
		return nil, provider.Canceled(err)
	}
	sel := LabelManaged + "=true"
	if p.o.Deployment != "" {
		sel += "," + LabelDeployment + "=" + labelValue(p.o.Deployment)
	}
	if f.Pool != "" {
		sel += "," + LabelPool + "=" + labelValue(f.Pool)
	}
	now := p.o.Now()
	var out []provider.Instance
	var final []error
	for _, ns := range p.namespaces {
		opts := metav1.ListOptions{LabelSelector: sel, Limit: p.o.PageSize}
		for {
			page, err := p.o.Client.CoreV1().Pods(ns).List(ctx, opts)
			if err != nil {
				return nil, classify("listing pods in "+ns, err)
			}
			for i := range page.Items {
				pod := &page.Items[i]
				in := instance(pod, now)
				switch in.State {
				case provider.Terminated:
					p.keepUsage(in.ID, pod, now)
				case provider.Pending, provider.Running:
					p.mu.Lock()
					p.running[in.ID] = now
					p.mu.Unlock()
				}
				if releasable(pod, now) {
					if err := p.release(ctx, pod); err != nil {
						p.o.Logger.Warn("releasing a deleted runner pod", "namespace", ns, "pod", pod.Name, "err", err)
						if provider.Permanent(err) {
							final = append(final, err)
						}
					}
				}
				if ended := endedAt(pod); !ended.IsZero() && now.Sub(ended) > p.o.Retain && pod.DeletionTimestamp == nil {
					if err := p.deletePod(ctx, ns, pod.Name); err != nil {
						p.o.Logger.Warn("removing an ended runner pod", "namespace", ns, "pod", pod.Name, "err", err)
					}
					continue
				}
				if len(f.IDs) > 0 && !slices.Contains(f.IDs, in.ID) || f.Pool != "" && in.Pool != f.Pool || f.AliveOnly && !in.State.Alive() {
					continue
				}
				out = append(out, in)
			}
			if page.Continue == "" {
				break
			}
			opts.Continue = page.Continue
		}
	}
	p.pruneUsage(now)
	if len(final) > 0 {
		// Without patch on pods, deleted Pods would stay forever.
		return out, final[0]
	}
	return out, nil
}

// releasable reports whether a deleted Pod's finalizer may go: it has
// ended (List has just read its usage), it was never bound (no runner ran),
// or its grace period and FinalizerSlack are over (its node is gone).
func releasable(pod *corev1.Pod, now time.Time) bool {
	if pod.DeletionTimestamp == nil || !slices.Contains(pod.Finalizers, FinalizerUsage) {
		return false
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed || pod.Spec.NodeName == "" {
		return true
	}
	grace := time.Duration(0)
	if pod.DeletionGracePeriodSeconds != nil {
		grace = time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
	}
	return now.Sub(pod.DeletionTimestamp.Time) > grace+FinalizerSlack
}

// release removes skiff's finalizer from a deleted Pod (one JSON patch,
// which fails if the finalizers changed meanwhile), so that it goes.
func (p *Provider) release(ctx context.Context, pod *corev1.Pod) error {
	keep := slices.DeleteFunc(slices.Clone(pod.Finalizers), func(f string) bool { return f == FinalizerUsage })
	patch, _ := json.Marshal([]map[string]any{ // strings and string lists always encode
		{"op": "test", "path": "/metadata/finalizers", "value": pod.Finalizers},
		{"op": "replace", "path": "/metadata/finalizers", "value": keep},
	})
	_, err := p.o.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.JSONPatchType, patch, metav1.PatchOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return classify("releasing pod "+pod.Namespace+"/"+pod.Name, err)
	}
	p.mu.Lock()
	delete(p.running, pod.Namespace+"/"+pod.Name)
	p.mu.Unlock()
	return nil
}

// Terminate implements provider.Provider: it deletes each Pod and its
// Secret. A Pod or Secret already gone is done, and an id that cannot be
// skiff's (not namespace/skiff-..., or outside the pools' namespaces) is
// left alone: neither is an error. It tries every id and returns the
// errors of those it could not delete.
func (p *Provider) Terminate(ctx context.Context, ids []string) error {
	if err := ctx.Err(); err != nil {
		return provider.Canceled(err)
	}
	var errs []error
	for _, id := range ids {
		ns, name, ok := strings.Cut(id, "/")
		if !ok || !strings.HasPrefix(name, "skiff-") || !slices.Contains(p.namespaces, ns) {
			continue
		}
		if err := p.deletePod(ctx, ns, name); err != nil {
			errs = append(errs, err)
			continue
		}
		p.o.Logger.Info("deleted a runner pod", "instance_id", id)
	}
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}

// deletePod deletes a runner's Pod and its Secret; NotFound is done.
func (p *Provider) deletePod(ctx context.Context, ns, name string) error {
	bg := metav1.DeletePropagationBackground
	err := p.o.Client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &bg})
	if err != nil && !apierrors.IsNotFound(err) {
		return classify("deleting pod "+ns+"/"+name, err)
	}
	err = p.o.Client.CoreV1().Secrets(ns).Delete(ctx, SecretName(name), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return classify("deleting secret "+ns+"/"+SecretName(name), err)
	}
	return nil
}
