package skiff

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awseventstargets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/jsii-runtime-go"

	"github.com/skiffci/skiff/pkg/names"
)

// scaleDownKeyPrefixes are the state table's items the reconciler reads and
// writes: the ledger (records, instance pointers, live counts), the launch
// claims it moves past a lost runner (JOB#), the job and run records it
// reads (JOB#, RUN#), and the metrics records it writes (RECORD#). The
// waiting room's items (ROOM#) have a statement of their own.
var scaleDownKeyPrefixes = []string{"INSTANCE#", "JOB#", "ONDEMAND#", "POOL#", "RECORD#", "RUN#", "RUNNER#"}

// scaleDownSpec: one pass lists 5,000 instances in 5 EC2 calls and 5,000
// runners in 50 GitHub calls, and stops starting new steps 5 s before its
// deadline; 50 s keeps a pass within its minute, so passes never overlap
// (reserved concurrency 1 makes sure). 512 MB: the pass holds a few
// thousand instances and runners in memory.
func scaleDownSpec() FunctionSpec {
	return FunctionSpec{
		Name:        names.FunctionScaleDown,
		Description: "skiff: scale-down (reconcile EC2, GitHub and the runner ledger every minute)",
		MemoryMiB:   512,
		Timeout:     awscdk.Duration_Seconds(jsii.Number(50)),
	}
}

// buildScaleDown creates the reconciler, its one-minute schedule (enabled
// once the App exists: without an App id it cannot ask GitHub) and its
// least privileges, which include launching warm instances.
func (s *Skiff) buildScaleDown() error {
	spec := scaleDownSpec()
	// The warm machines' launches write their warm item to the registration
	// table through the same launch template as scale-up's.
	spec.Environment = s.appEnv(map[string]string{names.EnvQueueURL: *s.Queue.QueueUrl(),
		names.EnvRegistrationTable: *s.RegistrationTable.TableName(), names.EnvLaunchTemplatePrefix: s.props.LaunchTemplatePrefix,
		names.EnvRootDevice: s.props.RootDevice})
	if s.props.RunnerMetrics {
		spec.Environment[names.EnvMetricsRecords] = "*" // the runners publish their peaks: write the records
	}
	fn, err := s.AddFunction(spec)
	if err != nil {
		return err
	}
	s.ScaleDown = fn
	// One pass at a time: a pass that overran its minute is not joined by
	// the next one.
	fn.Node().DefaultChild().(awslambda.CfnFunction).SetReservedConcurrentExecutions(jsii.Number(1))
	s.ScaleDownSchedule = awsevents.NewRule(s.Construct, jsii.String("ScaleDownSchedule"), &awsevents.RuleProps{
		Description: jsii.String("skiff: one scale-down pass a minute"),
		Schedule:    awsevents.Schedule_Rate(awscdk.Duration_Minutes(jsii.Number(1))),
		Enabled:     jsii.Bool(true), // a pass without an App only looks for one
		Targets:     &[]awsevents.IRuleTarget{awseventstargets.NewLambdaFunction(fn, &awseventstargets.LambdaFunctionProps{RetryAttempts: jsii.Number(0)})},
	})

	role := fn.Role()
	role.AddToPrincipalPolicy(stateTableStatement("ScaleDownItems",
		jsii.Strings("dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:ConditionCheckItem"),
		s.StateTable.TableArn(), scaleDownKeyPrefixes))
	// The waiting room: each pass sweeps every pool's room (a Query of its
	// partition), offers and drops entries (UpdateItem, DeleteItem), and the
	// warm launches read and write the failed places' backoffs in it.
	role.AddToPrincipalPolicy(stateTableStatement("ScaleDownRoom",
		jsii.Strings("dynamodb:GetItem", "dynamodb:Query", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"),
		s.StateTable.TableArn(), []string{"ROOM#"}))
	// The freshness check: the release list, and the pools' holds it
	// records from refused runners (one Query of the partition per pass).
	role.AddToPrincipalPolicy(stateTableStatement("ScaleDownRunnerState",
		jsii.Strings("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Query", "dynamodb:DeleteItem"),
		s.StateTable.TableArn(), []string{runnerStateKeyPrefix}))
	// The live-pool index is queried by pool name: its partition key is the
	// pool (or awaiting#<pool>), not a key prefix, so LeadingKeys cannot
	// scope it; Query on the index reads only runner records, the live ones
	// and the awaiting ones.
	role.AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Sid:       jsii.String("ScaleDownLiveRunners"),
		Actions:   jsii.Strings("dynamodb:Query"),
		Resources: &[]*string{jsii.String(*s.StateTable.TableArn() + "/index/" + livePoolIndex)},
	}))
	role.AddToPrincipalPolicy(tableKeyStatement(s.StateKey.KeyArn(), true))
	s.Queue.GrantSendMessages(fn)
	grantSecretRead(role, s.AppKeySecret.SecretArn())
	role.AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Sid: jsii.String("ScaleDownDescribe"),
		// DescribeImages: the runner version an instance's AMI is tagged with
		Actions:   jsii.Strings("ec2:DescribeInstances", "ec2:DescribeImages"),
		Resources: jsii.Strings("*"),
	}))
	role.AddToPrincipalPolicy(s.ownInstances("ScaleDownTerminatesSkiffInstances", "ec2:TerminateInstances"))
	// Warm instances (docs/warm-pools.md): the reconciler launches them
	// through the same EC2 provider as scale-up, with its launch permissions,
	// and stops the ready stopped-kind ones.
	for _, st := range s.launchPermissions() {
		role.AddToPrincipalPolicy(st)
	}
	role.AddToPrincipalPolicy(s.ownInstances("StopOwnRunners", "ec2:StopInstances"))
	if s.props.RunnerMetrics {
		role.AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Sid:       jsii.String("ScaleDownReadsRunnerPeaks"),
			Actions:   jsii.Strings("cloudwatch:GetMetricData"),
			Resources: jsii.Strings("*"),
		}))
	}
	const rule = "AwsSolutions-IAM5"
	suppress(role, rule, "ec2:DescribeInstances, ec2:DescribeImages and cloudwatch:GetMetricData have no resource-level permissions", "Resource::*")
	s.suppressLaunch(role)
	suppress(role, rule, "the live-pool index is read by pool name (its partition key), which a key-prefix condition cannot express",
		"/^Resource::<SkiffStateTable.*Arn>/index/live-pool$/")
	return nil
}
