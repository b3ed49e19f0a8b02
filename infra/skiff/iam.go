package skiff

import (
	"sort"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/jsii-runtime-go"

	"github.com/skiffci/skiff/pkg/names"
)

// perJobTagKeys are the tags scale-up sets on an instance of a shared fleet
// after launch (docs/scaleup.md, "Tags"): the only keys it may add outside
// the launch itself.
var perJobTagKeys = []string{names.TagJobID, names.TagRunID, names.TagRunnerName, names.TagRepository}

// launchTemplateARNs are the ARNs of the pools' launch templates, sorted by pool.
func (s *Skiff) launchTemplateARNs() []*string {
	pools := make([]string, 0, len(s.LaunchTemplates))
	for p := range s.LaunchTemplates {
		pools = append(pools, p)
	}
	sort.Strings(pools)
	out := make([]*string, len(pools))
	for i, p := range pools {
		out[i] = s.arn("ec2", "launch-template/"+*s.LaunchTemplates[p].Ref())
	}
	return out
}

// subnetARNs are the subnets scale-up may launch into: SubnetIDs, else the
// pools' subnets; subnet/* when a pool names none (a created VPC).
func (s *Skiff) subnetARNs() []*string {
	ids := s.props.SubnetIDs
	if len(ids) == 0 {
		seen := map[string]bool{}
		for _, p := range s.Pools.Pools {
			if len(p.EC2.Subnets) == 0 {
				return []*string{s.arn("ec2", "subnet/*")}
			}
			for _, sn := range p.EC2.Subnets {
				if !seen[sn] {
					seen[sn] = true
					ids = append(ids, sn)
				}
			}
		}
		sort.Strings(ids)
	}
	out := make([]*string, len(ids))
	for i, id := range ids {
		out[i] = s.arn("ec2", "subnet/"+id)
	}
	return out
}

// ssmParameterARNs are the SSM parameters the pools' images resolve from:
// public ones (/aws/service/...) have no account in their ARN.
func (s *Skiff) ssmParameterARNs() []*string {
	seen := map[string]bool{}
	var out []*string
	for _, p := range s.Pools.Pools {
		name := p.EC2.Image.SSM
		if name == "" || seen[name] {
			continue
		}
		seen[name] = true
		account := *awscdk.Aws_ACCOUNT_ID()
		if strings.HasPrefix(name, "/aws/") {
			account = ""
		}
		out = append(out, jsii.String(strings.Join([]string{"arn", *awscdk.Aws_PARTITION(), "ssm", *awscdk.Aws_REGION(), account, "parameter" + name}, ":")))
	}
	return out
}

// ec2Statements are scale-up's EC2 permissions, each as narrow as EC2's
// resource-level permissions allow: the launch, and its own runners' tags,
// start (a stopped warm instance a job takes) and end. docs/deploy.md
// explains each.
func (s *Skiff) ec2Statements() []awsiam.PolicyStatement {
	return append(s.launchPermissions(), s.tagOwnRunners(), s.ownInstances("TerminateOwnRunners", "ec2:TerminateInstances"),
		s.ownInstances("StartOwnRunners", "ec2:StartInstances"),
		// DescribeInstances has no resource-level permissions.
		awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Sid:       jsii.String("DescribeInstances"),
			Actions:   jsii.Strings("ec2:DescribeInstances"),
			Resources: jsii.Strings("*"),
		}))
}

// launchPermissions are what launching runners takes, for every role that
// launches them through the EC2 provider: scale-up for jobs, the reconciler
// for warm instances (docs/warm-pools.md). A launch comes from skiff's
// templates only, tags its instances as this deployment's, passes the runner
// role, resolves the pools' images and writes each instance's registration.
func (s *Skiff) launchPermissions() []awsiam.PolicyStatement {
	statements := append(s.launchStatements(), s.tagAtLaunch(), s.passRunnerRole(), fleetServiceLinkedRoles())
	if params := s.ssmParameterARNs(); len(params) > 0 {
		// resolve:ssm: images are resolved with the launcher's permissions.
		statements = append(statements, awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Sid:       jsii.String("ResolveImageParameters"),
			Actions:   jsii.Strings("ssm:GetParameters", "ssm:GetParameter"),
			Resources: &params,
		}))
	}
	return append(statements, awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Sid:       jsii.String("WriteRegistrations"),
		Actions:   jsii.Strings("dynamodb:PutItem"),
		Resources: &[]*string{s.RegistrationTable.TableArn()},
	}), tableKeyStatement(s.RegistrationKey.KeyArn(), true))
}

