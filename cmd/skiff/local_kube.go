package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provider"
	kube "github.com/skiffci/skiff/pkg/provider/kubernetes"
)

// kubeProvider builds skiff local's kubernetes provider for the pools
// that run on it (cfg): each pool's kubernetes: section says its Pods; a pool without one
// takes --kube-namespace and --kube-image, which it then requires.
func kubeProvider(cfg *pool.Config, kubeconfig, namespace, image string, deployment func() (string, error), logger *slog.Logger) (provider.Provider, error) {
	var def *pool.Kubernetes
	if namespace != "" || image != "" {
		if namespace == "" || image == "" {
			return nil, errors.New("--kube-namespace and --kube-image go together")
		}
		def = &pool.Kubernetes{Namespace: namespace, Image: image, SecurityContext: pool.SecurityContext{RunAsNonRoot: true}}
	}
	for _, p := range cfg.Pools {
		if p.Kubernetes == nil && def == nil {
			return nil, fmt.Errorf("pool %q has no kubernetes: section: give it one, or --kube-namespace and --kube-image", p.Name)
		}
	}
	client, err := kube.Client(kubeconfig)
	if err != nil {
		return nil, err
	}
	// Decided only now: a refusal above writes nothing.
	id, err := deployment()
	if err != nil {
		return nil, err
	}
	p, err := kube.New(kube.Options{Client: client, Namespaces: kube.Namespaces(cfg), Default: def, Deployment: id, Logger: logger})
	if err != nil {
		return nil, err
	}
	// The pools' images are kept on the nodes ahead of their jobs; without
	// the Role's daemonsets verbs the runners still run, each paying its pull.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := p.PrePull(ctx, cfg); err != nil {
		logger.Warn("keeping the pools' images on the nodes (pre-pull daemonsets)", "err", err)
	}
	return p, nil
}
