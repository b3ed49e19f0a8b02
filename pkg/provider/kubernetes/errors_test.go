package kubernetes

import (
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/skiffci/skiff/pkg/provider"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	pods := schema.GroupResource{Resource: "pods"}
	cases := []struct {
		name  string
		err   error
		kind  error
		final bool
	}{
		{"quota exhausted", apierrors.NewForbidden(pods, "p", errors.New("exceeded quota: runners, requested: pods=1, used: pods=1, limited: pods=1")), provider.ErrQuota, false},
		{"quota not yet counted", apierrors.NewForbidden(pods, "p", errors.New("status unknown for quota: runners, resources: pods")), provider.ErrQuota, false},
		{"rbac", apierrors.NewForbidden(pods, "p", errors.New(`User "skiff" cannot create resource "pods"`)), provider.ErrInvalid, true},
		{"invalid", apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "p", field.ErrorList{field.Required(field.NewPath("spec"), "")}), provider.ErrInvalid, true},
		{"no namespace", apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, "runners"), provider.ErrInvalid, true},
		{"unauthorized", apierrors.NewUnauthorized("bad token"), provider.ErrInvalid, true},
		{"throttled", apierrors.NewTooManyRequests("slow down", 1), provider.ErrThrottled, false},
		{"internal", apierrors.NewInternalError(errors.New("etcd")), provider.ErrTransient, false},
		{"unavailable", apierrors.NewServiceUnavailable("starting"), provider.ErrTransient, false},
		{"timeout", apierrors.NewTimeoutError("slow", 1), provider.ErrTransient, false},
		{"conflict", apierrors.NewConflict(pods, "p", errors.New("changed")), provider.ErrTransient, false},
		{"no answer", errors.New("dial tcp 127.0.0.1:6443: connect: connection refused"), provider.ErrTransient, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := classify("creating pod", tc.err)
			if !errors.Is(got, tc.kind) || provider.Permanent(got) != tc.final {
				t.Errorf("classify(%v) = %v (%s, final %v), want %s final %v", tc.err, got, provider.Reason(got), provider.Permanent(got), tc.kind, tc.final)
			}
		})
	}
}
