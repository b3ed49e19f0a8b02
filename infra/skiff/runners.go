package skiff

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/jsii-runtime-go"

	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/runnerversion"
	"github.com/skiffci/skiff/pkg/userdata"
)

// buildNetwork imports the operator's VPC by id (no lookup: synth stays
// offline) or creates a small one: public subnets in two zones and no NAT
// gateway unless NatGateways asks for some.
func (s *Skiff) buildNetwork() {
	if s.props.VpcID != "" {
		s.Vpc = awsec2.Vpc_FromVpcAttributes(s.Construct, jsii.String("Vpc"), &awsec2.VpcAttributes{
			VpcId:             jsii.String(s.props.VpcID),
			AvailabilityZones: awscdk.Fn_GetAzs(nil),
		})
		// Only the security group uses the VPC, by id; the pools file names
		// the subnets, so nothing needs the zones at synth time.
		awscdk.Annotations_Of(s.Vpc).AcknowledgeWarning(jsii.String("@aws-cdk/aws-ec2:vpcAttributeIsListTokenavailabilityZones"),
			jsii.String("only the VPC id is used"))
	} else {
		subnets := []*awsec2.SubnetConfiguration{{
			Name: jsii.String("runners"), SubnetType: awsec2.SubnetType_PUBLIC, CidrMask: jsii.Number(20),
		}}
		if s.props.NatGateways > 0 {
			subnets = append(subnets, &awsec2.SubnetConfiguration{
				Name: jsii.String("private"), SubnetType: awsec2.SubnetType_PRIVATE_WITH_EGRESS, CidrMask: jsii.Number(20),
			})
		}
		vpc := awsec2.NewVpc(s.Construct, jsii.String("Vpc"), &awsec2.VpcProps{
			MaxAzs:              jsii.Number(2),
			NatGateways:         jsii.Number(float64(s.props.NatGateways)),
			SubnetConfiguration: &subnets,
		})
		// VPC flow logs to CloudWatch Logs: what a security review asks for first.
		vpc.AddFlowLog(jsii.String("FlowLog"), &awsec2.FlowLogOptions{
			Destination: awsec2.FlowLogDestination_ToCloudWatchLogs(awslogs.NewLogGroup(s.Construct, jsii.String("FlowLogs"), &awslogs.LogGroupProps{
				Retention: s.props.LogRetention, RemovalPolicy: awscdk.RemovalPolicy_DESTROY,
			}), nil),
			TrafficType: awsec2.FlowLogTrafficType_REJECT,
		})
		s.Vpc = vpc
		ids := make([]string, 0, 4)
		for _, sn := range *vpc.PublicSubnets() {
			ids = append(ids, *sn.SubnetId())
		}
		if s.props.NatGateways > 0 {
			ids = ids[:0]
			for _, sn := range *vpc.PrivateSubnets() {
				ids = append(ids, *sn.SubnetId())
			}
		}
		awscdk.NewCfnOutput(s.Construct, jsii.String("RunnerSubnets"), &awscdk.CfnOutputProps{
			Description: jsii.String("the created VPC's runner subnets: list them as subnets: in the pools file"),
			Value:       awscdk.Fn_Join(jsii.String(","), jsii.Strings(ids...)),
		})
	}
	s.SecurityGroup = awsec2.NewSecurityGroup(s.Construct, jsii.String("RunnerSecurityGroup"), &awsec2.SecurityGroupProps{
		Vpc:              s.Vpc,
		Description:      jsii.String("skiff runners: no inbound rules; outbound to GitHub, AWS APIs and what jobs fetch"),
		AllowAllOutbound: jsii.Bool(true),
	})
}

// buildRunners creates the runners' log group, role, instance profile and
// one launch template per pool.
func (s *Skiff) buildRunners() error {
	s.RunnerLogGroup = awslogs.NewLogGroup(s.Construct, jsii.String("RunnerLogs"), &awslogs.LogGroupProps{
		// A literal name: the CloudWatch agent config in the user data names it.
		LogGroupName:  jsii.String("/skiff/" + s.prefix + "/runners"),
		Retention:     s.props.LogRetention,
		RemovalPolicy: awscdk.RemovalPolicy_DESTROY,
	})
	s.RunnerRole = awsiam.NewRole(s.Construct, jsii.String("RunnerRole"), &awsiam.RoleProps{
		AssumedBy:   awsiam.NewServicePrincipal(jsii.String("ec2.amazonaws.com"), nil),
		Description: jsii.String("skiff " + s.prefix + ": runner instances (one job each; the job can use this role)"),
	})
	for _, st := range s.runnerStatements() {
		s.RunnerRole.AddToPolicy(st)
	}
	suppress(s.RunnerRole, "AwsSolutions-IAM5",
		"CreateTags on instance/* is limited by aws:ARN = ${ec2:SourceInstanceARN} to the calling instance itself, and to two tag keys",
		"Resource::"+arnPattern("ec2", "instance/*"))
	suppress(s.RunnerRole, "AwsSolutions-IAM5",
		"cloudwatch:PutMetricData has no resource-level permissions; the cloudwatch:namespace condition limits it to the calling instance's own namespace, "+names.RunnerMetricsNamespaceOf("${ec2:SourceInstanceARN}"),
		"Resource::*")
	suppress(s.RunnerRole, "AwsSolutions-IAM5",
		"the CloudWatch agent names a log stream per instance at boot; the wildcard is within the runners' own log group",
		"/^Resource::<.*RunnerLogs.*\\.Arn>:log-stream:\\*$/")
	profile := awsiam.NewInstanceProfile(s.Construct, jsii.String("RunnerProfile"), &awsiam.InstanceProfileProps{Role: s.RunnerRole})

	s.LaunchTemplates = map[string]awsec2.CfnLaunchTemplate{}
	for _, p := range s.Pools.Pools {
		lt, err := s.launchTemplate(p, profile)
		if err != nil {
			return err
		}
		s.LaunchTemplates[p.Name] = lt
	}
	return nil
}

