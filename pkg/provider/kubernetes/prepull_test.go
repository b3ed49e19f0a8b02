package kubernetes_test

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/skiffci/skiff/pkg/pool"
	kube "github.com/skiffci/skiff/pkg/provider/kubernetes"
)

// TestPrePull is the image pre-pull on the real API server, as the Role of
// infra/kubernetes grants it: a DaemonSet per pool whose Pods run the
// pool's image holding (no runner, no token, tiny requests) where the
// pool's runners may run; unchanged pools cost no write; a new image
// updates the template (the cluster rolls the Pods, pulling it); a pool
// removed from the file loses its DaemonSet; another deployment's is left
// alone. No kubelet runs here: what the API server holds is what is
// checked, not a pulled image.
func TestPrePull(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true, func(o *kube.Options) { o.Deployment = "lab" })
	ctx := context.Background()
	gpu := &pool.Kubernetes{Namespace: e.ns, Image: image, NodeSelector: map[string]string{"gpu": "l4"},
		Tolerations: []pool.Toleration{{Key: "nvidia.com/gpu", Operator: "Exists", Effect: "NoSchedule"}}, SecurityContext: pool.SecurityContext{RunAsNonRoot: true}}
	cfg := &pool.Config{Pools: []*pool.Pool{{Name: "cpu", Kubernetes: e.sections["cpu"]}, {Name: "gpu", Kubernetes: gpu}}}
	// Another deployment's pre-pull in the same namespace.
	other := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: kube.PrePullName("other", "cpu"), Namespace: e.ns,
		Labels: map[string]string{kube.LabelManaged: "true", kube.LabelPrePull: "true", kube.LabelDeployment: "other"}},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"x": "y"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"x": "y"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: image}}}}}}
	if _, err := e.k.admin.AppsV1().DaemonSets(e.ns).Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	if err := e.p.PrePull(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	got := e.prePulls(t)
	if len(got) != 2 {
		t.Fatalf("pre-pulls %v, want cpu and gpu", keysOf(got))
	}
	for name, want := range map[string]*pool.Kubernetes{"cpu": e.sections["cpu"], "gpu": gpu} {
		ds := got[kube.PrePullName("lab", name)]
		if ds == nil {
			t.Fatalf("pool %s has no pre-pull DaemonSet %s: %v", name, kube.PrePullName("lab", name), keysOf(got))
		}
		checkPrePull(t, name, ds, want)
	}
	e.calls.Take()

	// Unchanged: reads only.
	if err := e.p.PrePull(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	for call := range e.calls.Take() {
		if !strings.HasPrefix(call, "GET ") {
			t.Errorf("an unchanged pre-pull wrote: %s", call)
		}
	}

	// A new image: the template is updated.
	cpu := *e.sections["cpu"]
	cpu.Image = "ghcr.io/skiffci/runner:v2"
	cfg.Pools[0].Kubernetes = &cpu
	if err := e.p.PrePull(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	got = e.prePulls(t)
	checkPrePull(t, "cpu", got[kube.PrePullName("lab", "cpu")], &cpu)

	// The gpu pool removed: its pre-pull goes; the other deployment's stays.
	cfg.Pools = cfg.Pools[:1]
	if err := e.p.PrePull(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	got = e.prePulls(t)
	if _, ok := got[kube.PrePullName("lab", "gpu")]; ok || len(got) != 1 {
		t.Errorf("after the gpu pool went: pre-pulls %v, want cpu's alone", keysOf(got))
	}
	if _, err := e.k.admin.AppsV1().DaemonSets(e.ns).Get(ctx, other.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("another deployment's pre-pull: %v, want it left alone", err)
	}
}

// checkPrePull fails t unless ds keeps image of s where the pool's runners
// run, holding, with nothing of a runner's reach.
func checkPrePull(t *testing.T, name string, ds *appsv1.DaemonSet, s *pool.Kubernetes) {
	t.Helper()
	spec := ds.Spec.Template.Spec
	if len(spec.Containers) != 1 || len(spec.InitContainers) != 0 {
		t.Fatalf("pool %s's pre-pull has containers %+v, want one", name, spec.Containers)
	}
	c := spec.Containers[0]
	if c.Image != s.Image || !slices.Contains(c.Env, corev1.EnvVar{Name: kube.EnvHold, Value: "1"}) {
		t.Errorf("pool %s's pre-pull runs %s with %v; want %s holding", name, c.Image, c.Env, s.Image)
	}
	if ds.Labels[kube.LabelPool] != name || ds.Labels[kube.LabelDeployment] != "lab" || ds.Namespace != s.Namespace {
		t.Errorf("pool %s's pre-pull is %s/%s labelled %v", name, ds.Namespace, ds.Name, ds.Labels)
	}
	if !maps.Equal(spec.NodeSelector, s.NodeSelector) || len(spec.Tolerations) != len(s.Tolerations) {
		t.Errorf("pool %s's pre-pull runs on %v tolerating %v; want the pool's %v, %v", name, spec.NodeSelector, spec.Tolerations, s.NodeSelector, s.Tolerations)
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken || len(spec.Volumes) != 0 {
		t.Errorf("pool %s's pre-pull mounts a token or volumes: %v %v", name, spec.AutomountServiceAccountToken, spec.Volumes)
	}
	csc := c.SecurityContext
	if csc == nil || csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation || csc.Privileged != nil && *csc.Privileged ||
		csc.Capabilities == nil || !slices.Equal(csc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("pool %s's pre-pull container's security context %+v, want no privilege, every capability dropped", name, csc)
	}
	if c.Resources.Requests.Cpu().MilliValue() > 10 || c.Resources.Limits.Memory().Value() > 64<<20 {
		t.Errorf("pool %s's pre-pull asks %v, limits %v: want next to nothing", name, c.Resources.Requests, c.Resources.Limits)
	}
}

// prePulls are the namespace's pre-pull DaemonSets, by name.
func (e *env) prePulls(t *testing.T) map[string]*appsv1.DaemonSet {
	t.Helper()
	list, err := e.k.admin.AppsV1().DaemonSets(e.ns).List(context.Background(), metav1.ListOptions{LabelSelector: kube.LabelDeployment + "=lab"})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*appsv1.DaemonSet{}
	for i := range list.Items {
		out[list.Items[i].Name] = &list.Items[i]
	}
	return out
}

func keysOf[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
