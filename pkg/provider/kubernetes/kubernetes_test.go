package kubernetes_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provider"
	kube "github.com/skiffci/skiff/pkg/provider/kubernetes"
	"github.com/skiffci/skiff/pkg/provider/podusage"
	"github.com/skiffci/skiff/pkg/provider/providertest"
)

const image = "ghcr.io/skiffci/runner:test"

// env is one provider on a namespace of its own, authenticated as the user
// bound to infra/kubernetes' Role.
type env struct {
	k     *cluster
	ns    string
	p     *kube.Provider
	calls *calls
	logs  *testenv.SyncBuffer
	// sections are the pools' kubernetes: sections, as a pools file gives them.
	sections map[string]*pool.Kubernetes
}

func newEnv(t *testing.T, bind bool, edit func(*kube.Options)) *env {
	t.Helper()
	var role *rbacv1.Role
	if bind {
		role = runnerRole(t)
	}
	return newEnvRole(t, role, edit)
}

// newEnvWithRole is an env whose user is bound to role instead of the file's.
func newEnvWithRole(t *testing.T, role *rbacv1.Role) *env {
	t.Helper()
	return newEnvRole(t, role, nil)
}

func newEnvRole(t *testing.T, role *rbacv1.Role, edit func(*kube.Options)) *env {
	t.Helper()
	k := newCluster(t)
	ns := k.namespaceWith(t, role)
	client, n := clientFor(t, k.c, testenv.KubeUser)
	logs := &testenv.SyncBuffer{}
	o := kube.Options{Client: client, Namespaces: []string{ns}, Logger: slog.New(slog.NewJSONHandler(logs, nil))}
	if edit != nil {
		edit(&o)
	}
	p, err := kube.New(o)
	if err != nil {
		t.Fatal(err)
	}
	nonRoot := pool.SecurityContext{RunAsNonRoot: true}
	return &env{k: k, ns: ns, p: p, calls: n, logs: logs, sections: map[string]*pool.Kubernetes{
		"conformance": {Namespace: ns, Image: image, SecurityContext: nonRoot},
		"cpu": {Namespace: ns, Image: image, Requests: pool.Resources{CPU: "1", Memory: "2Gi"}, Limits: pool.Resources{Memory: "4Gi"},
			SecurityContext: nonRoot},
	}}
}

// spec is a launch spec of pool name with its kubernetes: section.
func (e *env) spec(name string) pool.Spec {
	s := pool.Spec{Kubernetes: e.sections[name]}
	s.Pool, s.Backend, s.MaxLifetime = name, pool.BackendKubernetes, time.Hour
	return s
}

func TestConformance(t *testing.T) {
	t.Parallel()
	providertest.Run(t, func(t *testing.T) providertest.Harness {
		e := newEnv(t, true, nil)
		return providertest.Harness{
			Provider: e.p,
			Spec:     e.spec("conformance"),
			Backend:  pool.BackendKubernetes,
			Delivered: func(id string) (provider.Registration, bool) {
				return e.delivered(t, id)
			},
			Logs: e.logs.String,
			CapacityTestedElsewhere: "a cluster with no room for a Pod holds it Unschedulable and never refuses its creation: " +
				"TestStates lists such a Pod pending with the scheduler's message",
			QueueTestedElsewhere: "the API server's scheduler is the test's own: TestStates holds a Pod Unschedulable " +
				"with the scheduler's message, then binds it and checks it left the queue (RunningSince)",
		}
	})
}

// delivered reads a runner's registration as its container would: the
// Secret its Pod mounts, and the runner's name from the Pod.
func (e *env) delivered(t *testing.T, id string) (provider.Registration, bool) {
	t.Helper()
	ns, name, _ := strings.Cut(id, "/")
	ctx := context.Background()
	pod, err := e.k.admin.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return provider.Registration{}, false
	}
	var secret string
	for _, v := range pod.Spec.Volumes {
		if v.Secret != nil {
			secret = v.Secret.SecretName
		}
	}
	s, err := e.k.admin.CoreV1().Secrets(ns).Get(ctx, secret, metav1.GetOptions{})
	if err != nil {
		return provider.Registration{}, false
	}
	var tags map[string]string
	_ = json.Unmarshal([]byte(pod.Annotations[kube.AnnotationTags]), &tags)
	return provider.Registration{Mode: provider.ModeJIT, JITConfig: string(s.Data["jitconfig"]), RunnerName: tags[names.TagRunnerName]}, true
}

