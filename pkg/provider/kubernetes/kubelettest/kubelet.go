// Package kubelettest is a test kubelet for the Kubernetes provider's end
// to end tests, on an API server without a scheduler or kubelet: it binds
// skiff's Pods of one namespace to a Node of its own (as the scheduler
// would), and runs each as a process (as a kubelet would its container):
// skiff-podhelper with the Pod's environment and its Secret's JIT
// configuration written to a file (what the kubelet mounts), around the
// runner command (the stand-in, cmd/skiff-standin). It writes the Pod's
// status as a kubelet does — Running when it starts, Succeeded or Failed
// with the container's exit code and the termination message the helper
// wrote when it ends — and on a Pod's deletion sends the process SIGTERM,
// writes its end, then removes the Pod (grace 0), as a kubelet does. Evict fails a running Pod as the kubelet's
// eviction manager does. With Options.Quotas it also counts the
// namespace's Pods into its ResourceQuotas, as the quota controller does.
package kubelettest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// Options configures a Kubelet.
type Options struct {
	// Client may bind Pods, read Secrets and write Pod status (an admin).
	Client kubernetes.Interface
	// Namespace is the one whose skiff Pods it runs.
	Namespace string
	// Node is its Node's name (created if missing).
	Node string
	// Helper is the built cmd/skiff-podhelper; Runner the runner command.
	Helper, Runner string
	// Env are extra variables of every container (e.g. the stand-in's).
	Env []string
	// Quotas makes it also do the quota controller's part: after every
	// change of a Pod it writes each ResourceQuota's pod count of the
	// namespace (the Pods not yet ended) into its status, which the
	// API server's quota admission reads.
	Quotas bool
}

// Kubelet runs Pods as processes until Stop.
type Kubelet struct {
	o      Options
	dir    string
	cancel context.CancelFunc
	loops  sync.WaitGroup // the Pod and Secret watches

	mu      sync.Mutex
	stopped bool                 // by Stop: nothing starts any more
	procs   map[string]*exec.Cmd // by pod name
	evicted map[string]bool
	// deleting are the Pods being deleted whose process was sent SIGTERM.
	deleting map[string]types.UID
	errs     []error
	started  int
	// evictNext Pods are failed as evicted instead of started.
	evictNext int
}

// EvictNext makes the next n Pods bound here fail as evicted before their
// runner starts (node pressure), so that their jobs are still queued.
func (k *Kubelet) EvictNext(n int) {
	k.mu.Lock()
	k.evictNext = n
	k.mu.Unlock()
}

// Start starts a kubelet; t's cleanup stops it.
func Start(t testing.TB, o Options) *Kubelet {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	k := &Kubelet{o: o, dir: t.TempDir(), cancel: cancel,
		procs: map[string]*exec.Cmd{}, evicted: map[string]bool{}, deleting: map[string]types.UID{}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: o.Node}}
	if _, err := o.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating node %s: %v", o.Node, err)
	}
	// Watch Secrets from now on, before any Pod can be bound.
	sw, err := o.Client.CoreV1().Secrets(o.Namespace).Watch(ctx, metav1.ListOptions{LabelSelector: "skiff/managed=true"})
	if err != nil {
		cancel()
		t.Fatalf("watching secrets: %v", err)
	}
	k.loops.Go(func() { k.watchSecrets(ctx, sw) })
	k.loops.Go(func() { k.run(ctx) })
	t.Cleanup(k.Stop)
	return k
}

// Stop stops watching, kills every process, and starts none after.
func (k *Kubelet) Stop() {
	k.cancel()
	k.loops.Wait()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.stopped = true
	for _, c := range k.procs {
		_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
	}
}

// Errs returns what went wrong so far (a test fails on them).
func (k *Kubelet) Errs() []error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]error(nil), k.errs...)
}

// Started is how many Pods it has started.
func (k *Kubelet) Started() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.started
}

func (k *Kubelet) fail(err error) {
	k.mu.Lock()
	k.errs = append(k.errs, err)
	k.mu.Unlock()
}

