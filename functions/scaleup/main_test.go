package main

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/queue"
	"github.com/skiffci/skiff/pkg/scaleup"
	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/userdata"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const pools = `version: 1
pools:
  - name: default
    labels: [self-hosted, linux, x64]
    instanceTypes: [c7i.xlarge]
    image: {ssm: /aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64}
    subnets: [subnet-0a1b2c3d4e5f60718]
`

// secretsManager answers GetSecretValue (JSON protocol) with the App key.
func secretsManager(t *testing.T, value string) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Amz-Target") != "secretsmanager.GetSecretValue" {
			http.Error(w, `{"__type":"UnknownOperationException"}`, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		_ = json.NewEncoder(w).Encode(map[string]string{"ARN": "arn:aws:secretsmanager:us-east-1:123456789012:secret:app", "Name": "app", "SecretString": value})
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// ec2Stub answers CreateFleet (EC2 query protocol) with one instance per
// call, and records the requests.
type ec2Stub struct {
	calls atomic.Int32
	forms sync.Map
}

func (s *ec2Stub) start(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		form, _ := url.ParseQuery(string(body))
		n := s.calls.Add(1)
		s.forms.Store(n, form)
		if form.Get("Action") != "CreateFleet" {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `<Response><Errors><Error><Code>InvalidAction</Code><Message>%s</Message></Error></Errors><RequestID>r</RequestID></Response>`, form.Get("Action"))
			return
		}
		w.Header().Set("Content-Type", "text/xml")
		fmt.Fprintf(w, `<CreateFleetResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>r-%d</requestId>`+
			`<fleetId>fleet-%d</fleetId><errorSet/><fleetInstanceSet><item><instanceIds><item>i-0123456789abcdef%d</item></instanceIds>`+
			`<instanceType>c7i.xlarge</instanceType><lifecycle>spot</lifecycle></item></fleetInstanceSet></CreateFleetResponse>`, n, n, n%10)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestBootstrapUnderRIE runs the built bootstrap under the Lambda runtime
// interface emulator, with the App key from a Secrets Manager stub, the
// GitHub simulator, dynalite for both tables and an EC2 stub, and sends it
// an SQS batch: one good job, one that routes nowhere, one undecodable.
func TestBootstrapUnderRIE(t *testing.T) {
	dynamo := testenv.Dynalite(t)
	ddb := testenv.DynamoClient(t, dynamo)
	ctx := context.Background()
	if err := store.CreateTable(ctx, ddb, "skiff-su"); err != nil {
		t.Fatal(err)
	}
	_, err := ddb.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName: aws.String("skiff-su-reg"), BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}},
	})
	if err != nil {
		t.Fatal(err)
	}
	waiter := dynamodb.NewTableExistsWaiter(ddb, func(o *dynamodb.TableExistsWaiterOptions) { o.MinDelay = 10 * time.Millisecond })
	if err := waiter.Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String("skiff-su-reg")}, time.Minute); err != nil {
		t.Fatal(err)
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pemKey := string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))
	sim := ghsim.New(ghsim.Options{SecretPrefix: "CANARYJIT"})
	defer sim.Close()
	sim.AddApp(ghsim.AppConfig{ID: 7, Slug: "skiff", PublicKey: &key.PublicKey})
	sim.AddRepo("acme", "app")
	sim.Install(7, "acme")
	stub := &ec2Stub{}

	bootstrap := testenv.BuildLambda(t, runtime.GOARCH)
	dir := filepath.Dir(bootstrap)
	if err := os.WriteFile(filepath.Join(dir, "pools.yaml"), []byte(pools), 0o644); err != nil {
		t.Fatal(err)
	}
	fn := testenv.StartRIE(t, bootstrap, []string{
		"PATH=" + os.Getenv("PATH"), "AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY=example",
		"AWS_EC2_METADATA_DISABLED=true", "AWS_ENDPOINT_URL_DYNAMODB=" + dynamo, "AWS_ENDPOINT_URL_EC2=" + stub.start(t),
		"AWS_ENDPOINT_URL_SECRETS_MANAGER=" + secretsManager(t, pemKey), "AWS_ENDPOINT_URL_SQS=http://127.0.0.1:1",
		"SKIFF_TABLE_NAME=skiff-su", "SKIFF_REGISTRATION_TABLE=skiff-su-reg", "SKIFF_DLQ_URL=http://127.0.0.1:1/dlq",
		"SKIFF_ACCOUNT_ID=123456789012", "SKIFF_GITHUB_APP_IDS=7", "SKIFF_GITHUB_PRIVATE_KEY_ARN=arn:aws:secretsmanager:us-east-1:123456789012:secret:app",
		"SKIFF_GITHUB_API_URL=" + sim.URL(), "SKIFF_POOLS_FILE=" + filepath.Join(dir, "pools.yaml"),
	})

	good, _ := json.Marshal(queue.Job{JobID: 501, RunID: 50, Attempt: 1, Repository: "acme/app", Owner: "acme",
		Labels: []string{"self-hosted", "linux", "x64"}, Pool: "default", DeliveryID: "d1", ReceivedAt: time.Now()})
	nowhere, _ := json.Marshal(queue.Job{JobID: 502, RunID: 50, Repository: "acme/app", Owner: "acme",
		Labels: []string{"self-hosted", "windows"}, Pool: "x", ReceivedAt: time.Now()})
	ev := scaleup.SQSEvent{Records: []scaleup.SQSMessage{
		{MessageID: "m1", Body: string(good), Attributes: map[string]string{"ApproximateReceiveCount": "1"}},
		{MessageID: "m2", Body: string(nowhere), Attributes: map[string]string{"ApproximateReceiveCount": "1"}},
		{MessageID: "m3", Body: "not json", Attributes: map[string]string{"ApproximateReceiveCount": "1"}},
	}}
	raw := fn.Invoke(t, ev)
	var br struct {
		BatchItemFailures *[]scaleup.BatchItemFailure `json:"batchItemFailures"`
	}
	if err := json.Unmarshal(raw, &br); err != nil || br.BatchItemFailures == nil || len(*br.BatchItemFailures) != 0 {
		t.Fatalf("response %s (%v)\noutput:\n%s", raw, err, fn.Out.String())
	}
	if stub.calls.Load() != 1 {
		t.Errorf("%d EC2 calls, want 1 CreateFleet", stub.calls.Load())
	}
	if f, ok := stub.forms.Load(int32(1)); ok {
		form := f.(url.Values)
		if form.Get("Type") != "instant" || form.Get("LaunchTemplateConfigs.1.LaunchTemplateSpecification.LaunchTemplateName") != "skiff-default" ||
			!strings.HasPrefix(form.Get("ClientToken"), "skiff-") {
			t.Errorf("CreateFleet form %v", form)
		}
	}
	arn := userdata.InstanceARN("aws", "us-east-1", "123456789012", "i-0123456789abcdef1")
	item, err := ddb.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String("skiff-su-reg"), ReturnValues: types.ReturnValueAllOld,
		Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: arn}}})
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := item.Attributes["mode"].(*types.AttributeValueMemberS); !ok || m.Value != "jit" {
		t.Errorf("registration item %v\noutput:\n%s", item.Attributes, fn.Out.String())
	}
	logs := fn.Out.String()
	if strings.Contains(logs, "CANARYJIT") || strings.Contains(logs, "BEGIN RSA") {
		t.Error("a credential appeared in the function's output")
	}
	for _, want := range []string{`"msg":"runner launched"`, `"reason":"no_pool"`, "dropping undecodable message", `"ScaleUpLaunched":1`} {
		if !strings.Contains(logs, want) {
			t.Errorf("output lacks %s:\n%s", want, logs)
		}
	}
}
