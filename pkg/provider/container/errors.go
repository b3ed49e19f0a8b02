package container

import (
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/skiffci/skiff/pkg/provider"
)

// classify turns an engine error into a provider error of one kind:
//
//   - no such image is final ErrInvalid naming the image (pull it, or fix
//     the pool's image);
//   - the engine out of memory, CPUs, GPUs or disk (an unavailable device,
//     "cannot allocate memory", "no space left") is ErrCapacity: the job
//     waits in the pool's room;
//   - the runtime refusing to start the image's entrypoint is final
//     ErrInvalid naming the image;
//   - the engine unreachable, a lost answer, 5xx is ErrTransient;
//   - a refused argument or permission is final ErrInvalid.
func classify(what, image string, err error) *provider.Error {
	msg := err.Error()
	e := &provider.Error{Message: what + ": " + msg}
	low := strings.ToLower(msg)
	switch {
	case client.IsErrConnectionFailed(err):
		e.Kind, e.Code = provider.ErrTransient, "EngineUnreachable"
		e.Detail = "the container engine does not answer: start it (docker, or podman system service) and check DOCKER_HOST"
	case image != "" && (cerrdefs.IsNotFound(err) || strings.Contains(low, "no such image") || strings.Contains(low, "image not known")):
		e.Kind, e.Code, e.Final = provider.ErrInvalid, "NoSuchImage", true
		e.Detail = "the engine has no image " + image + " and cannot pull it: build or pull it on this host, or fix the pool's container.image"
	case strings.Contains(low, "cannot allocate memory") || strings.Contains(low, "no space left") ||
		strings.Contains(low, "resource temporarily unavailable") || strings.Contains(low, "could not select device driver") ||
		strings.Contains(low, "insufficient"):
		e.Kind, e.Code = provider.ErrCapacity, "EngineOutOfResources"
	case strings.Contains(low, "oci runtime") || strings.Contains(low, "oci permission denied") || strings.Contains(low, "runc create failed") ||
		strings.Contains(low, "executable file not found"):
		e.Kind, e.Code, e.Final = provider.ErrInvalid, "ImageCannotStart", true
		e.Detail = "the runtime cannot start the image's entrypoint: check the image " + image + " (its entrypoint, and that its user may run it)"
	case cerrdefs.IsInvalidArgument(err), cerrdefs.IsPermissionDenied(err), cerrdefs.IsUnauthorized(err), cerrdefs.IsNotFound(err):
		e.Kind, e.Code, e.Final = provider.ErrInvalid, "Refused", true
	case cerrdefs.IsResourceExhausted(err):
		e.Kind, e.Code = provider.ErrCapacity, "EngineOutOfResources"
	default:
		e.Kind, e.Code = provider.ErrTransient, "Engine"
	}
	return e
}
