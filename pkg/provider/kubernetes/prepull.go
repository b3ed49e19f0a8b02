package kubernetes

// The image pre-pull: a DaemonSet per pool that keeps the pool's runner
// image on every node its runners may be scheduled on, so that no job
// pays the pull.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/skiffci/skiff/pkg/pool"
)

// Labels and annotation of the pre-pull DaemonSets.
const (
	// LabelPrePull (value "true") marks a pre-pull DaemonSet and its Pods.
	LabelPrePull = "skiff/prepull"
	// AnnotationPrePullSpec is the hash of the DaemonSet's Pod template
	// as skiff built it: a different hash is an update.
	AnnotationPrePullSpec = "skiff/prepull-spec"
	// EnvHold makes the runner image's entrypoint (skiff-podhelper) hold:
	// run no runner, wait for SIGTERM.
	EnvHold = "SKIFF_PODHELPER_HOLD"
	// PrePullContainerName is the pre-pull Pod's one container.
	PrePullContainerName = "hold"
)

// The pre-pull container's resources: skiff-podhelper waiting for a
// signal resides in a few MiB and uses no CPU; the requests reserve next
// to nothing of the node for it.
var (
	prePullCPU       = resource.MustParse("1m")
	prePullMemory    = resource.MustParse("16Mi")
	prePullMemoryMax = resource.MustParse("32Mi")
)

// PrePullName is the name of a pool's pre-pull DaemonSet: derived from the
// deployment and the pool, so that two deployments sharing a namespace
// keep theirs apart.
func PrePullName(deployment, poolName string) string {
	sum := sha256.Sum256([]byte(deployment + "/" + poolName))
	return "skiff-prepull-" + hex.EncodeToString(sum[:8])
}

// PrePull makes the pre-pull DaemonSets match the pools: one per pool (its
// kubernetes: section, else Options.Default), in the pool's namespace,
// whose Pods run the pool's image — its entrypoint holding, nothing else —
// on the nodes the pool's runners may use (the section's nodeSelector,
// tolerations, runtime class and service account, no token). A DaemonSet
// that is missing is created; one whose Pod template differs (the image
// changed) is updated, and the cluster rolls its Pods, pulling the new
// image; one of this deployment whose pool is gone is deleted. The
// kubelet keeps an image a running Pod uses, so the runners' image stays
// on the node. Errors are joined; each names its pool.
func (p *Provider) PrePull(ctx context.Context, cfg *pool.Config) error {
	want := map[string]*appsv1.DaemonSet{} // namespace/name → desired
	for _, pl := range cfg.Pools {
		s := pl.Kubernetes
		if s == nil {
			s = p.o.Default
		}
		if s == nil || s.Image == "" {
			continue
		}
		ds := buildPrePull(pl.Name, s, p.o.Deployment)
		want[ds.Namespace+"/"+ds.Name] = ds
	}
	var errs []error
	for _, ds := range want {
		if err := p.applyPrePull(ctx, ds); err != nil {
			errs = append(errs, err)
		}
	}
	sel := LabelManaged + "=true," + LabelPrePull + "=true"
	if p.o.Deployment != "" {
		sel += "," + LabelDeployment + "=" + labelValue(p.o.Deployment)
	}
	for _, ns := range p.namespaces {
		list, err := p.o.Client.AppsV1().DaemonSets(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			errs = append(errs, classify("listing pre-pull daemonsets in "+ns, err))
			continue
		}
		for _, ds := range list.Items {
			if want[ds.Namespace+"/"+ds.Name] != nil {
				continue
			}
			err := p.o.Client.AppsV1().DaemonSets(ns).Delete(ctx, ds.Name, metav1.DeleteOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, classify("deleting pre-pull daemonset "+ns+"/"+ds.Name, err))
				continue
			}
			p.o.Logger.Info("removed the image pre-pull of a pool that is gone", "namespace", ns, "daemonset", ds.Name,
				"pool", ds.Labels[LabelPool])
		}
	}
	return errors.Join(errs...)
}

// applyPrePull creates ds, or updates the one there when its template
// differs.
func (p *Provider) applyPrePull(ctx context.Context, ds *appsv1.DaemonSet) error {
	api := p.o.Client.AppsV1().DaemonSets(ds.Namespace)
	log := p.o.Logger.With("namespace", ds.Namespace, "daemonset", ds.Name, "pool", ds.Labels[LabelPool],
		"image", ds.Spec.Template.Spec.Containers[0].Image)
	got, err := api.Get(ctx, ds.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if _, err := api.Create(ctx, ds, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return classify("creating the image pre-pull of pool "+ds.Labels[LabelPool], err)
		}
		log.Info("created the image pre-pull")
		return nil
	case err != nil:
		return classify("reading the image pre-pull of pool "+ds.Labels[LabelPool], err)
	case got.Annotations[AnnotationPrePullSpec] == ds.Annotations[AnnotationPrePullSpec]:
		return nil
	}
	up := got.DeepCopy()
	up.Labels, up.Annotations, up.Spec.Template = ds.Labels, ds.Annotations, ds.Spec.Template
	if _, err := api.Update(ctx, up, metav1.UpdateOptions{}); err != nil {
		return classify("updating the image pre-pull of pool "+ds.Labels[LabelPool], err)
	}
	log.Info("updated the image pre-pull")
	return nil
}

// buildPrePull is pool's pre-pull DaemonSet for its settings s.
func buildPrePull(poolName string, s *pool.Kubernetes, deployment string) *appsv1.DaemonSet {
	name := PrePullName(deployment, poolName)
	labels := map[string]string{LabelManaged: "true", LabelPrePull: "true", LabelPool: labelValue(poolName)}
	if deployment != "" {
		labels[LabelDeployment] = labelValue(deployment)
	}
	podLabels := map[string]string{LabelPrePull: "true", "skiff/prepull-name": name}
	f, t := false, true
	grace := int64(0) // the holding helper has nothing to finish
	user := int64(DefaultUser)
	if s.SecurityContext.RunAsUser != nil {
		user = *s.SecurityContext.RunAsUser
	}
	spec := corev1.PodSpec{
		AutomountServiceAccountToken:  &f,
		EnableServiceLinks:            &f,
		ServiceAccountName:            s.ServiceAccountName,
		NodeSelector:                  s.NodeSelector,
		TerminationGracePeriodSeconds: &grace,
		SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: &t, RunAsUser: &user,
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
		Containers: []corev1.Container{{
			Name: PrePullContainerName, Image: s.Image, // pulled as the runners' Pods pull it (Always for :latest)
			Env: []corev1.EnvVar{{Name: EnvHold, Value: "1"}},
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: prePullCPU, corev1.ResourceMemory: prePullMemory},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: prePullMemoryMax},
			},
			SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: &f, ReadOnlyRootFilesystem: &t,
				Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
		}},
	}
	runOn(&spec, s) // the nodes the pool's runners go to
	tmpl := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: podLabels}, Spec: spec}
	b, _ := json.Marshal(tmpl) // a Pod template always encodes
	sum := sha256.Sum256(b)
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.Namespace, Labels: labels,
			Annotations: map[string]string{AnnotationPrePullSpec: hex.EncodeToString(sum[:12])}},
		Spec: appsv1.DaemonSetSpec{
			Selector:       &metav1.LabelSelector{MatchLabels: podLabels},
			Template:       tmpl,
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType},
		},
	}
}
