package kubernetes_test

import (
	"bytes"
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/yaml"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/pool"
	kube "github.com/skiffci/skiff/pkg/provider/kubernetes"
)

// networkPolicies are infra/kubernetes/networkpolicy.yaml's policies.
func networkPolicies(t *testing.T) []networkingv1.NetworkPolicy {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.Root(t), "infra", "kubernetes", "networkpolicy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var out []networkingv1.NetworkPolicy
	for _, doc := range bytes.Split(b, []byte("\n---\n")) {
		var np networkingv1.NetworkPolicy
		if err := yaml.UnmarshalStrict(doc, &np); err != nil {
			t.Fatalf("networkpolicy.yaml: %v", err)
		}
		if np.Kind != "NetworkPolicy" {
			t.Fatalf("networkpolicy.yaml holds a %q", np.Kind)
		}
		out = append(out, np)
	}
	return out
}

// runnerPodLabels launches one runner of a pool through the provider
// (against a client of no API server that keeps what it is sent) and
// returns its Pod's labels: what the provider sets, not a copy of it.
func runnerPodLabels(t *testing.T, apiServer bool) map[string]string {
	t.Helper()
	c := fake.NewClientset()
	const ns = "skiff-runners"
	p, err := kube.New(kube.Options{Client: c, Namespaces: []string{ns}})
	if err != nil {
		t.Fatal(err)
	}
	s := pool.Spec{Kubernetes: &pool.Kubernetes{Namespace: ns, Image: image, APIServerAccess: apiServer,
		SecurityContext: pool.SecurityContext{RunAsNonRoot: true}}}
	s.Pool, s.Backend, s.MaxLifetime = "ci", pool.BackendKubernetes, time.Hour
	res := launch(t, p, s, "tok-np", 1)
	if res.Runners[0].Err != nil {
		t.Fatalf("Launch: %+v", res)
	}
	pods, err := c.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods: %v %d", err, len(pods.Items))
	}
	return pods.Items[0].Labels
}

func selects(t *testing.T, np networkingv1.NetworkPolicy, podLabels map[string]string) bool {
	t.Helper()
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil {
		t.Fatalf("%s: %v", np.Name, err)
	}
	return sel.Matches(labels.Set(podLabels))
}

// egressAllowed says whether the policies let a Pod with podLabels reach
// addr on port/proto, as NetworkPolicy's semantics say: a Pod no policy
// of type Egress selects may send anything; otherwise some rule of some
// selecting policy must match the destination (no to: any; an ipBlock
// holding addr outside its except list) and the port (no ports: any).
// Pod and namespace selectors match no address here: the manifest uses
// none for egress, and the test fails if it starts to.
func egressAllowed(t *testing.T, nps []networkingv1.NetworkPolicy, podLabels map[string]string, addr netip.Addr, port int32, proto corev1.Protocol) bool {
	t.Helper()
	addr = addr.Unmap() // the kernel sends to an IPv4-mapped address over IPv4
	isolated := false
	for _, np := range nps {
		if !selects(t, np, podLabels) || !hasType(np, networkingv1.PolicyTypeEgress) {
			continue
		}
		isolated = true
		for _, r := range np.Spec.Egress {
			if portMatches(r.Ports, port, proto) && peerMatches(t, r.To, addr) {
				return true
			}
		}
	}
	return !isolated
}

func hasType(np networkingv1.NetworkPolicy, pt networkingv1.PolicyType) bool {
	for _, x := range np.Spec.PolicyTypes {
		if x == pt {
			return true
		}
	}
	return false
}

func portMatches(ports []networkingv1.NetworkPolicyPort, port int32, proto corev1.Protocol) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		pp := corev1.ProtocolTCP
		if p.Protocol != nil {
			pp = *p.Protocol
		}
		if pp == proto && (p.Port == nil || p.Port.IntVal == port) {
			return true
		}
	}
	return false
}

