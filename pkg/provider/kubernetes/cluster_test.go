package kubernetes_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/skiffci/skiff/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// cluster is the test binary's API server and clients for it.
type cluster struct {
	c     *testenv.KubeCluster
	admin kubernetes.Interface
}

func newCluster(t testing.TB) *cluster {
	t.Helper()
	c := testenv.KubeAPIServer(t)
	admin, _ := clientFor(t, c, testenv.KubeAdmin)
	return &cluster{c: c, admin: admin}
}

// calls counts a client's API requests by method and resource path
// ("POST pods").
type calls struct{ testenv.OpCount }

func (c *calls) add(r *http.Request) {
	// /api/v1/namespaces/NS/pods/NAME -> "POST pods"
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/api/v1/"), "/")
	res := r.URL.Path
	if len(parts) >= 3 && parts[0] == "namespaces" {
		res = parts[2]
	}
	c.Add(r.Method + " " + res)
}

type countingTransport struct {
	next http.RoundTripper
	c    *calls
}

func (t countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.c.add(r)
	return t.next.RoundTrip(r)
}

// clientFor is a client-go client that authenticates as user, with its
// requests counted.
func clientFor(t testing.TB, c *testenv.KubeCluster, user string) (kubernetes.Interface, *calls) {
	t.Helper()
	n := &calls{}
	cfg := &rest.Config{Host: c.URL, BearerToken: c.Token(user), TLSClientConfig: rest.TLSClientConfig{CAData: c.CA},
		QPS: 1000, Burst: 1000,
		WrapTransport: func(rt http.RoundTripper) http.RoundTripper { return countingTransport{next: rt, c: n} }}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs, n
}

// namespace creates a fresh namespace with its default ServiceAccount
// (no controller creates it here, and Pods need it); with bind, the Role of
// infra/kubernetes/runner-role.yaml and a binding of testenv.KubeUser to it.
func (k *cluster) namespace(t testing.TB, bind bool) string {
	t.Helper()
	var role *rbacv1.Role
	if bind {
		role = runnerRole(t)
	}
	return k.namespaceWith(t, role)
}

// namespaceWith is a fresh namespace whose testenv.KubeUser is bound to
// role (none when nil).
func (k *cluster) namespaceWith(t testing.TB, role *rbacv1.Role) string {
	t.Helper()
	ctx := context.Background()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	ns := "t-" + hex.EncodeToString(b)
	if _, err := k.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.admin.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	if _, err := k.admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if role == nil {
		return ns
	}
	role = role.DeepCopy()
	role.Namespace = ns
	if _, err := k.admin.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "skiff"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: testenv.KubeUser}}}
	if _, err := k.admin.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	k.waitAllowed(t, ns, role)
	return ns
}

// waitAllowed waits until the API server's authorizer, which reads Roles
// and bindings from its own cache, grants testenv.KubeUser every verb of
// the role in ns: a binding takes effect a moment after it is created.
func (k *cluster) waitAllowed(t testing.TB, ns string, role *rbacv1.Role) {
	t.Helper()
	for _, r := range role.Rules {
		group := ""
		if len(r.APIGroups) > 0 {
			group = r.APIGroups[0]
		}
		for _, res := range r.Resources {
			for _, verb := range r.Verbs {
				sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{User: testenv.KubeUser,
					ResourceAttributes: &authzv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: group, Resource: res}}}
				// The authorizer's cache is the API server's.
				testenv.AwaitState(t, fmt.Sprintf("the binding of %s in %s to grant %s %s", role.Name, ns, verb, res), 10*time.Millisecond,
					func() (bool, string) {
						got, err := k.admin.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), sar, metav1.CreateOptions{})
						if err != nil {
							t.Fatal(err)
						}
						return got.Status.Allowed, got.Status.Reason
					})
			}
		}
	}
}

// runnerRole is the Role skiff's manifests grant, read from the file.
func runnerRole(t testing.TB) *rbacv1.Role {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.Root(t), "infra", "kubernetes", "runner-role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.Role
	if err := yaml.UnmarshalStrict(b, &role); err != nil {
		t.Fatalf("infra/kubernetes/runner-role.yaml: %v", err)
	}
	if role.Kind != "Role" || role.Name == "" || len(role.Rules) == 0 {
		t.Fatalf("infra/kubernetes/runner-role.yaml is not a Role with rules: %+v", role)
	}
	return &role
}
