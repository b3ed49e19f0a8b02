package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/store/dynamostore"
	"github.com/skiffci/skiff/pkg/webhook"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// canary is the webhook secret: it must appear in no output of the function.
const canary = "canary-rie-webhook-secret-31f9"

func TestBootstrapSize(t *testing.T) {
	t.Parallel()
	testenv.CheckBootstrapSize(t)
}

// BenchmarkColdInit is the function's cold init under the runtime emulator:
// the webhook secret from the environment, the pools file, the SDK clients.
// The first event is a GET, answered without an AWS call.
func BenchmarkColdInit(b *testing.B) {
	bootstrap := testenv.BuildLambda(b, runtime.GOARCH)
	var get events.LambdaFunctionURLRequest
	get.RequestContext.HTTP.Method = "GET"
	testenv.BenchColdInit(b, bootstrap, testenv.LambdaEnv(
		"SKIFF_WEBHOOK_SECRET=bench", "SKIFF_QUEUE_URL=http://127.0.0.1:1/q", "SKIFF_DEPLOYMENT=skiff-ci",
		"SKIFF_TABLE_NAME=bench", "SKIFF_POOLS_FILE="+minimalPoolsFile(b), "SKIFF_ALLOW=*", "SKIFF_ALLOWED_INSTALLATIONS=*",
	), get)
}

