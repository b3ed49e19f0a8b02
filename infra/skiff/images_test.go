package skiff

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"
)

// TestBakedImages: a pool with image: {bake: true} gets a weekly Image
// Builder pipeline from its base image with the runner component, an SSM
// parameter it launches from (the base image until the first build), a
// distribution that writes that parameter, and a lifecycle policy keeping
// the last two images; a pool that does not bake gets none of it.
func TestBakedImages(t *testing.T) {
	p := defaultProps()
	p.PoolsFile = "../testdata/baked-pools.yaml"
	p.Deployment = "ci"
	s, _, tmpl := synth(t, p)
	tmpl.ResourceCountIs(jsii.String("AWS::ImageBuilder::ImagePipeline"), jsii.Number(2))
	tmpl.ResourceCountIs(jsii.String("AWS::ImageBuilder::ImageRecipe"), jsii.Number(2))
	tmpl.ResourceCountIs(jsii.String("AWS::ImageBuilder::Component"), jsii.Number(1))
	tmpl.ResourceCountIs(jsii.String("AWS::ImageBuilder::LifecyclePolicy"), jsii.Number(2))
	if len(s.BakedImages) != 2 || s.BakedImages["plain"] != nil {
		t.Fatalf("baked images %v", s.BakedImages)
	}
	for _, pool := range []string{"cpu-baked", "gpu-baked"} {
		checkBakedPool(t, tmpl, pool)
	}
	tmpl.HasResourceProperties(jsii.String("AWS::ImageBuilder::ImageRecipe"), &map[string]any{
		"ParentImage": "ssm:/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64",
		"Components":  []any{map[string]any{"ComponentArn": assertions.Match_AnyValue()}},
		// the deployment's tag from creation: the build role tags only such images
		"AmiTags": map[string]any{"skiff:managed": "true", "skiff:deployment": "ci", "skiff:pool": "cpu-baked"},
	})
	checkImageTagging(t, tmpl)
	tmpl.HasResourceProperties(jsii.String("AWS::ImageBuilder::ImageRecipe"), &map[string]any{
		"ParentImage": "ssm:/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-amazon-linux-2023/latest/ami-id",
		"BlockDeviceMappings": []any{map[string]any{"DeviceName": "/dev/xvda",
			"Ebs": map[string]any{"VolumeSize": 100, "VolumeType": "gp3", "Encrypted": true, "DeleteOnTermination": true}}},
	})
	tmpl.HasResourceProperties(jsii.String("AWS::ImageBuilder::InfrastructureConfiguration"), &map[string]any{
		"InstanceTypes":           []any{"m7i.large"},
		"SubnetId":                "subnet-0a1b2c3d4e5f60718",
		"InstanceMetadataOptions": map[string]any{"HttpTokens": "required", "HttpPutResponseHopLimit": 1},
	})
	// The plain pool keeps its own image.
	tmpl.HasResourceProperties(jsii.String("AWS::EC2::LaunchTemplate"), &map[string]any{
		"LaunchTemplateName": assertions.Match_StringLikeRegexp(jsii.String(".*plain")),
		"LaunchTemplateData": assertions.Match_ObjectLike(&map[string]any{
			"ImageId": "resolve:ssm:/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64"}),
	})
	// Each distribution writes its own pool's parameter, the one the pool launches.
	checkParametersWritten(t, tmpl, "cpu-baked", "gpu-baked")
	// The component verifies the runner against the checksum between the
	// release notes' markers before installing it.
	checkRunnerComponent(t, tmpl)
}

// checkBakedPool checks the baking resources of pool: its weekly pipeline,
// its image parameter, a distribution writing it with the pool's tags, a
// launch template launching the parameter's image, and a lifecycle policy
// keeping two images.
func checkBakedPool(t *testing.T, tmpl assertions.Template, pool string) {
	t.Helper()
	param := "/skiff/ci/images/" + pool
	tmpl.HasResourceProperties(jsii.String("AWS::ImageBuilder::ImagePipeline"), &map[string]any{
		"Name":     "skiff-skiff-" + pool,
		"Schedule": map[string]any{"ScheduleExpression": "cron(0 4 ? * mon *)", "PipelineExecutionStartCondition": "EXPRESSION_MATCH_ONLY"},
		"Status":   "ENABLED",
	})
	tmpl.HasResourceProperties(jsii.String("AWS::SSM::Parameter"), &map[string]any{
		"Name": param, "DataType": "aws:ec2:image", "Type": "String",
	})
	tmpl.HasResourceProperties(jsii.String("AWS::ImageBuilder::DistributionConfiguration"), &map[string]any{
		"Distributions": []any{assertions.Match_ObjectLike(&map[string]any{
			"SsmParameterConfigurations": []any{map[string]any{"ParameterName": assertions.Match_AnyValue(), "DataType": "aws:ec2:image"}},
			"AmiDistributionConfiguration": assertions.Match_ObjectLike(&map[string]any{
				"AmiTags": assertions.Match_ObjectLike(&map[string]any{"skiff:pool": pool, "skiff:deployment": "ci"}),
			}),
		})},
	})
	// The pool launches the parameter's image.
	tmpl.HasResourceProperties(jsii.String("AWS::EC2::LaunchTemplate"), &map[string]any{
		"LaunchTemplateData": assertions.Match_ObjectLike(&map[string]any{"ImageId": "resolve:ssm:" + param}),
	})
	tmpl.HasResourceProperties(jsii.String("AWS::ImageBuilder::LifecyclePolicy"), &map[string]any{
		"ResourceType": "AMI_IMAGE",
		"PolicyDetails": []any{map[string]any{
			"Action": map[string]any{"Type": "DELETE", "IncludeResources": map[string]any{"Amis": true, "Snapshots": true}},
			"Filter": map[string]any{"Type": "COUNT", "Value": 2},
		}},
	})
}