// launchOf is a launch of n runners of pool spec s under token, each with
// a canary JIT configuration.
func launchOf(s pool.Spec, token string, n int) (provider.Launch, []provider.Registration) {
	l := provider.Launch{Token: token, Spec: s}
	var regs []provider.Registration
	for i := range n {
		name := token + "-" + string(rune('a'+i))
		l.Runners = append(l.Runners, provider.RunnerRequest{Name: name, JobID: int64(10 + i), RunID: 3, Repository: "acme/app", Owner: "acme"})
		regs = append(regs, provider.Registration{Mode: provider.ModeJIT, JITConfig: "CANARYJIT-" + name, RunnerName: name})
	}
	return l, regs
}

// launch launches launchOf(s, token, n) with p, failing t on an error of
// the launch as a whole; a runner's own error is in the Result.
func launch(t *testing.T, p provider.Provider, s pool.Spec, token string, n int) provider.Result {
	t.Helper()
	l, regs := launchOf(s, token, n)
	_, res := providertest.PlanAndLaunch(t, p, l, regs)
	return res
}

// TestPodShape: the Pod and its Secret as the API server stored them.
func TestPodShape(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true, nil)
	s := e.spec("cpu")
	s.Sizes = pool.Sizes{VCPU: 4, MemoryGiB: 8, GPUs: 1}
	res := launch(t, e.p, s, "tok-shape", 1)
	if res.Runners[0].Err != nil {
		t.Fatalf("Launch: %+v", res)
	}
	in := res.Runners[0].Instance
	ns, name, _ := strings.Cut(in.ID, "/")
	if ns != e.ns || name != kube.PodName("tok-shape", "tok-shape-a") || in.State != provider.Pending {
		t.Errorf("instance %+v: want pending pod %s/%s", in, e.ns, kube.PodName("tok-shape", "tok-shape-a"))
	}
	ctx := context.Background()
	pod, err := e.k.admin.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	js, _ := json.Marshal(pod)
	if strings.Contains(string(js), "CANARYJIT") {
		t.Error("the JIT configuration is in the Pod")
	}
	sp := pod.Spec
	if sp.RestartPolicy != corev1.RestartPolicyNever || sp.ActiveDeadlineSeconds == nil || *sp.ActiveDeadlineSeconds != 3600 {
		t.Errorf("restartPolicy %s, activeDeadlineSeconds %v: want Never and 3600", sp.RestartPolicy, sp.ActiveDeadlineSeconds)
	}
	if sp.AutomountServiceAccountToken == nil || *sp.AutomountServiceAccountToken {
		t.Error("the service account token is mounted")
	}
	if psc := sp.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != kube.DefaultUser {
		t.Errorf("pod security context %+v: want non-root user %d", sp.SecurityContext, kube.DefaultUser)
	}
	c := sp.Containers[0]
	checkRunnerContainer(t, c)
	if pod.Labels[kube.LabelPool] != "cpu" || pod.Labels[kube.LabelToken] != "tok-shape" || pod.Labels[kube.LabelRunner] != "tok-shape-a" {
		t.Errorf("labels %v", pod.Labels)
	}
	sec, err := e.k.admin.CoreV1().Secrets(ns).Get(ctx, kube.SecretName(name), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(sec.Data["jitconfig"]) != "CANARYJIT-tok-shape-a" {
		t.Errorf("secret holds %q", sec.Data["jitconfig"])
	}
	if len(sec.OwnerReferences) != 1 || sec.OwnerReferences[0].Kind != "Pod" || sec.OwnerReferences[0].UID != pod.UID || sec.OwnerReferences[0].Name != pod.Name {
		t.Errorf("secret owner %+v, want the pod %s (%s)", sec.OwnerReferences, pod.Name, pod.UID)
	}
	if strings.Contains(e.logs.String(), "CANARYJIT") {
		t.Error("the JIT configuration reached the log")
	}

	if !slices.Equal(pod.Finalizers, []string{kube.FinalizerUsage}) {
		t.Errorf("finalizers %v, want %s", pod.Finalizers, kube.FinalizerUsage)
	}

	// Terminate deletes both (no garbage collector runs here); the next
	// List takes the finalizer off the Pod, which never ran.
	if err := e.p.Terminate(ctx, []string{in.ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.p.List(ctx, provider.Filter{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.k.admin.CoreV1().Secrets(ns).Get(ctx, kube.SecretName(name), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the secret after Terminate: %v, want NotFound", err)
	}
	if _, err := e.k.admin.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the pod after Terminate: %v, want NotFound", err)
	}
}

// checkRunnerContainer fails t unless c, the runner's container of a pool
// of 4 CPUs, 8 GiB and a GPU, cannot escalate privileges, asks for and is
// limited to what the pool asked for, and reads its JIT file from the
// read-only mount.
func checkRunnerContainer(t *testing.T, c corev1.Container) {
	t.Helper()
	if csc := c.SecurityContext; csc == nil || csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation || csc.Privileged != nil {
		t.Errorf("container security context %+v: want no privilege escalation", c.SecurityContext)
	}
	want := map[corev1.ResourceName]string{"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"}
	for r, q := range want {
		if got := c.Resources.Requests[r]; got.Cmp(resource.MustParse(q)) != 0 {
			t.Errorf("request %s = %s, want %s", r, got.String(), q)
		}
	}
	if got := c.Resources.Limits[corev1.ResourceMemory]; got.Cmp(resource.MustParse("8Gi")) != 0 {
		t.Errorf("memory limit %s: the pool's 4Gi should rise to the 8Gi asked for", got.String())
	}
	if got := c.Resources.Limits["nvidia.com/gpu"]; got.Cmp(resource.MustParse("1")) != 0 {
		t.Errorf("gpu limit %s, want 1", got.String())
	}
	var envFile string
	for _, v := range c.Env {
		if v.Name == kube.EnvJITConfigFile {
			envFile = v.Value
		}
	}
	if envFile != kube.JITFile || len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != kube.JITDir || !c.VolumeMounts[0].ReadOnly {
		t.Errorf("the JIT file %q, mounts %+v: want %s mounted read-only", envFile, c.VolumeMounts, kube.JITFile)
	}
}

// TestAPICalls: two calls per runner launched, one per List page.
func TestAPICalls(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true, func(o *kube.Options) { o.PageSize = 2 })
	e.calls.Take()
	res := launch(t, e.p, e.spec("cpu"), "tok-calls", 5)
	if got := e.calls.Take(); got["POST pods"] != 5 || got["POST secrets"] != 5 || len(got) != 2 {
		t.Errorf("launching 5 runners made %v, want 5 POST pods and 5 POST secrets", got)
	}
	all, err := e.p.List(context.Background(), provider.Filter{Pool: "cpu"})
	if err != nil || len(all) != 5 {
		t.Fatalf("List = %d instances, %v; want 5", len(all), err)
	}
	if got := e.calls.Take(); got["GET pods"] != 3 || len(got) != 1 {
		t.Errorf("listing 5 pods by pages of 2 made %v, want 3 GET pods", got)
	}
	// A replay with the registrations finds the Pods: nothing new.
	again := launch(t, e.p, e.spec("cpu"), "tok-calls", 5)
	for i := range res.Runners {
		if again.Runners[i].Err != nil || again.Runners[i].Instance.ID != res.Runners[i].Instance.ID {
			t.Errorf("replay runner %d: %+v, want %s", i, again.Runners[i], res.Runners[i].Instance.ID)
		}
	}
	if all, _ := e.p.List(context.Background(), provider.Filter{Pool: "cpu"}); len(all) != 5 {
		t.Errorf("%d pods after a replay, want 5", len(all))
	}
}

// setStatus writes a Pod's status as a kubelet or the scheduler would.
func (e *env) setStatus(t *testing.T, id string, edit func(*corev1.PodStatus)) {
	t.Helper()
	ns, name, _ := strings.Cut(id, "/")
	ctx := context.Background()
	pod, err := e.k.admin.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	edit(&pod.Status)
	if _, err := e.k.admin.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestStates: each phase as the provider lists it. A Pod the scheduler
// cannot place is pending with its message as the queue reason; bound, it
// has left the queue (RunningSince); an ended Pod says how it ended.
func TestStates(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true, nil)
	res := launch(t, e.p, e.spec("cpu"), "tok-states", 6)
	id := func(i int) string { return res.Runners[i].Instance.ID }
	now := metav1.Now()
	const unschedulable = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
	e.setStatus(t, id(0), func(s *corev1.PodStatus) {
		s.Phase = corev1.PodPending
		s.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable",
			Message: unschedulable, LastTransitionTime: now}}
	})
	e.bind(t, id(1), "node-a")
	e.setStatus(t, id(1), func(s *corev1.PodStatus) { s.Phase = corev1.PodRunning })
	e.setStatus(t, id(2), func(s *corev1.PodStatus) { s.Phase = corev1.PodSucceeded })
	e.setStatus(t, id(3), func(s *corev1.PodStatus) {
		s.Phase, s.Reason, s.Message = corev1.PodFailed, "Evicted", "The node was low on resource: memory."
	})
	e.setStatus(t, id(4), func(s *corev1.PodStatus) {
		s.Phase, s.Reason, s.Message = corev1.PodFailed, "DeadlineExceeded", "Pod was active on the node longer than the specified deadline"
	})
	// Bound but not started (pulling its image): booting, not queued.
	e.bind(t, id(5), "node-a")
	want := []struct {
		state  provider.State
		queue  string
		bound  bool
		ending string
	}{
		{provider.Pending, "Unschedulable: " + unschedulable, false, ""},
		{provider.Running, "", true, ""},
		{provider.Terminated, "", false, ""},
		{provider.Terminated, "", false, "Evicted: The node was low on resource: memory."},
		{provider.Terminated, "", false, "DeadlineExceeded: Pod was active on the node longer than the specified deadline"},
		{provider.Pending, "", true, ""},
	}
	by := providertest.ListByID(t, e.p, provider.Filter{})
	for i, w := range want {
		in := by[id(i)]
		if in.State != w.state || in.QueueReason != w.queue || in.RunningSince.IsZero() == w.bound {
			t.Errorf("pod %d: %s, queue reason %q, running since %v; want %s, %q, bound %v", i, in.State, in.QueueReason, in.RunningSince,
				w.state, w.queue, w.bound)
		}
		if got := kube.EndReason(e.pod(t, id(i))); got != w.ending {
			t.Errorf("pod %d ended %q, want %q", i, got, w.ending)
		}
	}
	alive, _ := e.p.List(context.Background(), provider.Filter{AliveOnly: true})
	if len(alive) != 3 {
		t.Errorf("%d alive, want the unschedulable, the running and the starting pod", len(alive))
	}
	// The scheduler places the waiting Pod: it leaves the queue.
	e.bind(t, id(0), "node-b")
	got, err := e.p.List(context.Background(), provider.Filter{IDs: []string{id(0)}})
	if err != nil || len(got) != 1 || got[0].QueueReason != "" || got[0].RunningSince.IsZero() || got[0].State != provider.Pending {
		t.Errorf("the pod once bound: %+v, %v; want pending, no queue reason, running since its binding", got, err)
	}
}