// runnerStatements is everything a runner (and so the job on it) may do:
// only things about itself.
func (s *Skiff) runnerStatements() []awsiam.PolicyStatement {
	return []awsiam.PolicyStatement{
		// Read-and-delete its own registration: the key is its own ARN.
		awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Sid:       jsii.String("OwnRegistration"),
			Actions:   jsii.Strings("dynamodb:DeleteItem"),
			Resources: &[]*string{s.RegistrationTable.TableArn()},
			Conditions: &map[string]any{
				"ForAllValues:StringEquals": map[string]any{"dynamodb:LeadingKeys": []any{"${ec2:SourceInstanceARN}"}},
			},
		}),
		awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Sid:       jsii.String("RegistrationKey"),
			Actions:   jsii.Strings("kms:Decrypt"),
			Resources: &[]*string{s.RegistrationKey.KeyArn()},
			Conditions: &map[string]any{
				"StringEquals": map[string]any{"kms:ViaService": "dynamodb." + *awscdk.Aws_REGION() + ".amazonaws.com"},
			},
		}),
		// The job hooks tag the instance itself, with two keys only; the boot
		// script says when GitHub refused its runner's version, and when a warm
		// instance is ready to wait for its job.
		awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Sid:       jsii.String("TagSelf"),
			Actions:   jsii.Strings("ec2:CreateTags"),
			Resources: &[]*string{s.arn("ec2", "instance/*")},
			Conditions: &map[string]any{
				"StringEquals":              map[string]any{"aws:ARN": "${ec2:SourceInstanceARN}"},
				"ForAllValues:StringEquals": map[string]any{"aws:TagKeys": []any{names.TagJobStarted, names.TagJobCompleted, names.TagRunnerOutdated, names.TagWarmReady}},
			},
		}),
		// Metrics only in the instance's own namespace (Skiff/Runner/<its
		// ARN>), which the metrics records read its job's peaks from: a job
		// cannot publish into another instance's series.
		awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Sid:       jsii.String("RunnerMetrics"),
			Actions:   jsii.Strings("cloudwatch:PutMetricData"),
			Resources: jsii.Strings("*"),
			Conditions: &map[string]any{
				"StringEquals": map[string]any{"cloudwatch:namespace": names.RunnerMetricsNamespaceOf("${ec2:SourceInstanceARN}")},
			},
		}),
		// Logs into the runners' log group. CloudWatch Logs cannot tie a
		// stream to the calling instance (a stream name cannot hold the
		// instance ARN's colons, and no condition key names the stream): a
		// job can append lines to another instance's streams, never read
		// them. The records read nothing from logs (docs/runner-boot.md).
		awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Sid:       jsii.String("RunnerLogs"),
			Actions:   jsii.Strings("logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"),
			Resources: &[]*string{s.RunnerLogGroup.LogGroupArn(), jsii.String(*s.RunnerLogGroup.LogGroupArn() + ":log-stream:*")},
		}),
	}
}

