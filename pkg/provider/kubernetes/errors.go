package kubernetes

import (
	"errors"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/skiffci/skiff/pkg/provider"
)

// roleDetail tells the operator what a refusal by RBAC needs.
const roleDetail = "skiff's service account needs the Role of infra/kubernetes (create, get, list, delete of pods and secrets) in every runner namespace"

// classify turns an API error into a provider error of one kind, with the
// API server's own reason and message (which hold no secret: a Secret's
// data never comes back in an error).
//
//   - an exhausted ResourceQuota (403 "exceeded quota", or a quota whose
//     usage the quota controller has not computed yet) is ErrQuota: wait;
//   - any other 403, 401, 400, 404 (a missing namespace), 422 and 405 are a
//     final ErrInvalid: an operator must fix the namespace, the Role or
//     the pool;
//   - 429 is ErrThrottled (client-go has already honoured Retry-After);
//   - 5xx, 409, timeouts and a connection that failed are ErrTransient.
func classify(what string, err error) *provider.Error {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return &provider.Error{Kind: provider.ErrTransient, Code: "Unanswered", Message: what + ": " + err.Error()}
	}
	s := status.Status()
	e := &provider.Error{Code: string(s.Reason), Message: what + ": " + s.Message}
	if e.Code == "" {
		e.Code = http.StatusText(int(s.Code))
	}
	switch {
	case apierrors.IsForbidden(err) && isQuota(s):
		e.Kind, e.Code = provider.ErrQuota, "ResourceQuota"
		e.Detail = "a ResourceQuota of the runner namespace is exhausted: runners launch as its usage falls, or raise the quota"
	case apierrors.IsForbidden(err):
		e.Kind, e.Final, e.Detail = provider.ErrInvalid, true, roleDetail
	case apierrors.IsUnauthorized(err):
		e.Kind, e.Final = provider.ErrInvalid, true
		e.Detail = "the API server does not accept skiff's credentials (kubeconfig or in-cluster service account)"
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err), apierrors.IsNotFound(err), apierrors.IsMethodNotSupported(err),
		apierrors.IsNotAcceptable(err), apierrors.IsUnsupportedMediaType(err), apierrors.IsRequestEntityTooLargeError(err):
		e.Kind, e.Final = provider.ErrInvalid, true
	case apierrors.IsTooManyRequests(err):
		e.Kind = provider.ErrThrottled
	default: // 5xx, conflicts, timeouts
		e.Kind = provider.ErrTransient
	}
	return e
}

// isQuota reports whether a 403 is the ResourceQuota admission's refusal.
func isQuota(s metav1.Status) bool {
	return strings.Contains(s.Message, "exceeded quota") || strings.Contains(s.Message, "status unknown for quota")
}
