package kubernetes_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/pool/poolfile"
	kube "github.com/skiffci/skiff/pkg/provider/kubernetes"
)

// TestManifests: every file the kustomization lists exists and decodes
// strictly; the binding grants the runner Role to the ServiceAccount the
// Deployment runs as, in the runner namespace of the pools file the
// Deployment reads.
func TestManifests(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(testenv.Root(t), "infra", "kubernetes")
	read := func(name string) []byte {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var k struct {
		Resources          []string `json:"resources"`
		ConfigMapGenerator []struct {
			Files []string `json:"files"`
		} `json:"configMapGenerator"`
	}
	if err := yaml.Unmarshal(read("kustomization.yaml"), &k); err != nil || len(k.Resources) == 0 {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	kinds := map[string][]byte{}
	for _, r := range k.Resources {
		for _, doc := range bytes.Split(read(r), []byte("\n---\n")) {
			var meta struct {
				Kind string `json:"kind"`
			}
			if err := yaml.Unmarshal(doc, &meta); err != nil || meta.Kind == "" {
				t.Errorf("%s: %v (kind %q)", r, err, meta.Kind)
			}
			kinds[meta.Kind] = doc
		}
	}
	for _, g := range k.ConfigMapGenerator {
		for _, f := range g.Files {
			read(f)
		}
	}
	var dep appsv1.Deployment
	if err := yaml.UnmarshalStrict(kinds["Deployment"], &dep); err != nil {
		t.Fatalf("deployment: %v", err)
	}
	var rb rbacv1.RoleBinding
	if err := yaml.UnmarshalStrict(kinds["RoleBinding"], &rb); err != nil {
		t.Fatalf("rolebinding: %v", err)
	}
	role := runnerRole(t)
	sa := dep.Spec.Template.Spec.ServiceAccountName
	if rb.RoleRef.Kind != "Role" || rb.RoleRef.Name != role.Name || rb.Namespace != role.Namespace ||
		len(rb.Subjects) != 1 || rb.Subjects[0].Kind != "ServiceAccount" || rb.Subjects[0].Name != sa || rb.Subjects[0].Namespace != dep.Namespace {
		t.Errorf("the binding %+v does not grant Role %s/%s to the Deployment's ServiceAccount %s/%s", rb, role.Namespace, role.Name, dep.Namespace, sa)
	}
	if *dep.Spec.Replicas != 1 || dep.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("deployment: %d replicas, strategy %s; want 1 and Recreate (one SQLite writer)", *dep.Spec.Replicas, dep.Spec.Strategy.Type)
	}
	// The pools file the ConfigMap carries loads, and every pool's runners
	// run where the Role is granted.
	pools, err := poolfile.Load(filepath.Join(dir, "pools.yaml"))
	if err != nil {
		t.Fatalf("pools.yaml: %v", err)
	}
	if ns := kube.Namespaces(pools); len(ns) != 1 || ns[0] != role.Namespace {
		t.Errorf("the pools' runner namespaces %v are not the Role's %s", ns, role.Namespace)
	}
}