// launchStatements let scale-up launch fleets and instances from skiff's
// templates only, tagged as skiff's.
func (s *Skiff) launchStatements() []awsiam.PolicyStatement {
	templates := s.launchTemplateARNs()
	templateList := make([]any, len(templates))
	for i, t := range templates {
		templateList[i] = *t
	}
	// Tagged as skiff's, and as this deployment's: the other roles end only
	// instances carrying both (ownResource).
	managed := map[string]any{"aws:RequestTag/" + names.TagManaged: names.ManagedValue,
		"aws:RequestTag/" + names.TagDeployment: s.Deployment}
	noAccount := func(resource string) *string {
		return jsii.String(strings.Join([]string{"arn", *awscdk.Aws_PARTITION(), "ec2", *awscdk.Aws_REGION(), "", resource}, ":"))
	}
	return []awsiam.PolicyStatement{
		// A fleet or instance can only be launched from skiff's templates.
		awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Sid:       jsii.String("LaunchFromSkiffTemplates"),
			Actions:   jsii.Strings("ec2:CreateFleet", "ec2:RunInstances"),
			Resources: &templates,
		}),
		// Instances and volumes must carry skiff:managed=true and the
		// deployment at creation.
		awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Sid:        jsii.String("FleetTaggedInstances"),
			Actions:    jsii.Strings("ec2:CreateFleet"),
			Resources:  &[]*string{s.arn("ec2", "instance/*"), s.arn("ec2", "volume/*")},
			Conditions: &map[string]any{"StringEquals": managed},
		}),
		// The fleet's RunInstances: tagged, and from a skiff template.
		awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Sid:       jsii.String("RunTaggedInstancesFromSkiffTemplates"),
			Actions:   jsii.Strings("ec2:RunInstances"),
			Resources: &[]*string{s.arn("ec2", "instance/*"), s.arn("ec2", "volume/*")},
			Conditions: &map[string]any{
				"StringEquals": managed,
				"ArnEquals":    map[string]any{"ec2:LaunchTemplate": templateList},
			},
		}),
		// What a launch uses but cannot tag: the fleet request itself (skiff
		// tags instances and volumes only), network interfaces, spot requests,
		// the pools' subnets, the runners' security group, images.
		awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Sid:     jsii.String("LaunchUses"),
			Actions: jsii.Strings("ec2:CreateFleet", "ec2:RunInstances"),
			Resources: jsii.Strings(append([]string{
				*s.arn("ec2", "fleet/*"),
				*s.arn("ec2", "network-interface/*"),
				*s.arn("ec2", "spot-instances-request/*"),
				*s.arn("ec2", "security-group/"+*s.SecurityGroup.SecurityGroupId()),
				*noAccount("image/*"),
				*noAccount("snapshot/*"),
			}, derefs(s.subnetARNs())...)...),
		}),
	}
}

// tagAtLaunch allows the tags in the launch request itself.
func (s *Skiff) tagAtLaunch() awsiam.PolicyStatement {
	return awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Sid:       jsii.String("TagAtLaunch"),
		Actions:   jsii.Strings("ec2:CreateTags"),
		Resources: &[]*string{s.arn("ec2", "instance/*"), s.arn("ec2", "volume/*")},
		Conditions: &map[string]any{
			"StringEquals": map[string]any{"ec2:CreateAction": []any{"CreateFleet", "RunInstances"}},
		},
	})
}

// tagOwnRunners allows the per-job tags on skiff's own instances after
// launch (a fleet of several runners; a warm instance a job takes), four
// keys only.
func (s *Skiff) tagOwnRunners() awsiam.PolicyStatement {
	return awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Sid:       jsii.String("TagOwnRunners"),
		Actions:   jsii.Strings("ec2:CreateTags"),
		Resources: &[]*string{s.arn("ec2", "instance/*")},
		Conditions: &map[string]any{
			"StringEquals":              s.ownResource(),
			"ForAllValues:StringEquals": map[string]any{"aws:TagKeys": toAny(perJobTagKeys)},
		},
	})
}

// ownInstances allows action on this deployment's skiff instances only
// (ownResource).
func (s *Skiff) ownInstances(sid, action string) awsiam.PolicyStatement {
	return awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Sid:        jsii.String(sid),
		Actions:    jsii.Strings(action),
		Resources:  &[]*string{s.arn("ec2", "instance/*")},
		Conditions: &map[string]any{"StringEquals": s.ownResource()},
	})
}