func (k *Kubelet) run(ctx context.Context) {
	pods := k.o.Client.CoreV1().Pods(k.o.Namespace)
	for ctx.Err() == nil {
		list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: "skiff/managed=true"})
		if err != nil {
			if ctx.Err() == nil {
				k.fail(fmt.Errorf("listing pods: %w", err))
			}
			return
		}
		for i := range list.Items {
			k.handle(ctx, &list.Items[i])
		}
		w, err := pods.Watch(ctx, metav1.ListOptions{LabelSelector: "skiff/managed=true", ResourceVersion: list.ResourceVersion})
		if err != nil {
			if ctx.Err() == nil {
				k.fail(fmt.Errorf("watching pods: %w", err))
			}
			return
		}
		for ev := range w.ResultChan() {
			if pod, ok := ev.Object.(*corev1.Pod); ok && (ev.Type == watch.Added || ev.Type == watch.Modified) {
				k.handle(ctx, pod)
			}
			if k.o.Quotas && (ev.Type == watch.Modified || ev.Type == watch.Deleted) {
				if err := k.syncQuotas(ctx); err != nil && ctx.Err() == nil {
					k.fail(fmt.Errorf("counting pods into the quotas: %w", err))
				}
			}
		}
		w.Stop()
	}
}

// handle moves one Pod on: bind, start, or finish its deletion.
func (k *Kubelet) handle(ctx context.Context, pod *corev1.Pod) {
	pods := k.o.Client.CoreV1().Pods(k.o.Namespace)
	switch {
	case pod.DeletionTimestamp != nil:
		// As a kubelet: SIGTERM to a running container, whose end wait
		// writes (with its termination message) before it finishes the
		// deletion; a Pod with nothing running is finished at once.
		k.mu.Lock()
		c := k.procs[pod.Name]
		if c != nil {
			k.deleting[pod.Name] = pod.UID
		}
		k.mu.Unlock()
		if c != nil {
			_ = syscall.Kill(c.Process.Pid, syscall.SIGTERM)
			return
		}
		k.finishDeletion(ctx, pod.Name, pod.UID)
	case pod.Spec.NodeName == "" && pod.Status.Phase == corev1.PodPending:
		b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, UID: pod.UID},
			Target: corev1.ObjectReference{Kind: "Node", Name: k.o.Node}}
		if err := pods.Bind(ctx, b, metav1.CreateOptions{}); err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) && ctx.Err() == nil {
			k.fail(fmt.Errorf("binding %s: %w", pod.Name, err))
		}
	case pod.Spec.NodeName == k.o.Node && pod.Status.Phase == corev1.PodPending:
		k.mu.Lock()
		_, running := k.procs[pod.Name]
		k.mu.Unlock()
		if !running {
			if err := k.start(ctx, pod); err != nil && ctx.Err() == nil {
				k.fail(fmt.Errorf("starting %s: %w", pod.Name, err))
			}
		}
	}
}

