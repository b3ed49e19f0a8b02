package main

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/provider/ec2"
	"github.com/skiffci/skiff/pkg/provider/ec2/ec2fake"
	"github.com/skiffci/skiff/pkg/queue"
	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/store/dynamostore"
	"github.com/skiffci/skiff/pkg/userdata"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const pools = `version: 1
pools:
  - name: default
    labels: [self-hosted, linux, x64]
    instanceTypes: [c7i.xlarge, m7i.xlarge]
    image: {ssm: /aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64}
    subnets: [subnet-0a1b2c3d4e5f60718]
`

func TestBootstrapSize(t *testing.T) {
	t.Parallel()
	testenv.CheckBootstrapSize(t)
}

// BenchmarkColdInit is the function's cold init under the runtime emulator:
// the App key read from a Secrets Manager stub, the pools file, the GitHub
// client and the SDK clients. The first event is an empty batch, answered
// without a call.
func BenchmarkColdInit(b *testing.B) {
	bootstrap := testenv.BuildLambda(b, runtime.GOARCH)
	poolsFile := testenv.WritePoolsFile(b, b.TempDir(), pools)
	testenv.BenchColdInit(b, bootstrap, testenv.LambdaEnv(
		"AWS_ENDPOINT_URL_SECRETS_MANAGER="+testenv.SecretsManager(b, testenv.KeyPEM()),
		"SKIFF_TABLE_NAME=bench", "SKIFF_REGISTRATION_TABLE=bench-reg", "SKIFF_DLQ_URL=http://127.0.0.1:1/dlq",
		"SKIFF_ACCOUNT_ID=123456789012", "SKIFF_DEPLOYMENT=skiff", "SKIFF_ALLOW=acme", "SKIFF_GITHUB_APP_IDS=7", "SKIFF_GITHUB_PRIVATE_KEY_ARN="+testenv.SecretARN,
		"SKIFF_GITHUB_API_URL=http://127.0.0.1:1", "SKIFF_POOLS_FILE="+poolsFile,
	), events.SQSEvent{Records: []events.SQSMessage{}})
}

// newTables creates a state table named testenv.Unique(prefix) and
// scale-up's registration table, the same name with -reg, waits until both
// exist, and returns the state table's name.
func newTables(t *testing.T, ddb *dynamodb.Client, prefix string) string {
	t.Helper()
	name := testenv.NewTable(t, ddb, prefix)
	ctx, cancel := testenv.AwaitContext(t)
	defer cancel()
	if err := ec2.CreateRegistrationTable(ctx, ddb, name+"-reg"); err != nil {
		t.Fatal(err)
	}
	return name
}

// startScaleUp starts the built bootstrap under the runtime emulator with
// the tables newTables made as table at the DynamoDB endpoint dynamo, the
// EC2 fake over HTTP (launch template skiff-default), the pools file and
// the GitHub simulator sim; env adds the App key's secret and the queues,
// which the tests give differently.
func startScaleUp(t *testing.T, dynamo, table string, sim *ghsim.Server, env ...string) (*testenv.Lambda, *ec2fake.Fake) {
	t.Helper()
	fake := ec2fake.New()
	fake.SetLaunchTemplates("skiff-default")
	bootstrap := testenv.BuildLambda(t, runtime.GOARCH)
	poolsFile := testenv.WritePoolsFile(t, t.TempDir(), pools)
	fn := testenv.StartRIE(t, bootstrap, testenv.LambdaEnv(append([]string{
		"AWS_ENDPOINT_URL_DYNAMODB=" + dynamo, "AWS_ENDPOINT_URL_EC2=" + fake.Serve(t),
		"SKIFF_TABLE_NAME=" + table, "SKIFF_REGISTRATION_TABLE=" + table + "-reg",
		"SKIFF_ACCOUNT_ID=123456789012", "SKIFF_DEPLOYMENT=skiff", "SKIFF_ALLOW=acme",
		"SKIFF_GITHUB_API_URL=" + sim.URL(), "SKIFF_POOLS_FILE=" + poolsFile,
	}, env...)...))
	return fn, fake
}