func peerMatches(t *testing.T, peers []networkingv1.NetworkPolicyPeer, addr netip.Addr) bool {
	t.Helper()
	if len(peers) == 0 {
		return true
	}
	for _, p := range peers {
		if p.PodSelector != nil || p.NamespaceSelector != nil {
			t.Fatalf("an egress peer selects pods or namespaces (%+v): the test's evaluator cannot judge it", p)
		}
		if p.IPBlock == nil {
			continue
		}
		cidr := netip.MustParsePrefix(p.IPBlock.CIDR)
		if !cidr.Contains(addr) {
			continue
		}
		excepted := false
		for _, e := range p.IPBlock.Except {
			if netip.MustParsePrefix(e).Contains(addr) {
				excepted = true
			}
		}
		if !excepted {
			return true
		}
	}
	return false
}

// TestNetworkPolicyManifest: the policies select the Pods the provider
// makes, by the labels it sets, and allow them DNS and public addresses
// only; the API server is reachable only for a pool that asks for it, the
// metadata endpoint and skiff's webhook never; nothing reaches a runner.
func TestNetworkPolicyManifest(t *testing.T) {
	t.Parallel()
	nps := networkPolicies(t)
	role := runnerRole(t)
	for _, np := range nps {
		if np.Namespace != role.Namespace {
			t.Errorf("%s is in namespace %q, the runners are in %q", np.Name, np.Namespace, role.Namespace)
		}
	}
	plain, api := runnerPodLabels(t, false), runnerPodLabels(t, true)
	if plain[kube.LabelAPIServer] != "" || api[kube.LabelAPIServer] != "true" {
		t.Fatalf("the provider's labels: %v and, with apiServerAccess, %v", plain, api)
	}
	other := map[string]string{"app": "something-else"}
	var selectsPlain, selectsAPI int
	for _, np := range nps {
		if selects(t, np, other) {
			t.Errorf("%s selects a Pod that is not a runner (%v)", np.Name, other)
		}
		if selects(t, np, plain) {
			selectsPlain++
			if !hasType(np, networkingv1.PolicyTypeIngress) || len(np.Spec.Ingress) != 0 {
				t.Errorf("%s selects every runner and lets connections in: %+v", np.Name, np.Spec.Ingress)
			}
		}
		if selects(t, np, api) {
			selectsAPI++
		}
	}
	if selectsPlain != 1 || selectsAPI != 2 {
		t.Errorf("%d policies select a runner, %d a runner with API server access; want 1 and 2", selectsPlain, selectsAPI)
	}

	const (
		tcp = corev1.ProtocolTCP
		udp = corev1.ProtocolUDP
	)
	tests := []struct {
		name  string
		pod   map[string]string
		addr  string
		port  int32
		proto corev1.Protocol
		want  bool
	}{
		{"metadata endpoint", plain, "169.254.169.254", 80, tcp, false},
		{"metadata endpoint, IPv6", plain, "fd00:ec2::254", 80, tcp, false},
		{"metadata endpoint, IPv4-mapped", plain, "::ffff:169.254.169.254", 80, tcp, false},
		{"API server's Service (kubeadm)", plain, "10.96.0.1", 443, tcp, false},
		{"API server's Service (EKS)", plain, "172.20.0.1", 443, tcp, false},
		{"API server on a node", plain, "192.168.1.10", 6443, tcp, false},
		{"API server, IPv6 Service", plain, "fd12:3456::1", 443, tcp, false},
		{"skiff's webhook Pod", plain, "10.244.1.5", 8080, tcp, false},
		{"skiff's webhook Pod on a CGNAT Pod range", plain, "100.64.3.7", 8080, tcp, false},
		{"loopback of the node (hostPort)", plain, "127.0.0.1", 8080, tcp, false},
		{"the internet", plain, "140.82.112.3", 443, tcp, true},
		{"the internet, plain HTTP", plain, "151.101.1.69", 80, tcp, true},
		{"the internet, IPv6", plain, "2606:50c0:8000::153", 443, tcp, true},
		{"DNS over UDP", plain, "10.96.0.10", 53, udp, true},
		{"DNS over TCP", plain, "10.96.0.10", 53, tcp, true},
		{"NodeLocal DNS", plain, "169.254.20.10", 53, udp, true},
		{"API server's Service, asked for", api, "10.96.0.1", 443, tcp, true},
		{"API server on a node, asked for", api, "192.168.1.10", 6443, tcp, true},
		{"metadata endpoint, API server asked for", api, "169.254.169.254", 80, tcp, false},
		{"metadata endpoint over HTTPS, API server asked for", api, "169.254.169.254", 443, tcp, false},
		{"metadata endpoint IPv6 over HTTPS, API server asked for", api, "fd00:ec2::254", 443, tcp, false},
		{"skiff's webhook Pod, API server asked for", api, "10.244.1.5", 8080, tcp, false},
		{"the internet, API server asked for", api, "140.82.112.3", 443, tcp, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := egressAllowed(t, nps, tt.pod, netip.MustParseAddr(tt.addr), tt.port, tt.proto); got != tt.want {
				t.Errorf("%s:%d/%s allowed = %v, want %v", tt.addr, tt.port, tt.proto, got, tt.want)
			}
		})
	}
}

