package kubernetes

import (
	"fmt"
	"os"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Client returns a client for the cluster: the kubeconfig file named, else
// the in-cluster service account when running in a Pod, else the
// kubeconfig of $KUBECONFIG or ~/.kube/config (its current context).
func Client(kubeconfig string) (*kubernetes.Clientset, error) {
	var cfg *rest.Config
	var err error
	switch {
	case kubeconfig == "" && os.Getenv("KUBERNETES_SERVICE_HOST") != "":
		cfg, err = rest.InClusterConfig()
	default:
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		rules.ExplicitPath = kubeconfig
		cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes provider: loading the cluster's credentials: %w", err)
	}
	// client-go's defaults (5 requests per second, bursts of 10) would
	// pace a burst of launches at 2.5 runners a second.
	cfg.QPS, cfg.Burst = 50, 100
	return kubernetes.NewForConfig(cfg)
}
