package kubelettest

import (
	"context"
	"os/exec"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/skiffci/skiff/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestNoStartAfterStop: a Pod handed on while Stop runs (a Secret's watch
// event in flight) starts no process that Stop has no longer killed.
func TestNoStartAfterStop(t *testing.T) {
	c := testenv.KubeAPIServer(t)
	client, err := kubernetes.NewForConfig(&rest.Config{Host: c.URL, BearerToken: c.Token(testenv.KubeAdmin),
		TLSClientConfig: rest.TLSClientConfig{CAData: c.CA}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "kubelet-"}}
	if ns, err = client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "jit-1"}, Data: map[string][]byte{"jit": []byte("x")}}
	if _, err := client.CoreV1().Secrets(ns.Name).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	k := Start(t, Options{Client: client, Namespace: ns.Name, Node: "stop-test", Helper: sleep, Runner: "600"})
	k.Stop()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "runner-1"},
		Spec: corev1.PodSpec{NodeName: "stop-test", Containers: []corev1.Container{{Name: "runner", Image: "runner"}},
			Volumes: []corev1.Volume{{Name: "jit", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
				SecretName: "jit-1", Items: []corev1.KeyToPath{{Key: "jit", Path: "jit"}}}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending}}
	k.handle(ctx, pod)
	k.mu.Lock()
	defer k.mu.Unlock()
	for name, cmd := range k.procs {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		t.Errorf("after Stop, %s was started (pid %d)", name, cmd.Process.Pid)
	}
}
