package ec2_test

import (
	"context"
	"strings"
	"testing"

	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/provider/ec2"
	"github.com/skiffci/skiff/pkg/provider/ec2/ec2fake"
)

// A pool that bakes its image launches the image the deployment's
// pipeline published, not its base image.
func TestPlanImage(t *testing.T) {
	t.Parallel()
	p, err := ec2.NewProvider(ec2.ProviderOptions{API: ec2fake.New(), Registrations: &memRegistrations{items: nil},
		Capacity: ledger.NewLaunchMemory(), Partition: "aws", Region: "eu-west-1", Account: "123456789012",
		Deployment: "prod", LaunchTemplatePrefix: "skiff-"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		image pool.Image
		want  string
	}{
		{"baked", pool.Image{SSM: "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64", Bake: true},
			`"image_id":"resolve:ssm:/skiff/prod/images/cpu"`},
		{"ssm", pool.Image{SSM: "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64"},
			`"image_id":"resolve:ssm:/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64"`},
		{"ami", pool.Image{AMI: "ami-0123456789abcdef0"}, `"image_id":"ami-0123456789abcdef0"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			spec := pool.Spec{Shared: pool.Shared{Pool: "cpu", Backend: pool.BackendEC2, Architecture: "x64"},
				EC2: &pool.EC2{InstanceTypes: []string{"c7i.large"}, Subnets: []string{"subnet-0aaaaaaaa"}, Capacity: pool.CapacityOnDemand,
					DiskGiB: 30, Image: tc.image}}
			plan, err := p.Plan(context.Background(), provider.Launch{Spec: spec, Token: "skiff-t", Runners: []provider.Runner{{Name: "r", JobID: 1}}})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(plan), tc.want) {
				t.Errorf("plan %s lacks %s", plan, tc.want)
			}
		})
	}
}
