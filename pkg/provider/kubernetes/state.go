package kubernetes

// What a Pod says of its runner: state, end reason, times and type.

import (
	"encoding/json"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/provider"
)

// instance is a Pod as the provider reports it.
func instance(pod *corev1.Pod, now time.Time) provider.Instance {
	in := provider.Instance{
		ID: pod.Namespace + "/" + pod.Name, Pool: pod.Labels[LabelPool], InstanceType: instanceType(pod), Zone: pod.Namespace,
		Capacity: provider.OnDemand, LaunchedAt: pod.CreationTimestamp.UTC(), Tags: map[string]string{},
	}
	if in.LaunchedAt.IsZero() {
		in.LaunchedAt = now.UTC()
	}
	_ = json.Unmarshal([]byte(pod.Annotations[AnnotationTags]), &in.Tags)
	if p := in.Tags[names.TagPool]; p != "" {
		in.Pool = p // the label may be a hash of a long name
	}
	in.State, in.QueueReason = state(pod)
	in.RunningSince = boundAt(pod)
	if outdated(pod) {
		in.Tags[names.TagRunnerOutdated] = "unknown"
	}
	return in
}

// outdated reports whether the Pod's runner ended with the deprecation exit
// code: GitHub refused its version (the image's runner).
func outdated(pod *corev1.Pod) bool {
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == ContainerName && cs.State.Terminated != nil && cs.State.Terminated.ExitCode == provider.ExitVersionDeprecated {
			return true
		}
	}
	return false
}

// state maps a Pod's phase to the neutral state and, for a Pod the
// scheduler could not place (PodScheduled False: Unschedulable, or a
// scheduling gate), the scheduler's reason and message: it waits in the
// cluster's queue. A Pod bound and starting (pulling its image, waiting
// for its Secret) is booting and has no queue reason.
func state(pod *corev1.Pod) (provider.State, string) {
	switch pod.Status.Phase {
	case corev1.PodSucceeded, corev1.PodFailed:
		return provider.Terminated, ""
	}
	if pod.DeletionTimestamp != nil {
		return provider.Stopping, ""
	}
	switch pod.Status.Phase {
	case corev1.PodRunning, corev1.PodUnknown: // Unknown: the node is unreachable, the runner may still run
		return provider.Running, ""
	}
	if pod.Spec.NodeName == "" {
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
				return provider.Pending, join(c.Reason, c.Message)
			}
		}
	}
	return provider.Pending, ""
}

// boundAt is when a Pod left the scheduler's queue: when it was bound to a
// node (its PodScheduled condition turned true). Every Pod passes through
// that queue, so the boot timeout counts from it; zero while unbound.
func boundAt(pod *corev1.Pod) time.Time {
	if pod.Spec.NodeName == "" {
		return time.Time{}
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.UTC()
		}
	}
	return time.Time{}
}

// EndReason is how an ended Pod ended, in the API's words (Evicted: The
// node was low on resource: memory.; DeadlineExceeded: ...); "" for a
// Pod that has not ended or ended without a reason (its runner exited).
func EndReason(pod *corev1.Pod) string {
	if pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
		return ""
	}
	return join(pod.Status.Reason, pod.Status.Message)
}

func join(reason, msg string) string {
	switch {
	case reason == "":
		return msg
	case msg == "":
		return reason
	}
	return reason + ": " + msg
}

// endedAt is when a Pod's runner ended (its container's finish, else its
// last condition's change), zero while it has not.
func endedAt(pod *corev1.Pod) time.Time {
	if pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
		return time.Time{}
	}
	var t time.Time
	for _, cs := range pod.Status.ContainerStatuses {
		if term := cs.State.Terminated; term != nil && term.FinishedAt.Time.After(t) {
			t = term.FinishedAt.Time
		}
	}
	for _, c := range pod.Status.Conditions {
		if c.LastTransitionTime.Time.After(t) {
			t = c.LastTransitionTime.Time
		}
	}
	if t.IsZero() {
		t = pod.CreationTimestamp.Time
	}
	return t
}

// instanceType names a Pod's size by its runner container's requests, e.g.
// "pod cpu=2 memory=8Gi nvidia.com/gpu=1"; "pod" without requests.
func instanceType(pod *corev1.Pod) string {
	parts := []string{"pod"}
	for _, c := range pod.Spec.Containers {
		if c.Name != ContainerName {
			continue
		}
		var keys []string
		for k := range c.Resources.Requests {
			keys = append(keys, string(k))
		}
		sort.Strings(keys)
		for _, k := range keys {
			q := c.Resources.Requests[corev1.ResourceName(k)]
			parts = append(parts, k+"="+q.String())
		}
	}
	return strings.Join(parts, " ")
}