// pod reads a Pod as the admin.
func (e *env) pod(t *testing.T, id string) *corev1.Pod {
	t.Helper()
	ns, name, _ := strings.Cut(id, "/")
	pod, err := e.k.admin.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

// bind binds a Pod to a node as the scheduler does (the binding
// subresource, which sets its PodScheduled condition).
func (e *env) bind(t *testing.T, id, node string) {
	t.Helper()
	ns, name, _ := strings.Cut(id, "/")
	b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Target: corev1.ObjectReference{Kind: "Node", Name: node}}
	if err := e.k.admin.CoreV1().Pods(ns).Bind(context.Background(), b, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestQuotaWaits: a launch beyond the namespace's ResourceQuota is a
// retryable quota error, and launches once the quota's usage falls.
func TestQuotaWaits(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true, nil)
	ctx := context.Background()
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "runners"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("1")}}}
	q, err := e.k.admin.CoreV1().ResourceQuotas(e.ns).Create(ctx, q, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// No quota controller runs here: write its usage as it would.
	used := func(n string) {
		t.Helper()
		cur, err := e.k.admin.CoreV1().ResourceQuotas(e.ns).Get(ctx, q.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Status = corev1.ResourceQuotaStatus{Hard: cur.Spec.Hard, Used: corev1.ResourceList{corev1.ResourcePods: resource.MustParse(n)}}
		if _, err := e.k.admin.CoreV1().ResourceQuotas(e.ns).UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	used("0")
	res := launch(t, e.p, e.spec("cpu"), "tok-quota", 2)
	if res.Runners[0].Err != nil {
		t.Fatalf("runner 0: %v", res.Runners[0].Err)
	}
	qerr := res.Runners[1].Err
	if !errors.Is(qerr, provider.ErrQuota) || provider.Permanent(qerr) || !strings.Contains(qerr.Error(), "exceeded quota") {
		t.Fatalf("runner 1: %v, want a retryable ErrQuota with the API's message", qerr)
	}
	if alive, _ := e.p.List(ctx, provider.Filter{}); len(alive) != 1 {
		t.Errorf("%d pods, want 1", len(alive))
	}
	// The first runner ends and the quota controller counts again.
	if err := e.p.Terminate(ctx, []string{res.Runners[0].Instance.ID}); err != nil {
		t.Fatal(err)
	}
	used("0")
	// The quota admission reads the quota from the API server's cache: it
	// may refuse once more until the cache has the new usage, as skiff's
	// waiting room would see it. A launch of one runner refused says so as
	// a whole, too (Result.Err), so the refusal is read from either.
	l, regs := launchOf(e.spec("cpu"), "tok-quota-2", 1)
	plan, err := e.p.Plan(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	var rerr error
	testenv.Await(t, "a launch after the quota freed", 10*time.Millisecond, func() bool {
		rerr = launchErr(e.p.Launch(ctx, plan, regs))
		if rerr != nil && !errors.Is(rerr, provider.ErrQuota) {
			t.Fatalf("launch after the quota freed: %v", rerr)
		}
		return rerr == nil
	}, func() string { return fmt.Sprint(rerr) })
}

// TestWithoutRole: a namespace where skiff's user has no Role binding
// refuses clearly, and finally.
func TestWithoutRole(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false, nil)
	l, regs := launchOf(e.spec("cpu"), "tok-norole", 1)
	plan, err := e.p.Plan(context.Background(), l)
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.p.Launch(context.Background(), plan, regs)
	if !errors.Is(err, provider.ErrInvalid) || !provider.Permanent(err) || !strings.Contains(err.Error(), "forbidden") ||
		!strings.Contains(provider.Detail(err), "Role") {
		t.Errorf("Launch without the Role: %v (detail %q), want a final ErrInvalid naming the Role", err, provider.Detail(err))
	}
	_, err = e.p.List(context.Background(), provider.Filter{})
	if !errors.Is(err, provider.ErrInvalid) || !strings.Contains(err.Error(), `cannot list resource "pods"`) {
		t.Errorf("List without the Role: %v", err)
	}
}

// TestPlanInvalid: a spec without a kubernetes part and no default, an
// image missing, a namespace the provider does not list, a quantity that
// does not parse; and New without a client or a namespace.
func TestPlanInvalid(t *testing.T) {
	t.Parallel()
	p, err := kube.New(kube.Options{Client: fakeClient(), Namespaces: []string{"runners"}})
	if err != nil {
		t.Fatal(err)
	}
	for name, k := range map[string]*pool.Kubernetes{
		"no-section":      nil,
		"no-image":        {Namespace: "runners"},
		"other-namespace": {Namespace: "kube-system", Image: image},
		"bad-quantity":    {Namespace: "runners", Image: image, Requests: pool.Resources{CPU: "two"}},
	} {
		s := pool.Spec{Kubernetes: k}
		s.Pool = name
		_, err := p.Plan(context.Background(), provider.Launch{Token: "t", Spec: s, Runners: []provider.RunnerRequest{{Name: "r"}}})
		if !errors.Is(err, provider.ErrInvalid) || !provider.Permanent(err) {
			t.Errorf("Plan(%s) = %v, want a final ErrInvalid", name, err)
		}
	}
	if _, err := kube.New(kube.Options{}); err == nil || !strings.Contains(err.Error(), "Client") || !strings.Contains(err.Error(), "no runner namespace") {
		t.Errorf("New without client and namespace: %v", err)
	}
	if _, err := kube.New(kube.Options{Client: fakeClient(), Default: &pool.Kubernetes{Namespace: "runners"}}); err == nil ||
		!strings.Contains(err.Error(), "an image") {
		t.Errorf("New with a default without an image: %v", err)
	}
}

// fakeClient is a client of nothing, for what needs no API server.
func fakeClient() *kubernetes.Clientset {
	return kubernetes.NewForConfigOrDie(&rest.Config{Host: "http://127.0.0.1:1"})
}

// TestTerminateLeavesOthersAlone: ids that cannot be skiff's Pods cost no
// call; a runner's id is deleted (here: tried, and the unreachable API
// server is a transient error).
func TestTerminateLeavesOthersAlone(t *testing.T) {
	t.Parallel()
	p, err := kube.New(kube.Options{Client: fakeClient(), Namespaces: []string{"default"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Terminate(context.Background(), []string{"kube-system/skiff-0123", "default/coredns", "skiff-0123", ""}); err != nil {
		t.Errorf("Terminate(not skiff's) = %v, want nothing done", err)
	}
	if err := p.Terminate(context.Background(), []string{"default/skiff-0123"}); !errors.Is(err, provider.ErrTransient) {
		t.Errorf("Terminate(a runner, no API server) = %v, want ErrTransient", err)
	}
}

// TestRoleIsExactlyWhatIsUsed: with the Role of infra/kubernetes a
// runner's whole life works (launch, replay with and without its
// registration, list, terminate, the finalizer's release, and its pool's
// image pre-pull created, updated and removed); with any one of its verbs taken
// away, that life fails with the API's refusal of exactly that verb: the
// Role grants nothing the provider does not use.
func TestRoleIsExactlyWhatIsUsed(t *testing.T) {
	t.Parallel()
	full := runnerRole(t)
	type grant struct{ resource, verb string }
	var grants []grant
	for _, r := range full.Rules {
		for _, res := range r.Resources {
			for _, v := range r.Verbs {
				grants = append(grants, grant{res, v})
			}
		}
	}
	life := func(e *env) error {
		ctx := context.Background()
		s := e.spec("cpu")
		l := provider.Launch{Token: "tok-life", Spec: s, Runners: []provider.RunnerRequest{{Name: "life-a", JobID: 1}}}
		regs := []provider.Registration{{Mode: provider.ModeJIT, JITConfig: "CANARYJIT-life", RunnerName: "life-a"}}
		plan, err := e.p.Plan(ctx, l)
		if err != nil {
			return err
		}
		steps := []func() error{
			func() error { return launchErr(e.p.Launch(ctx, plan, regs)) },
			func() error { return launchErr(e.p.Launch(ctx, plan, regs)) }, // AlreadyExists: the Pod is read
			func() error { return launchErr(e.p.Launch(ctx, plan, nil)) },  // a replay: Pod and Secret are read
			func() error { _, err := e.p.List(ctx, provider.Filter{}); return err },
			func() error { return e.p.Terminate(ctx, []string{e.ns + "/" + kube.PodName("tok-life", "life-a")}) },
			func() error { _, err := e.p.List(ctx, provider.Filter{}); return err }, // the deleted Pod's finalizer goes
			// The image pre-pull: created, updated for a new image, removed with its pool.
			func() error {
				return e.p.PrePull(ctx, &pool.Config{Pools: []*pool.Pool{{Name: "cpu", Kubernetes: s.Kubernetes}}})
			},
			func() error {
				k := *s.Kubernetes
				k.Image += "-next"
				return e.p.PrePull(ctx, &pool.Config{Pools: []*pool.Pool{{Name: "cpu", Kubernetes: &k}}})
			},
			func() error { return e.p.PrePull(ctx, &pool.Config{}) },
		}
		for _, step := range steps {
			if err := step(); err != nil {
				return err
			}
		}
		return nil
	}
	t.Run("the whole Role", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, true, nil)
		if err := life(e); err != nil {
			t.Fatalf("a runner's life with the Role: %v", err)
		}
	})
	for _, g := range grants {
		t.Run("without "+g.verb+" "+g.resource, func(t *testing.T) {
			t.Parallel()
			role := full.DeepCopy()
			for i, r := range role.Rules {
				if slices.Contains(r.Resources, g.resource) {
					role.Rules[i].Verbs = slices.DeleteFunc(slices.Clone(r.Verbs), func(v string) bool { return v == g.verb })
				}
			}
			e := newEnvWithRole(t, role)
			err := life(e)
			want := `cannot ` + g.verb + ` resource "` + g.resource + `"`
			if !errors.Is(err, provider.ErrInvalid) || !provider.Permanent(err) || !strings.Contains(err.Error(), want) ||
				!strings.Contains(provider.Detail(err), "Role") {
				t.Errorf("a runner's life without %s %s: %v (detail %q); want a final refusal saying %q", g.verb, g.resource, err,
					provider.Detail(err), want)
			}
		})
	}
}

// launchErr is a launch's error, or its first runner's.
func launchErr(res provider.Result, err error) error {
	if err != nil {
		return err
	}
	for _, r := range res.Runners {
		if r.Err != nil {
			return r.Err
		}
	}
	return nil
}

// TestPeaksOf: the record's peaks from a termination message: CPU
// seconds, peak memory in GiB and in % of the runner container's memory
// limit (none without a limit), each GPU's peaks.
func TestPeaksOf(t *testing.T) {
	t.Parallel()
	pod := func(limit string) *corev1.Pod {
		c := corev1.Container{Name: kube.ContainerName}
		if limit != "" {
			c.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(limit)}
		}
		return &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sidecar", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Mi")}}}, c}}}
	}
	u := podusage.Usage{V: podusage.Version, PeakMemoryBytes: 1 << 30, CPUSeconds: 12.5,
		GPUs: []podusage.GPU{{Index: 0, PeakMemoryMiB: 2048, PeakUtilPct: 87}}}
	got := kube.PeaksOf(u, pod("4Gi"))
	if got.CPUSeconds == nil || *got.CPUSeconds != 12.5 || got.MemoryPeakGiB == nil || *got.MemoryPeakGiB != 1 ||
		got.MemoryPeak == nil || *got.MemoryPeak != 25 {
		t.Errorf("peaks %+v: want 12.5 CPU seconds, 1 GiB, 25%% of the 4Gi limit", got)
	}
	if len(got.GPUs) != 1 || *got.GPUs[0].Utilization != 87 || *got.GPUs[0].MemoryUsedMiB != 2048 {
		t.Errorf("GPU peaks %+v", got.GPUs)
	}
	if got := kube.PeaksOf(u, pod("")); got.MemoryPeak != nil {
		t.Errorf("a container without a memory limit has a memory percentage %v", *got.MemoryPeak)
	}
	if got := kube.PeaksOf(podusage.Usage{V: podusage.Version}, pod("4Gi")); got.CPUSeconds != nil || got.MemoryPeakGiB != nil || got.MemoryPeak != nil {
		t.Errorf("nothing measured gave peaks %+v", got)
	}
}

