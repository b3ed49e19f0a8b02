package container

import (
	"context"

	dockerspec "github.com/moby/docker-image-spec/specs-go/v1"

	"github.com/skiffci/skiff/pkg/runnerversion"
)

// LabelRunnerVersion is the image label that names the version of the
// runner the image holds (infra/kubernetes/runner/Dockerfile sets it from
// the runner image it builds on, and checks it against the listener). The
// provider reads it through the engine's image inspect and tags each
// runner names.TagRunnerVersion with it.
const LabelRunnerVersion = "skiff.runner-version"

// imageVersion is the runner version image says it holds: its
// LabelRunnerVersion, "" when it has none, when the label is not a runner
// version or when the engine cannot inspect it. One inspect per image
// reference until the provider pulls that reference again.
func (p *Provider) imageVersion(ctx context.Context, image string) string {
	p.mu.Lock()
	v, ok := p.versions[image]
	p.mu.Unlock()
	if ok {
		return v
	}
	got, err := p.o.Engine.ImageInspect(ctx, image)
	if err != nil {
		p.o.Logger.Warn("the runner image's version is unknown: inspecting the image failed", "image", image, "error", err)
		return ""
	}
	v = labelVersion(got.Config)
	p.mu.Lock()
	p.versions[image] = v
	p.mu.Unlock()
	return v
}

// forgetVersion drops what is known of image's runner: the reference was
// pulled again and may name another image now.
func (p *Provider) forgetVersion(image string) {
	p.mu.Lock()
	delete(p.versions, image)
	p.mu.Unlock()
}

// labelVersion is the runner version an image's configuration's
// LabelRunnerVersion names, "" when it names none that is a version.
func labelVersion(c *dockerspec.DockerOCIImageConfig) string {
	if c == nil {
		return ""
	}
	v := c.Labels[LabelRunnerVersion]
	if _, err := runnerversion.Parse(v); err != nil {
		return ""
	}
	return v
}
