package kubernetes

// What a runner used, from its Pod's termination message.

import (
	"context"
	"errors"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/skiffci/skiff/pkg/metrics"
	"github.com/skiffci/skiff/pkg/metrics/fromusage"
	"github.com/skiffci/skiff/pkg/provider/podusage"
)

// Usage reads what a runner's container used from its Pod's status: the
// termination message cmd/skiff-podhelper wrote when the runner exited.
// ok is false while the runner runs, for a Pod gone, and for an image
// without the helper (err says why).
func (p *Provider) Usage(ctx context.Context, id string) (u podusage.Usage, ok bool, err error) {
	ns, name, found := strings.Cut(id, "/")
	if !found {
		return podusage.Usage{}, false, nil
	}
	pod, err := p.o.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return podusage.Usage{}, false, nil
	case err != nil:
		return podusage.Usage{}, false, classify("reading pod "+id, err)
	}
	return UsageOf(pod)
}

// UsageOf decodes a Pod's runner container's termination message.
func UsageOf(pod *corev1.Pod) (podusage.Usage, bool, error) {
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != ContainerName || cs.State.Terminated == nil {
			continue
		}
		if cs.State.Terminated.Message == "" {
			return podusage.Usage{}, false, errors.New("the runner container left no termination message (an image without skiff-podhelper?)")
		}
		u, err := podusage.Decode(cs.State.Terminated.Message)
		return u, err == nil, err
	}
	return podusage.Usage{}, false, nil
}

// Peaks implements writer.UsageSource: what an ended runner's container
// used, from the termination message List read of its Pod (the Pod may be
// deleted by then). false for a runner still running, one List has not
// seen end, and an image without skiff-podhelper.
func (p *Provider) Peaks(id string) (*metrics.Peaks, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	m, ok := p.usage[id]
	return m.peaks, ok && m.peaks != nil
}

// keepUsage reads an ended Pod's termination message once, for Peaks.
func (p *Provider) keepUsage(id string, pod *corev1.Pod, now time.Time) {
	p.mu.Lock()
	_, seen := p.usage[id]
	p.mu.Unlock()
	if seen {
		return
	}
	u, ok, err := UsageOf(pod)
	m := measured{at: now}
	switch {
	case err != nil:
		p.o.Logger.Warn("an ended runner's usage is unreadable", "instance_id", id, "err", err)
	case ok:
		m.peaks = PeaksOf(u, pod)
	}
	p.mu.Lock()
	p.usage[id] = m
	delete(p.running, id)
	p.mu.Unlock()
}

// pruneUsage forgets the usage of runners that ended more than Retain ago:
// the reconciler has written their records by then.
func (p *Provider) pruneUsage(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, m := range p.usage {
		if now.Sub(m.at) > p.o.Retain {
			delete(p.usage, id)
		}
	}
	for id, at := range p.running {
		if now.Sub(at) > p.o.Retain {
			delete(p.running, id)
		}
	}
}

// UsagePending implements writer.PendingUsage: the runner was alive at
// the last List that saw it, so its termination message is still to come
// (its job may complete a moment before its runner exits, and a Pod
// deleted meanwhile keeps its final status under FinalizerUsage). It stops
// being pending when List reads the end, or releases a Pod that never
// reported one.
func (p *Provider) UsagePending(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.running[id]
	return ok
}

// PeaksOf is a metrics record's peaks from a runner's usage, its memory
// as a percentage of the runner container's memory limit where it has one.
func PeaksOf(u podusage.Usage, pod *corev1.Pod) *metrics.Peaks {
	var limit int64
	for _, c := range pod.Spec.Containers {
		if lim, ok := c.Resources.Limits[corev1.ResourceMemory]; c.Name == ContainerName && ok {
			limit = lim.Value()
		}
	}
	return fromusage.Peaks(u, limit)
}
