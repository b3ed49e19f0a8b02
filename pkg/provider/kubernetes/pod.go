package kubernetes

// The objects of a runner: its Pod and its JIT configuration's Secret.

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provider"
)

// buildPod is the i-th runner's Pod of plan pn.
func buildPod(pn plan, i int, r provider.RunnerRequest, deployment string) *corev1.Pod {
	s := pn.Settings
	name := PodName(pn.Token, r.Name)
	id := s.Namespace + "/" + name
	tags := r.Tags(pn.Pool, pn.Token)
	if deployment != "" {
		tags[names.TagDeployment] = deployment
	}
	tagJSON, _ := json.Marshal(tags) // a map of strings always encodes
	deadline := int64(pn.Lifetime / time.Second)
	env := []corev1.EnvVar{
		{Name: EnvJITConfigFile, Value: JITFile},
		{Name: EnvInstanceID, Value: id},
		{Name: provider.EnvDeprecatedExitCode, Value: "1"},
	}
	f, mode := false, int32(0o440)
	psc := &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
	csc := &corev1.SecurityContext{}
	sc := s.SecurityContext
	psc.RunAsUser, psc.RunAsGroup, psc.FSGroup = sc.RunAsUser, sc.RunAsGroup, sc.FSGroup
	if sc.RunAsNonRoot {
		t := true
		psc.RunAsNonRoot = &t
		def := int64(DefaultUser)
		if psc.RunAsUser == nil {
			psc.RunAsUser = &def
		}
		if psc.RunAsGroup == nil {
			psc.RunAsGroup = &def
		}
		if psc.FSGroup == nil {
			psc.FSGroup = psc.RunAsGroup // the Secret's file is group-readable
		}
	}
	if sc.Privileged {
		t := true
		csc.Privileged = &t
	} else {
		csc.AllowPrivilegeEscalation = &f
		csc.Capabilities = &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}
	}
	automount := s.AutomountServiceAccountToken
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: s.Namespace,
			Labels: map[string]string{LabelManaged: "true", LabelPool: labelValue(pn.Pool), LabelToken: labelValue(pn.Token),
				LabelRunner: labelValue(r.Name)},
			Annotations: map[string]string{AnnotationTags: string(tagJSON)},
			Finalizers:  []string{FinalizerUsage},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			ActiveDeadlineSeconds:        &deadline,
			AutomountServiceAccountToken: &automount,
			EnableServiceLinks:           &f,
			ServiceAccountName:           s.ServiceAccountName,
			NodeSelector:                 s.NodeSelector,
			PriorityClassName:            s.PriorityClassName,
			SecurityContext:              psc,
			Volumes: []corev1.Volume{{Name: "jit", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
				SecretName: SecretName(name), DefaultMode: &mode, Items: []corev1.KeyToPath{{Key: secretKey, Path: secretKey}},
			}}}},
			Containers: []corev1.Container{{
				Name: ContainerName, Image: s.Image, Env: env, Resources: pn.Resources,
				VolumeMounts:             []corev1.VolumeMount{{Name: "jit", MountPath: JITDir, ReadOnly: true}},
				SecurityContext:          csc,
				TerminationMessagePolicy: corev1.TerminationMessageReadFile,
			}},
		},
	}
	if s.APIServerAccess {
		pod.Labels[LabelAPIServer] = "true"
	}
	runOn(&pod.Spec, &s)
	if deployment != "" {
		pod.Labels[LabelDeployment] = labelValue(deployment)
	}
	return pod
}

// buildSecret is the Secret of a runner's Pod, owned by it.
func buildSecret(pod *corev1.Pod, reg provider.Registration) *corev1.Secret {
	t := true
	labels := map[string]string{}
	for k, v := range pod.Labels {
		labels[k] = v
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: SecretName(pod.Name), Namespace: pod.Namespace, Labels: labels,
			// No blockOwnerDeletion: it would need update on pods/finalizers
			// where OwnerReferencesPermissionEnforcement is on, and Terminate
			// deletes the Secret itself.
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID}},
		},
		Type:      corev1.SecretTypeOpaque,
		Immutable: &t,
		Data:      map[string][]byte{secretKey: []byte(reg.JITConfig)},
	}
}

// labelValue is s where it is a valid label value, else a hash of it.
func labelValue(s string) string {
	if len(validation.IsValidLabelValue(s)) == 0 {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return "h-" + hex.EncodeToString(sum[:12])
}

// runOn sets the pool's runtime class and tolerations on spec: a runner
// Pod's, and its image's pre-pull DaemonSet's, which must reach the same
// nodes.
func runOn(spec *corev1.PodSpec, s *pool.Kubernetes) {
	if s.RuntimeClassName != "" {
		rc := s.RuntimeClassName
		spec.RuntimeClassName = &rc
	}
	for _, t := range s.Tolerations {
		spec.Tolerations = append(spec.Tolerations, corev1.Toleration{Key: t.Key, Operator: corev1.TolerationOperator(t.Operator),
			Value: t.Value, Effect: corev1.TaintEffect(t.Effect), TolerationSeconds: t.Seconds})
	}
}