// job is the queue message of job id of run id/10 in acme/app, for pool
// default, asking for labels (default: the pool's).
func job(id int64, labels ...string) string {
	if len(labels) == 0 {
		labels = []string{"self-hosted", "linux", "x64"}
	}
	b, _ := json.Marshal(queue.Job{JobID: id, RunID: id / 10, Attempt: 1, Repository: "acme/app", Owner: "acme",
		Labels: labels, Pool: "default", DeliveryID: fmt.Sprintf("d%d", id), ReceivedAt: time.Now()})
	return string(b)
}

// recordRuns records a push-triggered workflow_run of each of runs in
// acme/app, as the webhook does: scale-up reads the trigger for the pool's
// fork policy.
func recordRuns(t *testing.T, ddb *dynamodb.Client, table string, runs ...int64) {
	t.Helper()
	records := dynamostore.NewDynamo(ddb, table)
	for _, run := range runs {
		if err := records.RecordRun(context.Background(), store.RunRecord{ID: run, Attempt: 1, Event: "push", Repository: "acme/app",
			UpdatedAt: time.Now(), ExpiresAt: time.Now().Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
}

// sqsMessage is the first delivery of body, as message id.
func sqsMessage(id, body string) events.SQSMessage {
	return events.SQSMessage{MessageId: id, Body: body, Attributes: map[string]string{"ApproximateReceiveCount": "1"}}
}

// invokeSQS hands fn a batch of msgs and returns its batch item failures;
// an answer without the list fails t.
func invokeSQS(t *testing.T, fn *testenv.Lambda, msgs ...events.SQSMessage) []events.SQSBatchItemFailure {
	t.Helper()
	raw := fn.Invoke(t, events.SQSEvent{Records: msgs})
	var br struct {
		BatchItemFailures *[]events.SQSBatchItemFailure `json:"batchItemFailures"`
	}
	if err := json.Unmarshal(raw, &br); err != nil || br.BatchItemFailures == nil {
		t.Fatalf("response %s (%v)\noutput:\n%s", raw, err, fn.Out.String())
	}
	return *br.BatchItemFailures
}

// TestBootstrapUnderRIE runs the built bootstrap under the Lambda runtime
// interface emulator, with the App key from a Secrets Manager stub, the
// GitHub simulator, dynalite for both tables and the shared EC2 fake over
// HTTP (the EC2 Query protocol, through the function's real SDK client),
// and sends it SQS batches: two good jobs (one fleet, tagged per instance),
// one that routes nowhere and one undecodable; then a job whose first
// instance type has no capacity (the second launches); then one with no
// capacity anywhere (a batch item failure).
func TestBootstrapUnderRIE(t *testing.T) {
	dynamo := testenv.Moto(t) // transactions (the fenced launch intent, the ledger): dynalite has none
	ddb := testenv.DynamoClient(t, dynamo)
	table := newTables(t, ddb, "skiff-su")
	sim, pemKey := testenv.GitHubApp(t, "CANARYJIT")
	fn, fake := startScaleUp(t, dynamo, table, sim,
		"AWS_ENDPOINT_URL_SECRETS_MANAGER="+testenv.SecretsManager(t, pemKey), "AWS_ENDPOINT_URL_SQS=http://127.0.0.1:1",
		"SKIFF_DLQ_URL=http://127.0.0.1:1/dlq", "SKIFF_GITHUB_APP_IDS="+strconv.Itoa(testenv.AppID), "SKIFF_GITHUB_PRIVATE_KEY_ARN="+testenv.SecretARN,
	)
	recordRuns(t, ddb, table, 50, 60, 70)

	// 1. Two good jobs share one fleet; each instance gets its own tags.
	if f := invokeSQS(t, fn, sqsMessage("m1", job(501)), sqsMessage("m2", job(502, "self-hosted", "windows")), sqsMessage("m3", "not json"), sqsMessage("m4", job(503))); len(f) != 0 {
		t.Fatalf("failures %+v\noutput:\n%s", f, fn.Out.String())
	}
	if n := fake.Calls("CreateFleet"); n != 1 {
		t.Errorf("%d CreateFleet calls, want 1", n)
	}
	in := fake.CreateFleetInputs()[0]
	if in.Type != ec2types.FleetTypeInstant || aws.ToString(in.LaunchTemplateConfigs[0].LaunchTemplateSpecification.LaunchTemplateName) != "skiff-default" ||
		!strings.HasPrefix(aws.ToString(in.ClientToken), "skiff-") || len(in.LaunchTemplateConfigs[0].Overrides) != 2 {
		t.Errorf("CreateFleet input %+v", in)
	}
	live := fake.Live()
	if len(live) != 2 || fake.Calls("CreateTags") != 2 {
		t.Fatalf("%d instances, %d CreateTags calls, want 2 and 2\noutput:\n%s", len(live), fake.Calls("CreateTags"), fn.Out.String())
	}
	checkJITInstances(t, ddb, table+"-reg", live)

	// 2. No spot capacity for the first type: the second type launches.
	fake.FailPool("c7i.xlarge/subnet-0a1b2c3d4e5f60718/spot", "InsufficientInstanceCapacity")
	if f := invokeSQS(t, fn, sqsMessage("m5", job(601))); len(f) != 0 {
		t.Fatalf("failures %+v\noutput:\n%s", f, fn.Out.String())
	}
	live = fake.Live()
	if len(live) != 3 || live[2].InstanceType != "m7i.xlarge" || !live[2].Spot || live[2].Tags["skiff:job-id"] != "601" {
		t.Errorf("instances %+v, want a third on m7i.xlarge spot for job 601", live)
	}

	// 3. No capacity anywhere, spot or on-demand: the job is retried.
	for _, typ := range []string{"c7i.xlarge", "m7i.xlarge"} {
		for _, life := range []string{"spot", "on-demand"} {
			fake.FailPool(typ+"/subnet-0a1b2c3d4e5f60718/"+life, "InsufficientInstanceCapacity")
		}
	}
	if f := invokeSQS(t, fn, sqsMessage("m6", job(701))); len(f) != 1 || f[0].ItemIdentifier != "m6" {
		t.Errorf("failures %+v, want m6 retried\noutput:\n%s", f, fn.Out.String())
	}
	if len(fake.Live()) != 3 {
		t.Errorf("%d instances after a failed launch, want 3", len(fake.Live()))
	}

	checkScaleUpOutput(t, fn.Out.String())
}

// checkScaleUpOutput fails t unless the function's output logs carry no
// credential and tell of each outcome of TestBootstrapUnderRIE's batches,
// with their metrics.
func checkScaleUpOutput(t *testing.T, logs string) {
	t.Helper()
	if strings.Contains(logs, "CANARYJIT") || strings.Contains(logs, "BEGIN RSA") {
		t.Error("a credential appeared in the function's output")
	}
	for _, want := range []string{`"msg":"runner launched"`, `"reason":"no_pool"`, "dropping undecodable message", `"ScaleUpLaunched":1`,
		`"reason":"launch_capacity"`, `"ScaleUpCapacityErrors":1`, `"ScaleUpFallbacks":1`, `"msg":"job returned to the queue"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("output lacks %s:\n%s", want, logs)
		}
	}
}

// checkJITInstances fails t unless each instance of live has its
// registration item in table reg (taken now) in JIT mode, under the runner name its
// tags give, of this deployment and job, in pool default.
func checkJITInstances(t *testing.T, ddb *dynamodb.Client, reg string, live []ec2fake.Instance) {
	t.Helper()
	ctx := context.Background()
	registration := func(id string) map[string]types.AttributeValue {
		t.Helper()
		arn := userdata.InstanceARN("aws", "us-east-1", "123456789012", id)
		item, err := ddb.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(reg), ReturnValues: types.ReturnValueAllOld,
			Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: arn}}})
		if err != nil {
			t.Fatal(err)
		}
		return item.Attributes
	}
	for _, inst := range live {
		reg := registration(inst.ID)
		m, ok := reg["mode"].(*types.AttributeValueMemberS)
		name, _ := reg["runner_name"].(*types.AttributeValueMemberS)
		if !ok || m.Value != "jit" || name == nil || inst.Tags["skiff:runner-name"] != name.Value ||
			!strings.HasPrefix(name.Value, "skiff-"+inst.Tags["skiff:deployment"]+"-"+inst.Tags["skiff:job-id"]+"-") || inst.Tags["skiff:pool"] != "default" {
			t.Errorf("instance %s tags %v, registration %v", inst.ID, inst.Tags, reg)
		}
	}
}

// TestNoAppUnderRIE starts scale-up the way a fresh stack does: the App key
// secret (Secrets Manager on moto) holds the stack's placeholder and no App
// id is configured. A job is sent back to the job queue (SQS on moto),
// delayed, with one log line, and nothing is dead-lettered; once the setup
// page has stored {"<app id>": "<pem>"}, the same warm container finds the
// App at its next invocation and launches the job: no redeploy, no cold
// start.
func TestNoAppUnderRIE(t *testing.T) {
	moto := testenv.Moto(t)
	ctx := context.Background()
	ddb := testenv.DynamoClient(t, moto)
	table := newTables(t, ddb, "skiff-noapp")
	awsCfg := testenv.AWSConfig(t)
	sm := secretsmanager.NewFromConfig(awsCfg, func(o *secretsmanager.Options) { o.BaseEndpoint = aws.String(moto) })
	sec, err := sm.CreateSecret(ctx, &secretsmanager.CreateSecretInput{Name: aws.String(testenv.Unique("noapp-key")), SecretString: aws.String("Zq8xV2kP0aLr4nT7wB1yC6dE9fG3hJ5m")})
	if err != nil {
		t.Fatal(err)
	}
	sq := sqs.NewFromConfig(awsCfg, func(o *sqs.Options) { o.BaseEndpoint = aws.String(moto) })
	jobs, dlq := testenv.NewQueue(t, sq, "noapp-jobs"), testenv.NewQueue(t, sq, "noapp-dlq")
	depth := func(url string) (visible, delayed int) { return queueDepth(t, sq, url) }

	sim, pemKey := testenv.GitHubApp(t, "")
	fn, fake := startScaleUp(t, moto, table, sim,
		"AWS_ENDPOINT_URL_SECRETS_MANAGER="+moto, "AWS_ENDPOINT_URL_SQS="+moto,
		"SKIFF_DLQ_URL="+dlq, "SKIFF_QUEUE_URL="+jobs, "SKIFF_GITHUB_PRIVATE_KEY_ARN="+aws.ToString(sec.ARN),
	)
	recordRuns(t, ddb, table, 80)
	invoke := func() []events.SQSBatchItemFailure {
		t.Helper()
		return invokeSQS(t, fn, sqsMessage("m1", job(801)))
	}

	if f := invoke(); len(f) != 0 {
		t.Fatalf("without an App: failures %v (the job is sent back, not retried)\n%s", f, fn.Out.String())
	}
	if visible, delayed := depth(jobs); visible+delayed != 1 {
		t.Errorf("job queue holds %d visible + %d delayed, want the job sent back", visible, delayed)
	}
	if visible, delayed := depth(dlq); visible+delayed != 0 {
		t.Errorf("dead-letter queue holds %d messages, want none", visible+delayed)
	}
	out := fn.Out.String()
	if n := strings.Count(out, "no GitHub App yet: jobs wait in the queue"); n != 1 {
		t.Errorf("%d log lines about the missing App for one batch, want 1:\n%s", n, out)
	}
	if fake.Calls("CreateFleet") != 0 {
		t.Error("launched without an App")
	}

	// The setup page stores the App; the warm container picks it up.
	value, _ := json.Marshal(map[string]string{strconv.Itoa(testenv.AppID): pemKey})
	if _, err := sm.PutSecretValue(ctx, &secretsmanager.PutSecretValueInput{SecretId: sec.ARN, SecretString: aws.String(string(value))}); err != nil {
		t.Fatal(err)
	}
	if f := invoke(); len(f) != 0 {
		t.Fatalf("with the App: failures %v\n%s", f, fn.Out.String())
	}
	if !strings.Contains(fn.Out.String(), "GitHub App found: scale-up serves jobs") || fake.Calls("CreateFleet") != 1 {
		t.Errorf("the App stored after the cold start was not used (%d CreateFleet calls):\n%s", fake.Calls("CreateFleet"), fn.Out.String())
	}
	if strings.Contains(fn.Out.String(), "BEGIN RSA") {
		t.Error("the App key reached the log")
	}
}

// queueDepth is how many messages the queue at url holds, visible and
// delayed.
func queueDepth(t *testing.T, sq *sqs.Client, url string) (visible, delayed int) {
	t.Helper()
	out, err := sq.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages,
			sqstypes.QueueAttributeNameApproximateNumberOfMessagesDelayed}})
	if err != nil {
		t.Fatal(err)
	}
	visible, _ = strconv.Atoi(out.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessages)])
	delayed, _ = strconv.Atoi(out.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessagesDelayed)])
	return visible, delayed
}
