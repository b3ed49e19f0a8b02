#!/usr/bin/env bash
# Builds the Kubernetes provider's test servers from the Go module proxy, once,
# into the Go bin directory: kube-apiserver v1.37.2 and etcd v3.7.3. Each is
# skipped when its binary is already there. A fresh machine pays about five
# minutes and 2.5 GB of memory for kube-apiserver, once.
#
# k8s.io/kubernetes requires its staging modules (k8s.io/api, k8s.io/client-go,
# ...) at v0.0.0 and replaces them with local directories; a module that
# requires k8s.io/kubernetes must replace each with its published v0.x release.
set -euo pipefail

KUBE_VERSION=${KUBE_VERSION:-v1.37.2}
STAGING_VERSION=${STAGING_VERSION:-v0.37.2}
ETCD_VERSION=${ETCD_VERSION:-v3.7.3}
STAGING="api apiextensions-apiserver apimachinery apiserver cli-runtime client-go cloud-provider
cluster-bootstrap code-generator component-base component-helpers controller-manager cri-api cri-client
cri-streaming csi-translation-lib dynamic-resource-allocation endpointslice externaljwt kms kube-aggregator
kube-controller-manager kube-proxy kube-scheduler kubectl kubelet metrics mount-utils pod-security-admission
sample-apiserver streaming"

bin=$(go env GOPATH)/bin
mkdir -p "$bin"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if [ -x "$bin/etcd" ]; then
	echo "etcd: $bin/etcd is present"
else
	echo "etcd $ETCD_VERSION: building into $bin"
	mkdir -p "$work/etcd"
	(
		cd "$work/etcd"
		go mod init skiff.local/etcd-build >/dev/null 2>&1
		printf 'package tools\n\nimport _ "go.etcd.io/etcd/server/v3"\n' >tools.go
		go mod edit -require="go.etcd.io/etcd/server/v3@$ETCD_VERSION"
		go mod tidy
		go build -trimpath -ldflags '-s -w' -o "$bin/etcd.tmp" go.etcd.io/etcd/server/v3
	)
	mv "$bin/etcd.tmp" "$bin/etcd"
fi

if [ -x "$bin/kube-apiserver" ]; then
	echo "kube-apiserver: $bin/kube-apiserver is present"
else
	echo "kube-apiserver $KUBE_VERSION: building into $bin (about 5 minutes and 2.5 GB the first time)"
	mkdir -p "$work/kube"
	(
		cd "$work/kube"
		go mod init skiff.local/kube-apiserver-build >/dev/null 2>&1
		printf '//go:build tools\n\npackage tools\n\nimport _ "k8s.io/kubernetes/cmd/kube-apiserver"\n' >tools.go
		go mod edit -require="k8s.io/kubernetes@$KUBE_VERSION"
		for m in $STAGING; do
			go mod edit -replace="k8s.io/$m=k8s.io/$m@$STAGING_VERSION"
		done
		go mod tidy
		go build -trimpath -ldflags '-s -w' -o "$bin/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver
	)
	mv "$bin/kube-apiserver.tmp" "$bin/kube-apiserver"
fi
