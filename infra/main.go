// Command infra is skiff's default CDK app: one stack built from the
// infra/skiff construct, configured from CDK context, with the cdk-nag
// AwsSolutions checks applied. cdk.json at the repository root runs it:
//
//	make build
//	npx cdk deploy -c pools=examples/pools.yaml -c allow=acme -c vpcId=vpc-0abc
//
// Context keys (all strings; lists are comma-separated):
//
//	pools          the pools file (required)
//	allow          the repository allow-list: owners and owner/name (required)
//	appIds         GitHub App ids (empty on the first deploy: docs/deploy.md)
//	installations  App installation ids the webhook serves (default *: every installation)
//	vpcId          an existing VPC for the runners; empty creates one
//	subnetIds      the subnets runners may use (each pool's must be among them)
//	natGateways    NAT gateways of a created VPC (default 0)
//	stackName      the stack's name (default skiff)
//	buildDir       where make build wrote the bootstraps (default build)
//	githubApiUrl   GitHub Enterprise Server API, https://HOST/api/v3
//	githubUrl      GitHub Enterprise Server, https://HOST
//	templatePrefix launch template name prefix (default skiff-)
//	runnerMetrics  true to turn on the runners' CloudWatch agent metrics
//	runnerVersion, runnerSha256   download the runner at boot
//	alarmTopicArn  an SNS topic for the alarms
//	maxConcurrency scale-up's maximum concurrency (default 50)
package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"

	"github.com/skiffci/skiff/infra/skiff"
)

func main() {
	defer jsii.Close()
	app := awscdk.NewApp(nil)
	if _, err := newStack(app); err != nil {
		fmt.Fprintln(os.Stderr, "skiff:", err)
		os.Exit(1)
	}
	app.Synth(nil)
}

// newStack builds the default stack from app's context and applies the
// AwsSolutions checks to the whole app.
func newStack(app awscdk.App) (awscdk.Stack, error) {
	ctx := func(key string) string {
		v := app.Node().TryGetContext(jsii.String(key))
		if v == nil {
			return ""
		}
		return strings.TrimSpace(fmt.Sprint(v))
	}
	list := func(key string) []string {
		var out []string
		for _, s := range strings.Split(ctx(key), ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
		return out
	}
	num := func(key string) (int, error) {
		if ctx(key) == "" {
			return 0, nil
		}
		n, err := strconv.Atoi(ctx(key))
		if err != nil {
			return 0, fmt.Errorf("-c %s=%q: want a whole number", key, ctx(key))
		}
		return n, nil
	}
	nat, err := num("natGateways")
	if err != nil {
		return nil, err
	}
	conc, err := num("maxConcurrency")
	if err != nil {
		return nil, err
	}
	metrics := false
	if v := ctx("runnerMetrics"); v != "" {
		if metrics, err = strconv.ParseBool(v); err != nil {
			return nil, fmt.Errorf("-c runnerMetrics=%q: want true or false", v)
		}
	}
	name := ctx("stackName")
	if name == "" {
		name = "skiff"
	}
	stack := awscdk.NewStack(app, jsii.String(name), &awscdk.StackProps{
		Description: jsii.String("skiff: elastic, just-in-time GitHub Actions runners on EC2"),
	})
	props := &skiff.Props{
		PoolsFile:             ctx("pools"),
		Allow:                 list("allow"),
		BuildDir:              ctx("buildDir"),
		VpcID:                 ctx("vpcId"),
		SubnetIDs:             list("subnetIds"),
		NatGateways:           nat,
		AppIDs:                list("appIds"),
		Installations:         list("installations"),
		GitHubAPIURL:          ctx("githubApiUrl"),
		GitHubURL:             ctx("githubUrl"),
		LaunchTemplatePrefix:  ctx("templatePrefix"),
		Deployment:            ctx("deployment"),
		RunnerMetrics:         metrics,
		RunnerVersion:         ctx("runnerVersion"),
		RunnerSHA256:          ctx("runnerSha256"),
		ScaleUpMaxConcurrency: conc,
	}
	if arn := ctx("alarmTopicArn"); arn != "" {
		props.AlarmTopic = awssns.Topic_FromTopicArn(stack, jsii.String("AlarmTopic"), jsii.String(arn))
	}
	if _, err := skiff.New(stack, "Skiff", props); err != nil {
		return nil, err
	}
	awscdk.Aspects_Of(app).Add(cdknag.NewAwsSolutionsChecks(&cdknag.NagPackProps{Verbose: jsii.Bool(true)}), nil)
	return stack, nil
}
