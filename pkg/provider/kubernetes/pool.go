package kubernetes

import (
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/skiffci/skiff/pkg/pool"
)

// DefaultUser is the user and group a non-root runner runs as when the
// pool names none: uid 1001 is the "runner" user of GitHub's runner image
// (ghcr.io/actions/actions-runner), which the runner recipe builds on.
const DefaultUser = 1001

// Namespaces are the runner namespaces of a pools file: every pool's
// kubernetes.namespace, sorted, each once. The provider lists these.
func Namespaces(cfg *pool.Config) []string {
	seen := map[string]bool{}
	var out []string
	for _, p := range cfg.Pools {
		if p.Kubernetes != nil && p.Kubernetes.Namespace != "" && !seen[p.Kubernetes.Namespace] {
			seen[p.Kubernetes.Namespace] = true
			out = append(out, p.Kubernetes.Namespace)
		}
	}
	sort.Strings(out)
	return out
}

// resources maps a pool's kubernetes: section and a runner's sizes to the
// runner container's requests and limits (pool.Kubernetes.KubernetesResources
// says how), as quantities the API server takes. A quantity that does not
// parse is an error naming it.
func resources(k *pool.Kubernetes, s pool.Sizes) (corev1.ResourceRequirements, error) {
	requests, limits := k.KubernetesResources(s)
	var out corev1.ResourceRequirements
	conv := func(what string, m map[string]string) (corev1.ResourceList, error) {
		if len(m) == 0 {
			return nil, nil
		}
		l := make(corev1.ResourceList, len(m))
		for name, v := range m {
			q, err := resource.ParseQuantity(v)
			if err != nil {
				return nil, fmt.Errorf("%s %s %q: %w", what, name, v, err)
			}
			l[corev1.ResourceName(name)] = q
		}
		return l, nil
	}
	var err error
	if out.Requests, err = conv("request", requests); err != nil {
		return out, err
	}
	if out.Limits, err = conv("limit", limits); err != nil {
		return out, err
	}
	return out, nil
}