// TestDeletedRunnerKeepsUsage: a runner Pod deleted while its runner
// still ran (the reconciler ends a runner whose job completed) stays,
// under skiff's finalizer, until List has read the termination message the
// kubelet wrote when it stopped the container; then it goes. Its usage is
// pending until then.
func TestDeletedRunnerKeepsUsage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true, nil)
	ctx := context.Background()
	res := launch(t, e.p, e.spec("cpu"), "tok-deleted", 1)
	if res.Runners[0].Err != nil {
		t.Fatalf("Launch: %+v", res)
	}
	id := res.Runners[0].Instance.ID
	e.bind(t, id, "node-a")
	e.setStatus(t, id, func(s *corev1.PodStatus) { s.Phase = corev1.PodRunning })
	if _, err := e.p.List(ctx, provider.Filter{}); err != nil {
		t.Fatal(err)
	}
	if !e.p.UsagePending(id) {
		t.Error("a running runner's usage is not pending")
	}
	if err := e.p.Terminate(ctx, []string{id}); err != nil {
		t.Fatal(err)
	}
	// The kubelet stops the container: the helper leaves its message, the
	// kubelet writes the end and finishes the deletion (grace 0).
	msg := string(podusage.Encode(podusage.Usage{PeakMemoryBytes: 3 << 29, CPUSeconds: 7}))
	e.setStatus(t, id, func(s *corev1.PodStatus) {
		s.Phase = corev1.PodSucceeded
		s.ContainerStatuses = []corev1.ContainerStatus{{Name: kube.ContainerName, State: corev1.ContainerState{
			Terminated: &corev1.ContainerStateTerminated{ExitCode: 143, Message: msg, FinishedAt: metav1.Now()}}}}
	})
	ns, name, _ := strings.Cut(id, "/")
	zero := int64(0)
	if err := e.k.admin.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.p.List(ctx, provider.Filter{}); err != nil {
		t.Fatal(err)
	}
	pk, ok := e.p.Peaks(id)
	if !ok || pk.MemoryPeakGiB == nil || *pk.MemoryPeakGiB != 1.5 || pk.CPUSeconds == nil || *pk.CPUSeconds != 7 {
		t.Errorf("Peaks = %+v, %v; want 1.5 GiB and 7 CPU seconds from the deleted Pod's message", pk, ok)
	}
	if e.p.UsagePending(id) {
		t.Error("the usage is still pending after it was read")
	}
	if _, err := e.k.admin.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the pod after its end was read: %v, want NotFound (finalizer released)", err)
	}
}

