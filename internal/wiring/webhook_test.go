package wiring_test

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/internal/wiring"
	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/store/dynamostore"
	"github.com/skiffci/skiff/pkg/webhook"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestWebhookAgainstMoto runs the webhook as the Lambda wires it
// (wiring.NewWebhook: the SDK's SQS and DynamoDB clients) against moto's
// SQS and DynamoDB, every request counted by operation on its way. It
// checks the promises of the webhook's hot path: the AWS
// calls of each event, a replay that changes nothing but enqueues again, a
// failed enqueue that answers 503 and a failed record that does not, and
// no credential or webhook secret in the logs or the metrics.
//
// It is not parallel: the EMF metrics NewWebhook wires go to os.Stdout,
// which it redirects while it builds the handler.
func TestWebhookAgainstMoto(t *testing.T) {
	moto := testenv.Moto(t)
	ctx := t.Context()
	world := newWebhookMoto(t, moto)
	queueURL, table := world.queueURL, world.table

	calls := &testenv.CountingTransport{}
	awsCfg := testenv.AWSConfig(t)
	awsCfg.BaseEndpoint = aws.String(moto)
	awsCfg.HTTPClient = &http.Client{Transport: calls}
	logs := &testenv.SyncBuffer{}
	h, emf := newWebhook(t, awsCfg, queueURL, table, logs)
	// The same, enqueueing to a queue that does not exist; and recording
	// to a table that does not exist.
	noQueue, _ := newWebhook(t, awsCfg, strings.TrimSuffix(queueURL, "skiff-webhook-e2e")+"no-such-queue", table, logs)
	noTable, _ := newWebhook(t, awsCfg, queueURL, "no-such-table", logs)

	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(testenv.Root(t), "testdata", "webhooks", name))
		if err != nil {
			t.Fatal(err)
		}
		return ours(b)
	}
	const jobID, runner = 289782451, "GitHub Actions 5" // GitHub's examples
	world.seedLaunched(t, runner, jobID)

	steps := []struct {
		name       string
		h          *webhook.Handler
		event      string
		delivery   string
		body       []byte
		wantStatus int
		wantBody   string
		wantCalls  map[string]int
	}{
		// GetItem: the installation's record, read once a minute per
		// container and installation (webhook.DefaultInstallationCacheTTL).
		{"queued", h, "workflow_job", "d-1", read("workflow_job.queued.1.json"), 200, "accepted",
			map[string]int{"SendMessage": 1, "UpdateItem": 1, "GetItem": 1}},
		{"queued, replayed: enqueued again, answered as a duplicate", h, "workflow_job", "d-1", read("workflow_job.queued.1.json"), 200, "duplicate",
			nil}, // SendMessage, and the advance, fill (and raise) that find the record
		{"queued, enqueue fails: 503 so that GitHub can redeliver", noQueue, "workflow_job", "d-2", read("workflow_job.queued.1.json"), 503, "retry", nil},
		{"in_progress on the runner: one transaction (another installation: its record read)", h, "workflow_job", "d-3", read("workflow_job.in_progress.2.json"), 200, "accepted",
			map[string]int{"TransactWriteItems": 1, "GetItem": 1}},
		{"in_progress, replayed", h, "workflow_job", "d-3", read("workflow_job.in_progress.2.json"), 200, "duplicate", nil},
		{"completed: one transaction", h, "workflow_job", "d-4", read("workflow_job.completed.1.json"), 200, "accepted",
			map[string]int{"TransactWriteItems": 1}},
		{"workflow_run: one put", h, "workflow_run", "d-5", read("workflow_run.requested.1.json"), 200, "accepted",
			map[string]int{"PutItem": 1}},
		{"lifecycle, store fails: 503", noTable, "workflow_job", "d-6", read("workflow_job.completed.1.json"), 503, "retry", nil},
	}
	for _, s := range steps {
		calls.Take()
		resp := s.h.Handle(ctx, webhook.Request{Event: s.event, Delivery: s.delivery, Signature: webhook.Sign([]byte(benchSecret), s.body), Body: s.body})
		if resp.Status != s.wantStatus || resp.Body != `{"result":"`+s.wantBody+`"}` {
			t.Errorf("%s: %d %s, want %d %s", s.name, resp.Status, resp.Body, s.wantStatus, s.wantBody)
		}
		if got := calls.Take(); s.wantCalls != nil && !reflect.DeepEqual(got, s.wantCalls) {
			t.Errorf("%s: AWS calls %v, want %v", s.name, got, s.wantCalls)
		}
	}

	world.checkRecords(t, jobID, runner)

	out, err := os.ReadFile(emf)
	if err != nil {
		t.Fatal(err)
	}
	all := logs.String() + string(out)
	for _, secret := range []string{testenv.TestSecretAccessKey, benchSecret} {
		if strings.Contains(all, secret) {
			t.Errorf("%q appears in the logs or metrics", secret)
		}
	}
	if !strings.Contains(logs.String(), "enqueueing job failed") || !strings.Contains(logs.String(), "recording job lifecycle failed") {
		t.Errorf("the failures are not logged:\n%s", logs.String())
	}
}