// minimalPoolsFile writes examples/minimal.yaml as the function's pools
// file in a temporary directory of t's and returns its path.
func minimalPoolsFile(t testing.TB) string {
	t.Helper()
	pools, err := os.ReadFile(filepath.Join(testenv.Root(t), "examples", "minimal.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return testenv.WritePoolsFile(t, t.TempDir(), string(pools))
}

func event(eventName, delivery string, body []byte, secret string, b64 bool) events.LambdaFunctionURLRequest {
	var ev events.LambdaFunctionURLRequest
	ev.Headers = map[string]string{
		"content-type": "application/json", "x-github-event": eventName, "x-github-delivery": delivery,
		"x-hub-signature-256": webhook.Sign([]byte(secret), body), "user-agent": "GitHub-Hookshot/044aadd",
	}
	ev.Body = string(body)
	if b64 {
		ev.Body, ev.IsBase64Encoded = base64.StdEncoding.EncodeToString(body), true
	}
	ev.RequestContext.RequestID = delivery
	ev.RequestContext.HTTP.Method = "POST"
	return ev
}

// TestBootstrapUnderRIE runs the built bootstrap the way Lambda does, under
// the runtime interface emulator, against DynamoDB (moto: the lifecycle
// write is a transaction, which dynalite lacks) and SQS (goaws) emulators
// through the real AWS SDK, and sends it Function URL events.
func TestBootstrapUnderRIE(t *testing.T) {
	root := testenv.Root(t)
	dynamo := testenv.Moto(t)
	table := testenv.NewTable(t, testenv.DynamoClient(t, dynamo), "skiff-rie")
	queueURL, sqsEndpoint, receive := sqsQueue(t)
	bootstrap := testenv.BuildLambda(t, runtime.GOARCH)
	poolsFile := minimalPoolsFile(t)
	env := testenv.LambdaEnv(
		"AWS_ENDPOINT_URL_DYNAMODB="+dynamo,
		"AWS_ENDPOINT_URL_SQS="+sqsEndpoint,
		"SKIFF_WEBHOOK_SECRET="+canary,
		"SKIFF_QUEUE_URL="+queueURL, "SKIFF_DEPLOYMENT=skiff-ci",
		"SKIFF_TABLE_NAME="+table,
		"SKIFF_POOLS_FILE="+poolsFile,
		// Both lists fail closed: empty, the function refuses to start.
		"SKIFF_ALLOW=*",
		"SKIFF_ALLOWED_INSTALLATIONS=*",
	)
	fn := testenv.StartRIE(t, bootstrap, env)

	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(root, "testdata", "webhooks", name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// GitHub's example asks for ubuntu-latest in a public repository; the same job for the
	// pool's labels in a private one (pools admit private and internal repositories only).
	private := func(b []byte) []byte {
		b = bytes.Replace(b, []byte(`"ubuntu-latest"`), []byte(`"self-hosted", "linux", "x64"`), 1)
		return bytes.Replace(b, []byte(`"visibility": "public"`), []byte(`"visibility": "private"`), 1)
	}
	queued := private(read("workflow_job.queued.1.json"))
	inProgress := private(read("workflow_job.in_progress.2.json"))
	// GitHub's installation.deleted example, for the installation of the queued job.
	deleted := regexp.MustCompile(`("installation":\s*\{\s*"id":\s*)\d+`).ReplaceAll(read("installation.deleted.1.json"), []byte("${1}3456996"))

	steps := []struct {
		name       string
		ev         events.LambdaFunctionURLRequest
		wantStatus int
	}{
		{"ping", event("ping", "d-ping", read("ping.none.1.json"), canary, false), 200},
		{"wrong secret", event("workflow_job", "d-bad", queued, "not-the-secret", false), 401},
		{"queued, base64 body", event("workflow_job", "d-queued", queued, canary, true), 200},
		{"replayed delivery", event("workflow_job", "d-queued", queued, canary, false), 200},
		{"GitHub-hosted job", event("workflow_job", "d-hosted", read("workflow_job.queued.1.json"), canary, false), 202},
		{"in_progress", event("workflow_job", "d-started", inProgress, canary, false), 200},
		{"replayed in_progress", event("workflow_job", "d-started", inProgress, canary, false), 200},
		{"workflow_run", event("workflow_run", "d-run", read("workflow_run.requested.1.json"), canary, false), 200},
		{"truncated", event("workflow_job", "d-trunc", queued[:100], canary, false), 400},
		{"installation created", event("installation", "d-inst", read("installation.created.1.json"), canary, false), 200},
		{"installation deleted", event("installation", "d-del", deleted, canary, false), 200},
		{"queued from the deleted installation", event("workflow_job", "d-late", queued, canary, false), 403},
	}
	for _, s := range steps {
		if got := invokeJSON(t, fn, s.ev); got.StatusCode != s.wantStatus {
			t.Errorf("%s: status %d %s, want %d", s.name, got.StatusCode, got.Body, s.wantStatus)
		}
	}

	// The replay enqueues the job again (the webhook keeps no delivery ids);
	// both messages name the one job, which scale-up claims once.
	checkEnqueued(t, receive(t))
	checkWebhookRecords(t, dynamo, table)
	checkWebhookOutput(t, fn)
}

// invokeJSON invokes fn's Function URL with ev; an answer that is not
// JSON fails t.
func invokeJSON(t *testing.T, fn *testenv.Lambda, ev events.LambdaFunctionURLRequest) events.LambdaFunctionURLResponse {
	t.Helper()
	out := fn.InvokeURL(t, ev)
	if ct := out.Headers["content-type"]; ct != "application/json" {
		t.Fatalf("content-type %q, want application/json\nemulator output:\n%s", ct, fn.Out.String())
	}
	return out
}

// checkEnqueued fails t unless msgs are the queued delivery and its replay,
// both naming the one job: the webhook keeps no delivery ids; scale-up
// claims the job once.
func checkEnqueued(t *testing.T, msgs []string) {
	t.Helper()
	if len(msgs) != 2 {
		t.Fatalf("SQS holds %d messages, want 2 (the queued delivery and its replay): %q", len(msgs), msgs)
	}
	for _, m := range msgs {
		var job struct {
			JobID int64  `json:"job_id"`
			Pool  string `json:"pool"`
		}
		if err := json.Unmarshal([]byte(m), &job); err != nil || job.JobID != 289782451 || job.Pool != "default" {
			t.Errorf("message = %s (%v)", m, err)
		}
	}
}

// checkWebhookRecords fails t unless the table at the DynamoDB endpoint
// dynamo holds the job in progress with its run, and both installations,
// the deleted one as deleted.
func checkWebhookRecords(t *testing.T, dynamo, table string) {
	t.Helper()
	st := dynamostore.NewDynamo(testenv.DynamoClient(t, dynamo), table)
	if rec, err := st.Job(context.Background(), 289782451); err != nil || rec.Status != store.StatusInProgress || rec.RunnerName == "" || rec.QueuedAt.IsZero() {
		t.Errorf("in_progress record = %+v, %v", rec, err)
	}
	if run, err := st.Run(context.Background(), 289782451); err != nil || run.Event != "repository_dispatch" {
		t.Errorf("run record = %+v, %v", run, err)
	}

	insts := dynamostore.NewInstallationsDynamo(testenv.DynamoClient(t, dynamo), table)
	if rec, err := insts.Installation(context.Background(), 957387); err != nil || rec.Status != store.InstallationActive || rec.Account != "Codertocat" {
		t.Errorf("installation record = %+v, %v", rec, err)
	}
	if rec, err := insts.Installation(context.Background(), 3456996); err != nil || rec.Status != store.InstallationDeleted {
		t.Errorf("deleted installation record = %+v, %v", rec, err)
	}
}

// checkWebhookOutput fails t unless fn's output holds no secret, tells of
// its start, metrics and deliveries, and is JSON line by line.
func checkWebhookOutput(t *testing.T, fn *testenv.Lambda) {
	t.Helper()
	out := fn.Out.String()
	if strings.Contains(out, canary) {
		t.Error("the webhook secret appeared in the function's output")
	}
	t.Logf("cold init under the runtime emulator: %v (BenchmarkColdInit measures it)", fn.InitDuration(t))
	for _, want := range []string{`"msg":"webhook ready"`, `"_aws":{`, `"delivery_id":"d-queued"`} {
		if !strings.Contains(out, want) {
			t.Errorf("function output lacks %s", want)
		}
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if l := sc.Text(); strings.HasPrefix(l, "{") && !json.Valid([]byte(l)) {
			t.Errorf("log line is not JSON: %s", l)
		}
	}
}

// sqsQueue starts the SQS emulator with one queue, and returns the queue's
// URL, the endpoint other processes reach it at, and a function draining
// the bodies of the messages it holds.
func sqsQueue(t *testing.T) (queueURL, endpoint string, receive func(*testing.T) []string) {
	t.Helper()
	client, endpoint := testenv.GoawsEndpoint(t, "skiff-jobs")
	ctx := context.Background()
	url := testenv.QueueURL(t, client, "skiff-jobs")
	return url, endpoint, func(t *testing.T) []string {
		var bodies []string
		for {
			out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10})
			if err != nil {
				t.Fatalf("receiving: %v", err)
			}
			if len(out.Messages) == 0 {
				return bodies
			}
			for _, m := range out.Messages {
				bodies = append(bodies, aws.ToString(m.Body))
			}
		}
	}
}
