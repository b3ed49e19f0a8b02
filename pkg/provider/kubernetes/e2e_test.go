package kubernetes_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/skiffci/skiff/internal/local"
	"github.com/skiffci/skiff/internal/localtest"
	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/metrics"
	"github.com/skiffci/skiff/pkg/pool/poolfile"
	kube "github.com/skiffci/skiff/pkg/provider/kubernetes"
	"github.com/skiffci/skiff/pkg/provider/kubernetes/kubelettest"
)

// e2ePools is a pools file of one Kubernetes pool in namespace %s, with an
// operator's hourly rate.
const e2ePools = `version: 1
pools:
  - name: pods
    labels: [self-hosted, linux, x64]
    maxRunners: 20
    costPerHour: 0.12
    kubernetes:
      namespace: %s
      image: ` + image + `
      requests: {cpu: "1", memory: 1Gi}
      limits: {memory: 2Gi}
`

func build(t *testing.T, pkg string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), filepath.Base(pkg))
	if b, err := exec.Command("go", "build", "-o", out, pkg).CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", pkg, err, b)
	}
	return out
}

// localRun is skiff local with the kubernetes provider on a namespace of
// the real API server, the test kubelet running its Pods, and the GitHub
// simulator.
type localRun struct {
	k    *cluster
	ns   string
	kl   *kubelettest.Kubelet
	sim  *ghsim.Server
	l    *local.Local
	p    *kube.Provider
	logs *testenv.SyncBuffer
	stop func()
}

// startLocal starts it; before, given the namespace, runs before the
// kubelet and skiff start (a ResourceQuota, say).
func startLocal(t *testing.T, kubelet kubelettest.Options, before func(ns string)) *localRun {
	t.Helper()
	return startLocalPools(t, kubelet, before, e2ePools)
}