// ownResource is the condition an action on an existing instance needs:
// the instance is skiff's and this deployment's (tagged at launch, which
// launchStatements require), so that two deployments in one account and
// region cannot end or tag each other's runners.
func (s *Skiff) ownResource() map[string]any {
	return map[string]any{"ec2:ResourceTag/" + names.TagManaged: names.ManagedValue,
		"ec2:ResourceTag/" + names.TagDeployment: s.Deployment}
}

// passRunnerRole lets a launch give its instances the runner role.
func (s *Skiff) passRunnerRole() awsiam.PolicyStatement {
	return awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Sid:        jsii.String("PassRunnerRole"),
		Actions:    jsii.Strings("iam:PassRole"),
		Resources:  &[]*string{s.RunnerRole.RoleArn()},
		Conditions: &map[string]any{"StringEquals": map[string]any{"iam:PassedToService": "ec2.amazonaws.com"}},
	})
}

// fleetServiceLinkedRoles: EC2 Fleet and spot need their service-linked
// roles; the first launch creates them when they are missing.
func fleetServiceLinkedRoles() awsiam.PolicyStatement {
	return awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Sid:     jsii.String("FleetServiceLinkedRoles"),
		Actions: jsii.Strings("iam:CreateServiceLinkedRole"),
		Resources: jsii.Strings(
			"arn:"+*awscdk.Aws_PARTITION()+":iam::"+*awscdk.Aws_ACCOUNT_ID()+":role/aws-service-role/ec2fleet.amazonaws.com/*",
			"arn:"+*awscdk.Aws_PARTITION()+":iam::"+*awscdk.Aws_ACCOUNT_ID()+":role/aws-service-role/spot.amazonaws.com/*",
		),
		Conditions: &map[string]any{"StringEquals": map[string]any{"iam:AWSServiceName": []any{"ec2fleet.amazonaws.com", "spot.amazonaws.com"}}},
	})
}

// suppressLaunch justifies each wildcard of launchPermissions, and instance/*
// of the launching roles' statements on existing instances.
func (s *Skiff) suppressLaunch(role awsiam.IRole) {
	const rule = "AwsSolutions-IAM5"
	suppress(role, rule, "instances and volumes get their ids at launch: CreateFleet/RunInstances require aws:RequestTag/skiff:managed=true "+
		"and skiff:deployment (RunInstances also ec2:LaunchTemplate = a skiff template), CreateTags at launch ec2:CreateAction; "+
		"every action on an existing instance (CreateTags of four keys, Start/Stop/TerminateInstances) requires "+
		"ec2:ResourceTag/skiff:managed=true and skiff:deployment = the stack's deployment",
		"Resource::"+arnPattern("ec2", "instance/*"), "Resource::"+arnPattern("ec2", "volume/*"))
	suppress(role, rule, "a launch also creates a fleet request, network interfaces and spot requests whose ids do not exist yet; skiff does not tag them, "+
		"and the launch is bound to skiff's launch templates and tagged instances by the other statements",
		"Resource::"+arnPattern("ec2", "fleet/*"), "Resource::"+arnPattern("ec2", "network-interface/*"), "Resource::"+arnPattern("ec2", "spot-instances-request/*"))
	suppress(role, rule, "images and their snapshots are the pools' (public SSM parameters resolve to a new AMI id every release); which image runs is set by the launch template",
		"Resource::arn:<AWS::Partition>:ec2:<AWS::Region>::image/*", "Resource::arn:<AWS::Partition>:ec2:<AWS::Region>::snapshot/*")
	suppress(role, rule, "service-linked role names are fixed by AWS; iam:AWSServiceName limits the action to EC2 Fleet's and spot's",
		"Resource::arn:<AWS::Partition>:iam::<AWS::AccountId>:role/aws-service-role/ec2fleet.amazonaws.com/*",
		"Resource::arn:<AWS::Partition>:iam::<AWS::AccountId>:role/aws-service-role/spot.amazonaws.com/*")
	if len(s.subnetARNs()) == 1 && *s.subnetARNs()[0] == *s.arn("ec2", "subnet/*") {
		suppress(role, rule, "a pool names no subnet (a VPC created by this stack, whose subnet ids are unknown at synth time)",
			"Resource::"+arnPattern("ec2", "subnet/*"))
	}
}

func derefs(ps []*string) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = *p
	}
	return out
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
