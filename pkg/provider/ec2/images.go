package ec2

import (
	"context"
	"slices"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	sdkec2 "github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/runnerversion"
)

// ImageAPI is the EC2 call that reads an image's tags; *ec2.Client
// implements it.
type ImageAPI interface {
	DescribeImages(ctx context.Context, params *sdkec2.DescribeImagesInput, optFns ...func(*sdkec2.Options)) (*sdkec2.DescribeImagesOutput, error)
}

var _ ImageAPI = (*sdkec2.Client)(nil)

// imagesPerCall bounds the image ids of one DescribeImages filter.
const imagesPerCall = 200

// imageVersions is the runner version each image id's tag
// names.TagRunnerVersion names ("" for none, or for an image EC2 no longer
// describes), read once per image id: an AMI's tags are set when it is
// built.
type imageVersions struct {
	mu    sync.Mutex
	known map[string]string
}

// tagRunnerVersions tags each instance whose tags name no runner version
// with the one its image's tag names; images maps instance id to image id.
// The image ids not read yet cost one DescribeImages per 200; when EC2
// fails, the instances stay untagged and their images are read again at
// the next list.
func (p *Provider) tagRunnerVersions(ctx context.Context, ins []provider.Instance, images map[string]string) {
	if p.o.Images == nil {
		return
	}
	p.images.mu.Lock()
	defer p.images.mu.Unlock()
	if p.images.known == nil {
		p.images.known = map[string]string{}
	}
	var unread []string
	for _, in := range ins {
		id := images[in.ID]
		if _, ok := p.images.known[id]; !ok && id != "" && in.Tags[names.TagRunnerVersion] == "" && !slices.Contains(unread, id) {
			unread = append(unread, id)
		}
	}
	for batch := range slices.Chunk(unread, imagesPerCall) {
		read, err := p.readImages(ctx, batch)
		if err != nil {
			p.o.Logger.Warn("reading the runner version of images failed", "images", batch, "error", err)
			continue
		}
		for _, id := range batch {
			p.images.known[id] = read[id]
		}
	}
	for _, in := range ins {
		if v := p.images.known[images[in.ID]]; v != "" && in.Tags[names.TagRunnerVersion] == "" {
			in.Tags[names.TagRunnerVersion] = v
		}
	}
}

// readImages is the runner version tag of each image EC2 describes among
// ids (an id filter: a deregistered image is left out, not an error).
func (p *Provider) readImages(ctx context.Context, ids []string) (map[string]string, error) {
	out := map[string]string{}
	pages := sdkec2.NewDescribeImagesPaginator(p.o.Images, &sdkec2.DescribeImagesInput{
		Filters: []types.Filter{{Name: aws.String("image-id"), Values: ids}}})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, im := range page.Images {
			for _, t := range im.Tags {
				if aws.ToString(t.Key) != names.TagRunnerVersion {
					continue
				}
				if v := aws.ToString(t.Value); validVersion(v) {
					out[aws.ToString(im.ImageId)] = v
				}
			}
		}
	}
	return out, nil
}

// validVersion reports whether v is a runner version.
func validVersion(v string) bool {
	_, err := runnerversion.Parse(v)
	return err == nil
}