// TestNetworkPolicyOnAPIServer: the real API server accepts the policies
// (its validation: CIDRs, except lists within their block, ports), and
// their pod selectors, evaluated by the API server, pick the Pods the
// provider creates: both runners for the first, only the one of a pool
// with apiServerAccess for the second.
func TestNetworkPolicyOnAPIServer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true, nil)
	ctx := context.Background()
	nps := networkPolicies(t)
	for _, np := range nps {
		np.Namespace = e.ns
		if _, err := e.k.admin.NetworkingV1().NetworkPolicies(e.ns).Create(ctx, &np, metav1.CreateOptions{}); err != nil {
			t.Fatalf("the API server refuses %s: %v", np.Name, err)
		}
	}
	e.sections["api"] = &pool.Kubernetes{Namespace: e.ns, Image: image, APIServerAccess: true, SecurityContext: pool.SecurityContext{RunAsNonRoot: true}}
	plain := launch(t, e.p, e.spec("conformance"), "tok-np-plain", 1)
	if plain.Runners[0].Err != nil {
		t.Fatalf("Launch: %+v", plain)
	}
	api := launch(t, e.p, e.spec("api"), "tok-np-api", 1)
	if api.Runners[0].Err != nil {
		t.Fatalf("Launch: %+v", api)
	}
	want := map[string][]string{
		"skiff-runners":            {plain.Runners[0].Instance.ID, api.Runners[0].Instance.ID},
		"skiff-runners-api-server": {api.Runners[0].Instance.ID},
	}
	for _, name := range []string{"skiff-runners", "skiff-runners-api-server"} {
		stored, err := e.k.admin.NetworkingV1().NetworkPolicies(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got := selectedPods(t, e.k.admin, e.ns, stored.Spec.PodSelector)
		if !sameSet(got, want[name]) {
			t.Errorf("%s's podSelector picks %v, want %v", name, got, want[name])
		}
	}
}

// selectedPods lists, through the API server's own label selection, the
// Pods of ns that sel picks, as namespace/name.
func selectedPods(t *testing.T, c kubernetes.Interface, ns string, sel metav1.LabelSelector) []string {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(&sel)
	if err != nil {
		t.Fatal(err)
	}
	pods, err := c.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: s.String()})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range pods.Items {
		out = append(out, p.Namespace+"/"+p.Name)
	}
	return out
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	m := map[string]bool{}
	for _, x := range a {
		m[x] = true
	}
	for _, x := range b {
		if !m[x] {
			return false
		}
	}
	return true
}
