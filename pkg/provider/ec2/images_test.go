package ec2_test

import (
	"context"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	sdkec2 "github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/provider/ec2"
	"github.com/skiffci/skiff/pkg/provider/providertest"
	"github.com/skiffci/skiff/pkg/room"
)

// countingImages counts the DescribeImages calls that reach EC2.
type countingImages struct {
	api   *sdkec2.Client
	calls atomic.Int32
}

func (c *countingImages) DescribeImages(ctx context.Context, in *sdkec2.DescribeImagesInput, optFns ...func(*sdkec2.Options)) (*sdkec2.DescribeImagesOutput, error) {
	c.calls.Add(1)
	return c.api.DescribeImages(ctx, in, optFns...)
}

// makeImage makes an AMI in moto from a new instance, tagged with tags.
func makeImage(t *testing.T, api *sdkec2.Client, name string, tags map[string]string) string {
	t.Helper()
	src := runInstances(t, api, 1, nil)[0]
	out, err := api.CreateImage(context.Background(), &sdkec2.CreateImageInput{InstanceId: aws.String(src), Name: aws.String(name)})
	if err != nil {
		t.Fatalf("CreateImage: %v", err)
	}
	var tl []types.Tag
	for k, v := range tags {
		tl = append(tl, types.Tag{Key: aws.String(k), Value: aws.String(v)})
	}
	if len(tl) > 0 {
		if _, err := api.CreateTags(context.Background(), &sdkec2.CreateTagsInput{Resources: []string{aws.ToString(out.ImageId)}, Tags: tl}); err != nil {
			t.Fatalf("CreateTags: %v", err)
		}
	}
	return aws.ToString(out.ImageId)
}

// TestImageRunnerVersionMoto: List tags each instance with the runner
// version its AMI's tag names (the Image Builder pipeline's), reading each
// image id once; an instance whose own tag names a version keeps it, and an
// image without the tag, or with one that is no version, tags nothing.
func TestImageRunnerVersionMoto(t *testing.T) {
	t.Parallel()
	api := motoEC2(t)
	ctx := context.Background()
	suffix := strconv.FormatInt(time.Now().UnixNano(), 36)
	pool := "moto-images-" + suffix
	baked := makeImage(t, api, "baked-"+suffix, map[string]string{names.TagRunnerVersion: "2.334.0", names.TagPool: pool})
	plain := makeImage(t, api, "plain-"+suffix, nil)
	odd := makeImage(t, api, "odd-"+suffix, map[string]string{names.TagRunnerVersion: "latest"})
	launch := func(image string, extra map[string]string) string {
		tags := map[string]string{names.TagManaged: names.ManagedValue, names.TagPool: pool, names.TagOwner: "acme"}
		for k, v := range extra {
			tags[k] = v
		}
		in := &sdkec2.RunInstancesInput{ImageId: aws.String(image), InstanceType: types.InstanceTypeC7iLarge,
			MinCount: aws.Int32(1), MaxCount: aws.Int32(1)}
		var tl []types.Tag
		for k, v := range tags {
			tl = append(tl, types.Tag{Key: aws.String(k), Value: aws.String(v)})
		}
		in.TagSpecifications = []types.TagSpecification{{ResourceType: types.ResourceTypeInstance, Tags: tl}}
		out, err := api.RunInstances(ctx, in)
		if err != nil {
			t.Fatalf("RunInstances: %v", err)
		}
		return aws.ToString(out.Instances[0].InstanceId)
	}
	cases := []struct {
		name, id, want string
	}{
		{"baked image", launch(baked, nil), "2.334.0"},
		{"second runner of the baked image", launch(baked, nil), "2.334.0"},
		{"image without the tag", launch(plain, nil), ""},
		{"tag that is no version", launch(odd, nil), ""},
		{"the instance's own tag", launch(baked, map[string]string{names.TagRunnerVersion: "2.333.0"}), "2.333.0"},
	}
	images := &countingImages{api: api}
	p, err := ec2.NewProvider(ec2.ProviderOptions{API: api, Images: images, Registrations: nopRegistrations{}, Capacity: room.CapacityMemory{Store: room.NewMemory()},
		Partition: "aws", Region: "eu-west-1", Account: "123456789012", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		byID := providertest.ListByID(t, p, provider.Filter{Pool: pool})
		for _, tc := range cases {
			in, ok := byID[tc.id]
			if !ok {
				t.Fatalf("%s: instance %s not listed", tc.name, tc.id)
			}
			if v := in.Tags[names.TagRunnerVersion]; v != tc.want {
				t.Errorf("%s: %s=%q, want %q", tc.name, names.TagRunnerVersion, v, tc.want)
			}
		}
	}
	if n := images.calls.Load(); n != 1 {
		t.Errorf("DescribeImages called %d times over two lists, want 1 (each image read once)", n)
	}
}