// startLocalPools is startLocal with the pools file poolsYAML (%s: the
// runner namespace).
func startLocalPools(t *testing.T, kubelet kubelettest.Options, before func(ns string), poolsYAML string) *localRun {
	t.Helper()
	k := newCluster(t)
	ns := k.namespace(t, true)
	if before != nil {
		before(ns)
	}
	kubelet.Client, kubelet.Namespace, kubelet.Node = k.admin, ns, "node-"+ns
	kubelet.Helper, kubelet.Runner = build(t, "github.com/skiffci/skiff/cmd/skiff-podhelper"), build(t, "github.com/skiffci/skiff/cmd/skiff-standin")
	kubelet.Env = append(kubelet.Env, "SKIFF_STANDIN_DURATION=200ms")
	kl := kubelettest.Start(t, kubelet)

	sim, pemKey := testenv.GitHubApp(t, "CANARYKUBE")

	dir := t.TempDir()
	poolsFile := filepath.Join(dir, "pools.yaml")
	if err := os.WriteFile(poolsFile, []byte(fmt.Sprintf(poolsYAML, ns)), 0o600); err != nil {
		t.Fatal(err)
	}
	pools, err := poolfile.Load(poolsFile)
	if err != nil {
		t.Fatal(err)
	}
	// skiff authenticates as the user bound to infra/kubernetes' Role.
	client, _ := clientFor(t, k.c, testenv.KubeUser)
	logs := &testenv.SyncBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	p, err := kube.New(kube.Options{Client: client, Namespaces: kube.Namespaces(pools), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	l, err := local.New(local.Config{
		DataDir: filepath.Join(dir, "data"), Pools: pools, Listen: "127.0.0.1:0", Provider: "kubernetes", ExternalProvider: p,
		GitHubAPIURL: sim.URL(), AppIDs: []int64{77}, AppKeys: pemKey, WebhookSecret: "kube-secret", Allow: []string{"acme"},
		Installations: []string{"*"}, MetricsRecords: true, ReconcileEvery: time.Second,
	}, log)
	if err != nil {
		t.Fatal(err)
	}
	sim.SetWebhook(77, l.URL(), "kube-secret")
	stop := localtest.Run(t, l)
	lo := &localRun{k: k, ns: ns, kl: kl, sim: sim, l: l, p: p, logs: logs}
	lo.stop = func() {
		if err := stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	t.Cleanup(lo.stop)
	return lo
}

// runJobs starts a run of n jobs and waits until all completed, the pool
// counts no runner and each job has its metrics record; it returns the
// records by job.
func (lo *localRun) runJobs(t *testing.T, n int) (ghsim.RunInfo, map[int64][]metrics.Record) {
	t.Helper()
	run := localtest.StartRun(t, lo.sim, n)
	return run, localtest.Finish(t, lo.sim, lo.l, "pods", lo.logs, run)
}

// check fails t unless every job succeeded with exactly one valid record
// of the kubernetes provider, with peaks from the termination message and
// the pool's cost, the kubelet met no error, and no credential reached the
// logs.
func (lo *localRun) check(t *testing.T, run ghsim.RunInfo, recs map[int64][]metrics.Record) {
	t.Helper()
	if errs := lo.kl.Errs(); len(errs) > 0 {
		t.Errorf("kubelet: %v", errs)
	}
	localtest.Check(t, lo.sim, lo.logs, run, recs, func(id int64, r metrics.Record) {
		if r.CloudProvider != "kubernetes" || r.Pool != "pods" || !strings.HasPrefix(r.InstanceType, "pod ") {
			t.Errorf("job %d's record: provider %q, pool %q, type %q; want kubernetes, pods, pod ...", id, r.CloudProvider, r.Pool, r.InstanceType)
		}
		if r.Memory == nil || r.Memory.PeakGiB == nil || *r.Memory.PeakGiB <= 0 || r.CPU == nil || r.CPU.Seconds == nil {
			t.Errorf("job %d's record (runner %s) has no peaks from the termination message: memory %+v, cpu %+v\n%s", id,
				r.RunnerName, r.Memory, r.CPU, linesWith(lo.logs.String(), r.RunnerName, strconv.FormatInt(id, 10)))
		}
		if r.Cost == nil || r.Cost.HourlyUSD != 0.12 {
			t.Errorf("job %d's record cost %+v, want the pool's 0.12 per hour", id, r.Cost)
		}
	})
}

// TestLocalKubernetes is `skiff local --provider kubernetes` end to end:
// the GitHub simulator's signed webhooks reach local mode, which launches
// a Pod per job on the real API server as the user bound to the Role of
// infra/kubernetes; the test kubelet binds and runs each with
// skiff-podhelper around the stand-in runner, which takes its job and
// completes it. The first Pod is evicted before its runner starts: its job
// must get a replacement. Every job completes, with one record each.
func TestLocalKubernetes(t *testing.T) {
	t.Parallel()
	lo := startLocal(t, kubelettest.Options{}, nil)
	lo.kl.EvictNext(1)
	const jobs = 4
	run, recs := lo.runJobs(t, jobs)
	lo.stop()
	lo.check(t, run, recs)
	pods, err := lo.k.admin.CoreV1().Pods(lo.ns).List(context.Background(), metav1.ListOptions{LabelSelector: kube.LabelManaged + "=true"})
	if err != nil {
		t.Fatal(err)
	}
	evicted := 0
	for i := range pods.Items {
		if strings.HasPrefix(kube.EndReason(&pods.Items[i]), "Evicted") {
			evicted++
		}
	}
	// The evicted Pod stays listed (Options.Retain); a Pod skiff deleted
	// after its job may be gone. GitHub may give a runner another queued
	// job than its own, whose own runner then gets a replacement: more
	// Pods than jobs may start, never fewer.
	if evicted != 1 || lo.kl.Started() < jobs {
		t.Errorf("%d pods evicted, %d started: want 1 evicted and its job replaced, at least %d started", evicted, lo.kl.Started(), jobs)
	}
}

// TestLocalKubernetesQuota: a ResourceQuota of one Pod in the runner
// namespace. The jobs beyond it are refused with the quota's message and
// wait in the pool's waiting room (not dead-lettered, no attempts spent);
// each launches when the Pod before it has ended and the quota counts
// again. Every job completes, with one record each.
func TestLocalKubernetesQuota(t *testing.T) {
	t.Parallel()
	lo := startLocal(t, kubelettest.Options{Quotas: true}, func(ns string) {
		k := newCluster(t)
		q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "runners"},
			Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("1")}}}
		q, err := k.admin.CoreV1().ResourceQuotas(ns).Create(context.Background(), q, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		q.Status = corev1.ResourceQuotaStatus{Hard: q.Spec.Hard, Used: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}}
		if _, err := k.admin.CoreV1().ResourceQuotas(ns).UpdateStatus(context.Background(), q, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	})
	const jobs = 3
	run, recs := lo.runJobs(t, jobs)
	lo.stop()
	lo.check(t, run, recs)
	logs := lo.logs.String()
	waited := 0
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "job waits in its pool's room") && strings.Contains(line, `"reason":"launch_quota"`) {
			waited++
		}
	}
	if waited == 0 || !strings.Contains(logs, "exceeded quota: runners") {
		t.Errorf("no job refused by the quota waited in the pool's room:\n%s", logs)
	}
	t.Logf("%d waits in the room for the quota", waited)
	if strings.Contains(logs, "dead-letter") || strings.Contains(logs, "dead_letter") {
		t.Error("a job waiting for the quota was dead-lettered")
	}
}

// linesWith are the lines of logs that contain any of words.
func linesWith(logs string, words ...string) string {
	var out []string
	for _, line := range strings.Split(logs, "\n") {
		for _, w := range words {
			if w != "" && strings.Contains(line, w) {
				out = append(out, line)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}

// TestLocalKubernetesListener is TestLocalKubernetes's run with the pool
// on the listener: no port open, the jobs from the scale set's long poll,
// a Pod per job on the real API server, one record each, no offer
// acknowledged before its job was acquired.
func TestLocalKubernetesListener(t *testing.T) {
	t.Parallel()
	lo := startLocalPools(t, kubelettest.Options{}, nil, strings.Replace(e2ePools, "    maxRunners:", "    jobs: listener\n    maxRunners:", 1))
	if lo.l.URL() != "" {
		t.Errorf("local mode with its pool on the listener listens on %s", lo.l.URL())
	}
	run, recs := lo.runJobs(t, 3)
	lo.stop()
	lo.check(t, run, recs)
	if n := lo.sim.Requests(ghsim.OpGenerateOrgJITConfig); n != 0 {
		t.Errorf("%d runners registered through the REST JIT endpoint, want 0", n)
	}
	if n := lo.sim.AckedUnacquired(); n != 0 {
		t.Errorf("%d offers acknowledged before their job was acquired", n)
	}
	for _, ss := range lo.sim.ScaleSets("acme") {
		if ss.Session != "" || ss.Unacked != 0 {
			t.Errorf("scale set after exit: %+v", ss)
		}
	}
}