// launchTemplate creates pool p's launch template, named
// names.LaunchTemplate(prefix, pool) as scale-up expects.
func (s *Skiff) launchTemplate(p *pool.Pool, profile awsiam.InstanceProfile) (awsec2.CfnLaunchTemplate, error) {
	ud, err := userdata.Render(userdata.Params{
		Pool:              p.Name,
		Arch:              p.Architecture,
		GPU:               p.EC2.Image.GPU || p.HasGPU(),
		RegistrationTable: s.physicalName(names.RoleRegistrationTable),
		Lifetime:          p.MaxLifetime,
		// The instance powers itself off when its runner gets no job within the pool's idle
		// timeout, the same value scale-down reaps idle runners by (whole seconds).
		IdleTimeout: p.IdleTimeout.Round(time.Second),
		// The same value as scale-up's SKIFF_REGISTRATION_TIMEOUT.
		RegistrationTimeout: userdata.DefaultRegistrationTimeout,
		// The pool's pin, else the deployment's: a fallback, since every
		// registration names the runner scale-up resolved for the pool.
		RunnerVersion:    runnerPin(p, s.props.RunnerVersion),
		RunnerSHA256:     runnerPin2(p, s.props.RunnerSHA256),
		Metrics:          s.props.RunnerMetrics,
		MetricsNamespace: names.RunnerMetricsNamespace,
		LogGroup:         "/skiff/" + s.prefix + "/runners",
	})
	if err != nil {
		return nil, fmt.Errorf("rendering the user data of pool %q: %w", p.Name, err)
	}
	image, err := imageID(p.EC2.Image)
	if p.EC2.Image.Bake {
		image = "resolve:ssm:" + names.BakedImageParameter(s.Deployment, p.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("pool %q: %w", p.Name, err)
	}
	tags := []*awscdk.CfnTag{
		{Key: jsii.String(names.TagManaged), Value: jsii.String(names.ManagedValue)},
		{Key: jsii.String(names.TagDeployment), Value: jsii.String(s.Deployment)},
		{Key: jsii.String(names.TagPool), Value: jsii.String(p.Name)},
	}
	keys := make([]string, 0, len(p.EC2.Tags))
	for k := range p.EC2.Tags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		tags = append(tags, &awscdk.CfnTag{Key: jsii.String(k), Value: jsii.String(p.EC2.Tags[k])})
	}
	name := names.LaunchTemplate(s.props.LaunchTemplatePrefix, p.Name)
	lt := awsec2.NewCfnLaunchTemplate(s.Construct, jsii.String("LaunchTemplate-"+p.Name), &awsec2.CfnLaunchTemplateProps{
		LaunchTemplateName: jsii.String(name),
		LaunchTemplateData: &awsec2.CfnLaunchTemplate_LaunchTemplateDataProperty{
			ImageId:                           jsii.String(image),
			IamInstanceProfile:                &awsec2.CfnLaunchTemplate_IamInstanceProfileProperty{Arn: profile.InstanceProfileArn()},
			SecurityGroupIds:                  &[]*string{s.SecurityGroup.SecurityGroupId()},
			InstanceInitiatedShutdownBehavior: jsii.String("terminate"),
			UserData:                          awscdk.Fn_Base64(jsii.String(string(ud))),
			MetadataOptions: &awsec2.CfnLaunchTemplate_MetadataOptionsProperty{
				HttpEndpoint:            jsii.String("enabled"),
				HttpTokens:              jsii.String("required"),
				HttpPutResponseHopLimit: jsii.Number(1),
			},
			BlockDeviceMappings: &[]*awsec2.CfnLaunchTemplate_BlockDeviceMappingProperty{{
				DeviceName: jsii.String(s.props.RootDevice),
				Ebs: &awsec2.CfnLaunchTemplate_EbsProperty{
					VolumeType:          jsii.String("gp3"),
					VolumeSize:          jsii.Number(float64(p.EC2.DiskGiB)),
					Encrypted:           jsii.Bool(true),
					DeleteOnTermination: jsii.Bool(true),
				},
			}},
			Monitoring: &awsec2.CfnLaunchTemplate_MonitoringProperty{Enabled: jsii.Bool(false)},
			TagSpecifications: &[]*awsec2.CfnLaunchTemplate_TagSpecificationProperty{
				{ResourceType: jsii.String("instance"), Tags: &tags},
				{ResourceType: jsii.String("volume"), Tags: &tags},
			},
		},
	})
	return lt, nil
}

// imageID is the launch template's image: an AMI id, or resolve:ssm: so
// that EC2 resolves a public parameter (the latest AL2023 or Deep Learning
// AMI) at every launch, not once per deploy. Images by name need an AMI
// lookup with AWS credentials at synth time, which the offline default
// stack does not do.
func imageID(im pool.Image) (string, error) {
	switch {
	case im.AMI != "":
		return im.AMI, nil
	case im.SSM != "":
		return "resolve:ssm:" + im.SSM, nil
	}
	return "", fmt.Errorf("image %s: only ami: and ssm: images are supported by the CDK app; resolve the name to an AMI id first", im)
}

// runnerPin is the runner version a pool's user data downloads when its
// registration names none: the pool's pin, else the deployment's.
func runnerPin(p *pool.Pool, deployment string) string {
	if p.RunnerVersion != runnerversion.Latest {
		return p.RunnerVersion
	}
	return deployment
}

// runnerPin2 is runnerPin's checksum.
func runnerPin2(p *pool.Pool, deployment string) string {
	if p.RunnerVersion != runnerversion.Latest {
		return p.RunnerSHA256
	}
	return deployment
}

// arnPattern is how cdk-nag prints s.arn(service, resource) in findings.
func arnPattern(service, resource string) string {
	return "arn:<AWS::Partition>:" + service + ":<AWS::Region>:<AWS::AccountId>:" + resource
}

// arn builds arn:<partition>:<service>:<region>:<account>:<resource>.
func (s *Skiff) arn(service, resource string) *string {
	return jsii.String(strings.Join([]string{"arn", *awscdk.Aws_PARTITION(), service, *awscdk.Aws_REGION(), *awscdk.Aws_ACCOUNT_ID(), resource}, ":"))
}