// webhookMoto is the queue and the table in moto that
// TestWebhookAgainstMoto's webhook writes to, with clients that reach them
// directly.
type webhookMoto struct {
	ddb             *dynamodb.Client
	sqs             *sqs.Client
	queueURL, table string
}

// newWebhookMoto creates the queue and the table in the moto at endpoint.
func newWebhookMoto(t *testing.T, endpoint string) webhookMoto {
	t.Helper()
	direct := testenv.AWSConfig(t)
	direct.BaseEndpoint = aws.String(endpoint)
	m := webhookMoto{ddb: dynamodb.NewFromConfig(direct), sqs: sqs.NewFromConfig(direct)}
	m.table = testenv.NewTable(t, m.ddb, "skiff-webhook-e2e")
	m.queueURL = testenv.NewQueue(t, m.sqs, "skiff-webhook-e2e")
	return m
}

// seedLaunched records runner in the ledger as launched for jobID in the
// pool default.
func (m webhookMoto) seedLaunched(t *testing.T, runner string, jobID int) {
	t.Helper()
	_, err := m.ddb.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(m.table), Item: map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: "RUNNER#" + runner}, "sk": &types.AttributeValueMemberS{Value: "RUNNER"},
		"pool": &types.AttributeValueMemberS{Value: "default"}, "job_id": &types.AttributeValueMemberN{Value: strconv.Itoa(jobID)},
		"state":      &types.AttributeValueMemberS{Value: ledger.StateLaunched.String()},
		"state_rank": &types.AttributeValueMemberN{Value: strconv.Itoa(int(ledger.StateLaunched))},
	}})
	if err != nil {
		t.Fatal(err)
	}
}

// checkRecords checks what the steps of TestWebhookAgainstMoto left: the
// queued delivery's two messages, the job completed on runner, the run's
// record and the runner's ledger record moved to job-completed.
func (m webhookMoto) checkRecords(t *testing.T, jobID int64, runner string) {
	t.Helper()
	ctx := t.Context()
	msgs, err := m.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(m.queueURL), MaxNumberOfMessages: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs.Messages) != 2 {
		t.Errorf("the queue holds %d messages, want 2 (the delivery and its replay)", len(msgs.Messages))
	}
	for _, msg := range msgs.Messages {
		if !strings.Contains(aws.ToString(msg.Body), `"job_id":289782451`) {
			t.Errorf("message %s", aws.ToString(msg.Body))
		}
	}
	st := dynamostore.NewDynamo(m.ddb, m.table)
	if j, err := st.Job(ctx, jobID); err != nil || j.Status != store.StatusCompleted || j.RunnerName != runner || j.QueuedAt.IsZero() {
		t.Errorf("job record %+v, %v", j, err)
	}
	if r, err := st.Run(ctx, jobID); err != nil || r.Event != "repository_dispatch" {
		t.Errorf("run record %+v, %v", r, err)
	}
	led := dynamostore.NewLedgerDynamo(m.ddb, m.table)
	if r, err := led.Runner(ctx, runner); err != nil || r.State != ledger.StateJobCompleted {
		t.Errorf("runner %+v, %v", r, err)
	}
}

// newWebhook builds the handler with wiring.NewWebhook over awsCfg, its
// logs to logs and its EMF metrics to a file, whose name it returns.
func newWebhook(t *testing.T, awsCfg aws.Config, queueURL, table string, logs *testenv.SyncBuffer) (*webhook.Handler, string) {
	t.Helper()
	pools := filepath.Join(testenv.Root(t), "examples", "minimal.yaml")
	cfg, err := webhook.ConfigFromEnv(func(k string) string {
		return map[string]string{
			"SKIFF_WEBHOOK_SECRET": benchSecret, "SKIFF_QUEUE_URL": queueURL, "SKIFF_DEPLOYMENT": "skiff-ci",
			"SKIFF_TABLE_NAME": table, "SKIFF_POOLS_FILE": pools, "SKIFF_ALLOW": "*", "SKIFF_ALLOWED_INSTALLATIONS": "*",
		}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	emf := filepath.Join(t.TempDir(), "emf")
	f, err := os.Create(emf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	stdout := os.Stdout
	os.Stdout = f
	h, err := wiring.NewWebhook(context.Background(), cfg, awsCfg, slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	os.Stdout = stdout
	if err != nil {
		t.Fatal(err)
	}
	return h, emf
}
