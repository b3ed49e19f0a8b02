package skiff

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsimagebuilder"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsssm"
	"github.com/aws/jsii-runtime-go"

	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/pool"
)

// runnerComponent is the Image Builder component a baked image gets.
//
//go:embed image/runner.yaml
var runnerComponent string

// Image baking settings. Each says why it has its value.
const (
	// BakeSchedule builds every pool's image weekly (Mondays 04:00 UTC): a
	// runner release is then at most a week old in the image, three weeks
	// inside GitHub's 30-day window, and a build costs a few instance-minutes.
	BakeSchedule = "cron(0 4 ? * mon *)"
	// KeptImages is how many baked images of a pool are kept (the newest
	// and the one before, to go back to); the lifecycle policy deletes older
	// ones and their snapshots.
	KeptImages = 2
)

// buildInstanceType builds an image on a small instance of the pool's
// architecture: the build installs software, it runs no job (a GPU image is
// built without a GPU).
var buildInstanceType = map[string]string{"x64": "m7i.large", "arm64": "m7g.large"}

// BakedImage is what the CDK app made for a pool that bakes its image.
type BakedImage struct {
	// Parameter holds the newest image; the pool's launch template reads it.
	Parameter awsssm.StringParameter
	Pipeline  awsimagebuilder.CfnImagePipeline
	Recipe    awsimagebuilder.CfnImageRecipe
}

// buildImages creates, for each pool with image: {bake: true}, an EC2 Image
// Builder pipeline that bakes the pool's base image with the newest runner
// and the CloudWatch agent every week, publishes the image to
// names.BakedImageParameter (created here holding the base image until the
// first build), and keeps the last KeptImages.
func (s *Skiff) buildImages() error {
	var baked []*pool.Pool
	for _, p := range s.Pools.Pools {
		if p.EC2 != nil && p.EC2.Image.Bake {
			baked = append(baked, p)
		}
	}
	s.BakedImages = map[string]*BakedImage{}
	if len(baked) == 0 {
		return nil
	}
	role := awsiam.NewRole(s.Construct, jsii.String("ImageBuildRole"), &awsiam.RoleProps{
		AssumedBy:   awsiam.NewServicePrincipal(jsii.String("ec2.amazonaws.com"), nil),
		Description: jsii.String("skiff " + s.prefix + ": Image Builder build instances of the baked runner images"),
		ManagedPolicies: &[]awsiam.IManagedPolicy{
			awsiam.ManagedPolicy_FromAwsManagedPolicyName(jsii.String("AmazonSSMManagedInstanceCore")),
			awsiam.ManagedPolicy_FromAwsManagedPolicyName(jsii.String("EC2InstanceProfileForImageBuilder")),
		},
	})
	// The test phase's instance, launched from the new image, tags that
	// image with the runner version it holds: the reconciler reads the tag
	// once per image id (DescribeImages). Only that key, only on this
	// deployment's images (the recipe tags them at creation).
	role.AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Sid:       jsii.String("TagBakedImageRunnerVersion"),
		Actions:   jsii.Strings("ec2:CreateTags"),
		Resources: &[]*string{jsii.String(strings.Join([]string{"arn", *awscdk.Aws_PARTITION(), "ec2", *awscdk.Aws_REGION(), "", "image/*"}, ":"))},
		Conditions: &map[string]any{
			"StringEquals":              map[string]any{"ec2:ResourceTag/" + names.TagDeployment: s.Deployment},
			"ForAllValues:StringEquals": map[string]any{"aws:TagKeys": []string{names.TagRunnerVersion}},
		},
	}))
	suppress(role, "AwsSolutions-IAM5",
		"image ids are not known before a build; CreateTags requires ec2:ResourceTag/skiff:deployment = the stack's deployment and the one key skiff:runner-version",
		"Resource::arn:<AWS::Partition>:ec2:<AWS::Region>::image/*")
	suppress(role, "AwsSolutions-IAM4",
		"the two AWS managed policies Image Builder documents for a build instance: the SSM agent that runs the build, and Image Builder's own calls",
		"Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonSSMManagedInstanceCore",
		"Policy::arn:<AWS::Partition>:iam::aws:policy/EC2InstanceProfileForImageBuilder")
	profile := awsiam.NewCfnInstanceProfile(s.Construct, jsii.String("ImageBuildProfile"), &awsiam.CfnInstanceProfileProps{
		Roles: &[]any{role.RoleName()},
	})
	lifecycleRole := awsiam.NewRole(s.Construct, jsii.String("ImageLifecycleRole"), &awsiam.RoleProps{
		AssumedBy:   awsiam.NewServicePrincipal(jsii.String("imagebuilder.amazonaws.com"), nil),
		Description: jsii.String("skiff " + s.prefix + ": deletes baked runner images beyond the last two"),
		ManagedPolicies: &[]awsiam.IManagedPolicy{
			awsiam.ManagedPolicy_FromAwsManagedPolicyName(jsii.String("service-role/EC2ImageBuilderLifecycleExecutionPolicy")),
		},
	})
	suppress(lifecycleRole, "AwsSolutions-IAM4",
		"the AWS managed policy Image Builder documents for lifecycle policies: it deletes the images and snapshots the policy selects",
		"Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/EC2ImageBuilderLifecycleExecutionPolicy")
	component := awsimagebuilder.NewCfnComponent(s.Construct, jsii.String("RunnerComponent"), &awsimagebuilder.CfnComponentProps{
		// Components are immutable: a changed document is a new component.
		Name:        jsii.String("skiff-" + s.prefix + "-runner-" + shortHash(runnerComponent)),
		Platform:    jsii.String("Linux"),
		Version:     jsii.String("1.0.0"),
		Description: jsii.String("skiff: the newest GitHub Actions runner (checksum verified) and the CloudWatch agent"),
		Data:        jsii.String(runnerComponent),
	})
	for _, p := range baked {
		b, err := s.bakedImage(p, profile, lifecycleRole, component)
		if err != nil {
			return err
		}
		s.BakedImages[p.Name] = b
	}
	return nil
}

