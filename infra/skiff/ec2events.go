package skiff

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awseventstargets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/jsii-runtime-go"

	"github.com/skiffci/skiff/pkg/names"
)

// The runner ledger's items in the state table (pkg/store/ledger.go): the
// records, the instance pointers and the pools' live counts.
var ledgerKeyPrefixes = []string{"RUNNER#", "INSTANCE#", "POOL#"}

// livePoolIndex is the ledger's sparse index (dynamostore.LivePoolIndex) over
// attrLivePool, present only on live and awaiting runner records.
const (
	livePoolIndex = "live-pool"
	attrLivePool  = "live_pool"
)

// runnerAdvanceAttributes are the only attributes the webhook's advance of
// a runner (dynamostore.LedgerDynamo.Advance: registered, job started, job
// completed) names: the key, the state and its rank, the step's time, the
// busy job, and expires_at, which its condition reads to skip expired
// records. IAM's dynamodb:Attributes lists the attributes a request names
// and requires the key among them.
var runnerAdvanceAttributes = []string{
	attrPK, attrSK, "state", "state_rank", "registered_at", "started_at", "completed_at", "busy_job", attrExpires,
}

// ec2EventsSpec: one event is one to four small DynamoDB requests (a
// pointer read, a record read, a transaction); 256 MB keeps TLS setup
// quick at cold start, and 30 s leaves room for the SDK's retries under
// throttling. EventBridge invokes it asynchronously, so a failure is
// retried by Lambda.
func ec2EventsSpec() FunctionSpec {
	return FunctionSpec{
		Name:        names.FunctionEC2Events,
		Description: "skiff: EC2 state changes and spot interruption warnings → runner ledger",
		MemoryMiB:   256,
		Timeout:     awscdk.Duration_Seconds(jsii.Number(30)),
	}
}

// ec2EventsRetry: EventBridge retries delivering an event to the function
// (throttled, or the function service unavailable) for up to two hours;
// after that the reconciler catches up with what the event would have said.
const (
	ec2EventsRetryAttempts = 8
	ec2EventsMaxEventAge   = 2 // hours
)

// addLivePoolIndex adds the ledger's sparse index to the state table.
func (s *Skiff) addLivePoolIndex() {
	s.StateTable.AddGlobalSecondaryIndex(&awsdynamodb.GlobalSecondaryIndexProps{
		IndexName:      jsii.String(livePoolIndex),
		PartitionKey:   &awsdynamodb.Attribute{Name: jsii.String(attrLivePool), Type: awsdynamodb.AttributeType_STRING},
		ProjectionType: awsdynamodb.ProjectionType_ALL,
	})
}

// buildEC2Events creates the EC2-event function, routes the EC2 rules to
// it, and lets it write the ledger's items only: GetItem and UpdateItem on
// RUNNER#, INSTANCE# and POOL# partitions. Its ends are TransactWriteItems,
// which IAM authorises item by item as UpdateItem, so no other action is
// needed.
func (s *Skiff) buildEC2Events() error {
	spec := ec2EventsSpec()
	// A runner's end offers the next job of its pool's waiting room.
	spec.Environment = map[string]string{names.EnvQueueURL: *s.Queue.QueueUrl()}
	if s.props.RunnerMetrics {
		// Runners whose job gets a record are the reconciler's to end.
		spec.Environment[names.EnvMetricsRecords] = "*"
	}
	fn, err := s.AddFunction(spec)
	if err != nil {
		return err
	}
	s.EC2Events = fn
	s.EC2Rules = s.AddEC2Events(awseventstargets.NewLambdaFunction(fn, &awseventstargets.LambdaFunctionProps{
		RetryAttempts: jsii.Number(ec2EventsRetryAttempts),
		MaxEventAge:   awscdk.Duration_Hours(jsii.Number(ec2EventsMaxEventAge)),
	}))
	role := fn.Role()
	role.AddToPrincipalPolicy(stateTableStatement("LedgerItems",
		jsii.Strings("dynamodb:GetItem", "dynamodb:UpdateItem"), s.StateTable.TableArn(), ledgerKeyPrefixes))
	// The waiting room: the pool's entries (ROOM#) to offer, and the job
	// records (JOB#) that say an entry's job started or completed.
	role.AddToPrincipalPolicy(stateTableStatement("RoomItems",
		jsii.Strings("dynamodb:GetItem", "dynamodb:Query", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"),
		s.StateTable.TableArn(), []string{"ROOM#"}))
	role.AddToPrincipalPolicy(stateTableStatement("JobRecords", jsii.Strings("dynamodb:GetItem"), s.StateTable.TableArn(),
		[]string{"JOB#"}))
	role.AddToPrincipalPolicy(tableKeyStatement(s.StateKey.KeyArn(), true))
	s.Queue.GrantSendMessages(fn)
	return nil
}

// webhookRunnerStatement lets the webhook advance runner records (job
// started and completed, from workflow_job events naming the runner):
// UpdateItem on RUNNER# partitions, naming only runnerAdvanceAttributes,
// returning nothing. What it leaves open: the values are not restricted,
// so a compromised webhook could set any runner's state_rank (mark a live
// runner ended, and so reapable, without releasing its count) or its
// expires_at; it cannot touch the live count, the instance pointers, the
// live-pool attribute, launch claims or fleets.
func (s *Skiff) webhookRunnerStatement() awsiam.PolicyStatement {
	return awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Sid:       jsii.String("WebhookAdvancesRunners"),
		Actions:   jsii.Strings("dynamodb:UpdateItem"),
		Resources: &[]*string{s.StateTable.TableArn()},
		Conditions: &map[string]any{
			"ForAllValues:StringLike":   map[string]any{"dynamodb:LeadingKeys": []any{"RUNNER#*"}},
			"ForAllValues:StringEquals": map[string]any{"dynamodb:Attributes": toAny(runnerAdvanceAttributes)},
			"StringEqualsIfExists":      map[string]any{"dynamodb:ReturnValues": "NONE"},
		},
	})
}