// TestOutdatedRunner: a Pod whose runner container ended with the
// deprecation exit code (GitHub refused the image's runner) is listed with
// the skiff:runner-outdated tag; a Pod that ended otherwise is not; and the
// runner is started with the variable that asks for that code.
func TestOutdatedRunner(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true, nil)
	res := launch(t, e.p, e.spec("cpu"), "tok-outdated", 2)
	for i, code := range []int32{7, 1} {
		e.setStatus(t, res.Runners[i].Instance.ID, func(s *corev1.PodStatus) {
			s.Phase = corev1.PodFailed
			s.ContainerStatuses = []corev1.ContainerStatus{{Name: kube.ContainerName, State: corev1.ContainerState{
				Terminated: &corev1.ContainerStateTerminated{ExitCode: code, FinishedAt: metav1.Now()}}}}
		})
	}
	all, err := e.p.List(context.Background(), provider.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range all {
		_, tagged := in.Tags[names.TagRunnerOutdated]
		if want := in.ID == res.Runners[0].Instance.ID; tagged != want {
			t.Errorf("%s tagged outdated %v, want %v", in.ID, tagged, want)
		}
	}
	env := map[string]string{}
	for _, v := range e.pod(t, res.Runners[0].Instance.ID).Spec.Containers[0].Env {
		env[v.Name] = v.Value
	}
	if env[provider.EnvDeprecatedExitCode] != "1" {
		t.Errorf("the runner's environment lacks %s=1: %v", provider.EnvDeprecatedExitCode, env)
	}
}