// bakedImage builds pool p's recipe, infrastructure, distribution,
// pipeline, lifecycle policy and image parameter.
func (s *Skiff) bakedImage(p *pool.Pool, profile awsiam.CfnInstanceProfile, lifecycleRole awsiam.Role,
	component awsimagebuilder.CfnComponent) (*BakedImage, error) {
	id := "Image" + constructName(p.Name)
	parent, initial := "", ""
	switch im := p.EC2.Image; {
	case im.SSM != "":
		parent, initial = "ssm:"+im.SSM, "{{resolve:ssm:"+im.SSM+"}}"
	case im.AMI != "":
		parent, initial = im.AMI, im.AMI
	default:
		return nil, fmt.Errorf("pool %q: a baked image starts from an ami or an ssm image", p.Name)
	}
	if len(p.EC2.Subnets) == 0 {
		return nil, fmt.Errorf("pool %q: a baked image is built in one of the pool's subnets; it has none", p.Name)
	}
	paramName := names.BakedImageParameter(s.Deployment, p.Name)
	// The pool launches from the parameter from the start: it holds the base
	// image until the first build replaces it. CloudFormation writes it once;
	// the pipeline owns its value from then on.
	param := awsssm.NewStringParameter(s.Construct, jsii.String(id+"Parameter"), &awsssm.StringParameterProps{
		ParameterName: jsii.String(paramName),
		StringValue:   jsii.String(initial),
		DataType:      awsssm.ParameterDataType_AWS_EC2_IMAGE,
		Description:   jsii.String("skiff " + s.prefix + ": the newest baked runner image of pool " + p.Name),
	})
	name := "skiff-" + s.prefix + "-" + p.Name
	recipe := awsimagebuilder.NewCfnImageRecipe(s.Construct, jsii.String(id+"Recipe"), &awsimagebuilder.CfnImageRecipeProps{
		// Recipes are immutable: what changes the recipe changes its name.
		Name:        jsii.String(name + "-" + shortHash(parent, fmt.Sprint(p.EC2.DiskGiB), *component.Name())),
		Version:     jsii.String("1.0.0"),
		ParentImage: jsii.String(parent),
		Description: jsii.String("skiff pool " + p.Name + ": " + parent + " with the newest runner and the CloudWatch agent"),
		// On the image from its creation, before the test phase tags it
		// with its runner version (the build role's condition).
		AmiTags: &map[string]*string{names.TagManaged: jsii.String(names.ManagedValue),
			names.TagDeployment: jsii.String(s.Deployment), names.TagPool: jsii.String(p.Name)},
		Components: &[]any{&awsimagebuilder.CfnImageRecipe_ComponentConfigurationProperty{
			ComponentArn: component.AttrArn(),
		}},
		BlockDeviceMappings: &[]any{&awsimagebuilder.CfnImageRecipe_InstanceBlockDeviceMappingProperty{
			DeviceName: jsii.String(s.props.RootDevice),
			Ebs: &awsimagebuilder.CfnImageRecipe_EbsInstanceBlockDeviceSpecificationProperty{
				VolumeSize: jsii.Number(float64(p.EC2.DiskGiB)), VolumeType: jsii.String("gp3"),
				Encrypted: jsii.Bool(true), DeleteOnTermination: jsii.Bool(true),
			},
		}},
	})
	infra := awsimagebuilder.NewCfnInfrastructureConfiguration(s.Construct, jsii.String(id+"Infrastructure"), &awsimagebuilder.CfnInfrastructureConfigurationProps{
		Name:                jsii.String(name),
		Description:         jsii.String("skiff pool " + p.Name + ": where its image is built"),
		InstanceProfileName: profile.Ref(),
		InstanceTypes:       jsii.Strings(buildInstanceType[p.Architecture]),
		SubnetId:            jsii.String(p.EC2.Subnets[0]),
		SecurityGroupIds:    &[]*string{s.SecurityGroup.SecurityGroupId()},
		InstanceMetadataOptions: &awsimagebuilder.CfnInfrastructureConfiguration_InstanceMetadataOptionsProperty{
			HttpTokens: jsii.String("required"), HttpPutResponseHopLimit: jsii.Number(1),
		},
		TerminateInstanceOnFailure: jsii.Bool(true),
		ResourceTags:               &map[string]*string{names.TagDeployment: jsii.String(s.Deployment), names.TagPool: jsii.String(p.Name)},
	})
	dist := awsimagebuilder.NewCfnDistributionConfiguration(s.Construct, jsii.String(id+"Distribution"), &awsimagebuilder.CfnDistributionConfigurationProps{
		Name:        jsii.String(name),
		Description: jsii.String("skiff pool " + p.Name + ": the image in this region, its id in " + paramName),
		Distributions: &[]any{&awsimagebuilder.CfnDistributionConfiguration_DistributionProperty{
			Region: awscdk.Aws_REGION(),
			// A JSON property in CloudFormation: its keys as CloudFormation spells them.
			AmiDistributionConfiguration: map[string]any{
				"Name": name + "-{{ imagebuilder:buildDate }}",
				"AmiTags": map[string]string{
					names.TagManaged: names.ManagedValue, names.TagDeployment: s.Deployment, names.TagPool: p.Name,
				},
			},
			SsmParameterConfigurations: &[]any{&awsimagebuilder.CfnDistributionConfiguration_SsmParameterConfigurationProperty{
				ParameterName: param.ParameterName(),
				DataType:      jsii.String("aws:ec2:image"),
			}},
		}},
	})
	pipeline := awsimagebuilder.NewCfnImagePipeline(s.Construct, jsii.String(id+"Pipeline"), &awsimagebuilder.CfnImagePipelineProps{
		Name:                           jsii.String(name),
		Description:                    jsii.String("skiff pool " + p.Name + ": bakes the newest runner into its image every week"),
		ImageRecipeArn:                 recipe.AttrArn(),
		InfrastructureConfigurationArn: infra.AttrArn(),
		DistributionConfigurationArn:   dist.AttrArn(),
		EnhancedImageMetadataEnabled:   jsii.Bool(true),
		Schedule: &awsimagebuilder.CfnImagePipeline_ScheduleProperty{
			ScheduleExpression: jsii.String(BakeSchedule),
			// The recipe does not change when a runner is released: build on
			// the schedule, whatever changed.
			PipelineExecutionStartCondition: jsii.String("EXPRESSION_MATCH_ONLY"),
		},
		Status: jsii.String("ENABLED"),
	})
	awsimagebuilder.NewCfnLifecyclePolicy(s.Construct, jsii.String(id+"Lifecycle"), &awsimagebuilder.CfnLifecyclePolicyProps{
		Name:          jsii.String(name),
		Description:   jsii.String(fmt.Sprintf("skiff pool %s: keep the last %d baked images", p.Name, KeptImages)),
		ExecutionRole: lifecycleRole.RoleArn(),
		ResourceType:  jsii.String("AMI_IMAGE"),
		PolicyDetails: &[]any{&awsimagebuilder.CfnLifecyclePolicy_PolicyDetailProperty{
			Action: &awsimagebuilder.CfnLifecyclePolicy_ActionProperty{
				Type:             jsii.String("DELETE"),
				IncludeResources: &awsimagebuilder.CfnLifecyclePolicy_IncludeResourcesProperty{Amis: jsii.Bool(true), Snapshots: jsii.Bool(true)},
			},
			Filter: &awsimagebuilder.CfnLifecyclePolicy_FilterProperty{Type: jsii.String("COUNT"), Value: jsii.Number(KeptImages)},
		}},
		ResourceSelection: &awsimagebuilder.CfnLifecyclePolicy_ResourceSelectionProperty{
			Recipes: &[]any{&awsimagebuilder.CfnLifecyclePolicy_RecipeSelectionProperty{
				Name: recipe.Name(), SemanticVersion: recipe.Version(),
			}},
		},
	})
	awscdk.NewCfnOutput(s.Construct, jsii.String(id+"PipelineArn"), &awscdk.CfnOutputProps{
		Description: jsii.String("pool " + p.Name + "'s image pipeline: start it now with aws imagebuilder start-image-pipeline-execution --image-pipeline-arn"),
		Value:       pipeline.AttrArn(),
	})
	return &BakedImage{Parameter: param, Pipeline: pipeline, Recipe: recipe}, nil
}

// shortHash is 8 hex digits of the SHA-256 of parts: a name that changes
// with what an immutable Image Builder resource is made of.
func shortHash(parts ...string) string {
	sum := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(sum[:4])
}

// constructName turns a pool name (a-z, 0-9, -) into a construct id part.
func constructName(pool string) string {
	var b strings.Builder
	up := true
	for _, r := range pool {
		switch {
		case r == '-':
			up = true
		case up:
			b.WriteString(strings.ToUpper(string(r)))
			up = false
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
