package container

import (
	"context"

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
	if got.Config != nil {
		v = got.Config.Labels[LabelRunnerVersion]
	}
	if _, err := runnerversion.Parse(v); err != nil {
		v = ""
	}
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