// finishDeletion deletes a Pod with grace 0, as a kubelet does once its
// containers have stopped; skiff's finalizer may keep it a while longer.
func (k *Kubelet) finishDeletion(ctx context.Context, name string, uid types.UID) {
	zero := int64(0)
	err := k.o.Client.CoreV1().Pods(k.o.Namespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero,
		Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && ctx.Err() == nil {
		k.fail(fmt.Errorf("finishing the deletion of %s: %w", name, err))
	}
}

// start runs a bound Pod's container as a process.
func (k *Kubelet) start(ctx context.Context, pod *corev1.Pod) error {
	var secret, item string
	for _, v := range pod.Spec.Volumes {
		if v.Secret != nil && len(v.Secret.Items) == 1 {
			secret, item = v.Secret.SecretName, v.Secret.Items[0].Key
		}
	}
	if secret == "" {
		return errors.New("no secret volume")
	}
	// Like the kubelet, wait for the Secret (the provider creates it after
	// the Pod): watchSecrets hands the Pod back when it appears.
	s, err := k.o.Client.CoreV1().Secrets(k.o.Namespace).Get(ctx, secret, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	dir := filepath.Join(k.dir, pod.Name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	jit, msg := filepath.Join(dir, item), filepath.Join(dir, "termination-log")
	if err := os.WriteFile(jit, s.Data[item], 0o400); err != nil {
		return err
	}
	c := pod.Spec.Containers[0]
	cmd := exec.Command(k.o.Helper, k.o.Runner)
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "SKIFF_TERMINATION_LOG=" + msg}, k.o.Env...)
	for _, e := range c.Env {
		v := e.Value
		if e.Name == "SKIFF_JITCONFIG_FILE" {
			v = jit // where the kubelet would mount it
		}
		cmd.Env = append(cmd.Env, e.Name+"="+v)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	k.mu.Lock()
	if _, dup := k.procs[pod.Name]; dup || k.evicted[pod.Name] || k.stopped {
		k.mu.Unlock()
		return nil
	}
	if k.evictNext > 0 {
		k.evictNext--
		k.evicted[pod.Name] = true
		k.mu.Unlock()
		return k.status(ctx, pod.Name, func(st *corev1.PodStatus) {
			st.Phase, st.Reason, st.Message = corev1.PodFailed, "Evicted", "The node was low on resource: memory."
		})
	}
	if err := cmd.Start(); err != nil {
		k.mu.Unlock()
		return err
	}
	k.procs[pod.Name] = cmd
	k.started++
	k.mu.Unlock()
	now := metav1.Now()
	err = k.status(ctx, pod.Name, func(st *corev1.PodStatus) {
		st.Phase, st.StartTime = corev1.PodRunning, &now
		st.ContainerStatuses = []corev1.ContainerStatus{{Name: c.Name, Image: c.Image, Ready: true, Started: ptr(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}}
	})
	go k.wait(ctx, pod.Name, c, cmd, msg)
	return err
}

// watchSecrets hands each new Secret's owner Pod to handle: a Pod bound
// before its Secret existed starts now.
func (k *Kubelet) watchSecrets(ctx context.Context, w watch.Interface) {
	defer w.Stop()
	for ev := range w.ResultChan() {
		s, ok := ev.Object.(*corev1.Secret)
		if !ok || ev.Type != watch.Added || len(s.OwnerReferences) != 1 {
			continue
		}
		if pod, err := k.o.Client.CoreV1().Pods(k.o.Namespace).Get(ctx, s.OwnerReferences[0].Name, metav1.GetOptions{}); err == nil {
			k.handle(ctx, pod)
		}
	}
}

// wait writes the Pod's final status when its process ends.
func (k *Kubelet) wait(ctx context.Context, name string, c corev1.Container, cmd *exec.Cmd, msgFile string) {
	_ = cmd.Wait()
	k.mu.Lock()
	_, alive := k.procs[name]
	delete(k.procs, name)
	evicted := k.evicted[name]
	uid, deleting := k.deleting[name]
	delete(k.deleting, name)
	k.mu.Unlock()
	if deleting {
		defer k.finishDeletion(ctx, name, uid)
	}
	if !alive || evicted { // stopped by Stop, or Evict wrote the status
		return
	}
	msg, _ := os.ReadFile(msgFile)
	code := int32(cmd.ProcessState.ExitCode())
	phase, reason := corev1.PodSucceeded, "Completed"
	if code != 0 {
		phase, reason = corev1.PodFailed, "Error"
	}
	now := metav1.Now()
	err := k.status(ctx, name, func(st *corev1.PodStatus) {
		st.Phase = phase
		st.ContainerStatuses = []corev1.ContainerStatus{{Name: c.Name, Image: c.Image,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason,
				Message: string(msg), FinishedAt: now}}}}
	})
	if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
		k.fail(fmt.Errorf("writing %s's final status: %w", name, err))
	}
}

// Evict ends a running Pod as the kubelet's eviction manager does: the
// process is killed and the Pod Failed with reason Evicted.
func (k *Kubelet) Evict(ctx context.Context, name string) error {
	k.mu.Lock()
	c := k.procs[name]
	k.evicted[name] = true
	k.mu.Unlock()
	if c == nil {
		return fmt.Errorf("pod %s does not run here", name)
	}
	_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
	return k.status(ctx, name, func(st *corev1.PodStatus) {
		st.Phase, st.Reason, st.Message = corev1.PodFailed, "Evicted", "The node was low on resource: memory."
	})
}

// Running are the names of the Pods whose processes run.
func (k *Kubelet) Running() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []string
	for n := range k.procs {
		out = append(out, n)
	}
	return out
}

func (k *Kubelet) status(ctx context.Context, name string, edit func(*corev1.PodStatus)) error {
	pods := k.o.Client.CoreV1().Pods(k.o.Namespace)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pod, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		edit(&pod.Status)
		_, err = pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		return err
	})
}

func ptr[T any](v T) *T { return &v }

// syncQuotas writes the count of the namespace's Pods that have not ended
// into every ResourceQuota's status.used, as the quota controller does
// (Succeeded and Failed Pods no longer count against a pods quota).
func (k *Kubelet) syncQuotas(ctx context.Context) error {
	core := k.o.Client.CoreV1()
	qs, err := core.ResourceQuotas(k.o.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, q := range qs.Items {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur, err := core.ResourceQuotas(k.o.Namespace).Get(ctx, q.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			pods, err := core.Pods(k.o.Namespace).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			n := 0
			for _, p := range pods.Items {
				if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
					n++
				}
			}
			cur.Status.Hard = cur.Spec.Hard
			cur.Status.Used = corev1.ResourceList{corev1.ResourcePods: *resource.NewQuantity(int64(n), resource.DecimalSI)}
			_, err = core.ResourceQuotas(k.o.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}