// checkImageTagging checks that the build role lets the test phase's
// instance tag the new image with its runner version, the one key, on this
// deployment's images only.
func checkImageTagging(t *testing.T, tmpl assertions.Template) {
	t.Helper()
	var doc map[string]any
	if b, _ := json.Marshal(tmpl.ToJSON()); json.Unmarshal(b, &doc) != nil {
		t.Fatal("the template is not JSON")
	}
	tag := statements(t, doc, "SkiffImageBuildRole")["TagBakedImageRunnerVersion"]
	if got := js(tag["Condition"]); !strings.Contains(got, `"ec2:ResourceTag/skiff:deployment":"ci"`) ||
		!strings.Contains(got, `"ForAllValues:StringEquals":{"aws:TagKeys":["skiff:runner-version"]}`) {
		t.Errorf("the build role's image tagging condition %s, want this deployment's images and skiff:runner-version only", got)
	}
	if got := js(tag["Resource"]); !strings.Contains(got, "::image/*") {
		t.Errorf("the build role tags %s, want images", got)
	}
}

// checkParametersWritten checks that a distribution writes the image
// parameter of each of pools.
func checkParametersWritten(t *testing.T, tmpl assertions.Template, pools ...string) {
	t.Helper()
	params := map[string]string{} // logical id → parameter name
	for id, r := range *tmpl.FindResources(jsii.String("AWS::SSM::Parameter"), nil) {
		params[id], _ = (*r)["Properties"].(map[string]any)["Name"].(string)
	}
	written := map[string]bool{}
	for _, r := range *tmpl.FindResources(jsii.String("AWS::ImageBuilder::DistributionConfiguration"), nil) {
		dists := (*r)["Properties"].(map[string]any)["Distributions"].([]any)
		for _, d := range dists {
			for _, c := range d.(map[string]any)["SsmParameterConfigurations"].([]any) {
				pn, _ := c.(map[string]any)["ParameterName"].(map[string]any)
				ref, _ := pn["Ref"].(string)
				written[params[ref]] = true
			}
		}
	}
	for _, pool := range pools {
		if !written["/skiff/ci/images/"+pool] {
			t.Errorf("no distribution writes /skiff/ci/images/%s: %v", pool, written)
		}
	}
}

// checkRunnerComponent checks that the runner component verifies the
// runner's checksum, installs it and the CloudWatch agent, and tags the
// image with its runner version in its test phase.
func checkRunnerComponent(t *testing.T, tmpl assertions.Template) {
	t.Helper()
	comps := tmpl.FindResources(jsii.String("AWS::ImageBuilder::Component"), nil)
	for _, c := range *comps {
		data, _ := (*c)["Properties"].(map[string]any)["Data"].(string)
		for _, want := range []string{"<!-- BEGIN SHA linux-$arch -->", "sha256sum -c -", "/opt/actions-runner", "amazon-cloudwatch-agent",
			"- name: test", `--tags "Key=skiff:runner-version,Value=$version"`} {
			if !strings.Contains(data, want) {
				t.Errorf("the runner component lacks %q", want)
			}
		}
	}
}

// TestNoBakedImagesByDefault: baking is opt-in per pool.
func TestNoBakedImagesByDefault(t *testing.T) {
	tmpl, _ := defaultTemplate(t)
	tmpl.ResourceCountIs(jsii.String("AWS::ImageBuilder::ImagePipeline"), jsii.Number(0))
}

// TestRunnerAlarms: every pool has an alarm a week before its runners fall
// out of GitHub's window (the reconciler's RunnerDaysLeft gauge below 7) and
// one while GitHub refuses them (RunnerHeld).
func TestRunnerAlarms(t *testing.T) {
	tmpl, doc := defaultTemplate(t)
	pools := 0
	for _, r := range doc["Resources"].(map[string]any) {
		if r.(map[string]any)["Type"] == "AWS::EC2::LaunchTemplate" {
			pools++
		}
	}
	days := tmpl.FindResources(jsii.String("AWS::CloudWatch::Alarm"), &map[string]any{"Properties": map[string]any{
		"Metrics":            assertions.Match_ArrayWith(&[]any{assertions.Match_ObjectLike(&map[string]any{"Expression": "7 - days"})}),
		"ComparisonOperator": "GreaterThanThreshold", "Threshold": 0}})
	held := tmpl.FindResources(jsii.String("AWS::CloudWatch::Alarm"), &map[string]any{"Properties": map[string]any{
		"MetricName": "RunnerHeld", "ComparisonOperator": "GreaterThanThreshold", "Threshold": 0}})
	if pools == 0 || len(*days) != pools || len(*held) != pools {
		t.Errorf("%d pools, %d days-left alarms, %d held alarms", pools, len(*days), len(*held))
	}
	for _, a := range *days {
		if !strings.Contains(js((*a)["Properties"]), `"MetricName":"RunnerDaysLeft"`) {
			t.Errorf("days-left alarm %s", js(*a))
		}
	}
}
