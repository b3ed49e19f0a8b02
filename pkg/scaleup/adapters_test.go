package scaleup_test

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/scaleup"
	"github.com/skiffci/skiff/pkg/userdata"
)

// TestRegistrationTable writes registrations through the real SDK to
// dynalite and reads them back the way the instance does: DeleteItem with
// ReturnValues=ALL_OLD, once.
func TestRegistrationTable(t *testing.T) {
	t.Parallel()
	client := testenv.DynamoClient(t, testenv.Dynalite(t))
	table := "skiff-registrations-" + strconv.FormatInt(msgSeq.Add(1), 10)
	_, err := client.CreateTable(context.Background(), &dynamodb.CreateTableInput{
		TableName:            aws.String(table),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(userdata.AttrPK), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(userdata.AttrPK), KeyType: types.KeyTypeHash}},
	})
	if err != nil {
		t.Fatal(err)
	}
	waiter := dynamodb.NewTableExistsWaiter(client, func(o *dynamodb.TableExistsWaiterOptions) { o.MinDelay = 10 * time.Millisecond })
	if err := waiter.Wait(context.Background(), &dynamodb.DescribeTableInput{TableName: aws.String(table)}, time.Minute); err != nil {
		t.Fatal(err)
	}
	w := scaleup.NewRegistrationTable(client, table)
	expires := time.Date(2026, 6, 1, 12, 15, 0, 0, time.UTC)
	arn := userdata.InstanceARN("aws", "eu-west-1", "123456789012", "i-0123456789abcdef0")
	cases := []struct {
		name string
		reg  userdata.Registration
		want map[string]string // attribute → value read back; nil: the write must fail
	}{
		{"jit", userdata.Registration{InstanceARN: arn, Mode: userdata.ModeJIT, JITConfig: "eyJjYW5hcnkiOiJ5ZXMifQ==", ExpiresAt: expires},
			map[string]string{"mode": "jit", "jit_config": "eyJjYW5hcnkiOiJ5ZXMifQ==", "expires_at": strconv.FormatInt(expires.Unix(), 10)}},
		{"token", userdata.Registration{InstanceARN: arn, Mode: userdata.ModeToken, Token: "AABBCC", URL: "https://github.com/acme",
			RunnerName: "skiff-1-1", Labels: []string{"self-hosted", "linux", "x64"}, RunnerGroup: "Default", ExpiresAt: expires},
			map[string]string{"mode": "token", "token": "AABBCC", "url": "https://github.com/acme", "runner_name": "skiff-1-1",
				"labels": "self-hosted,linux,x64", "runner_group": "Default"}},
		{"a label with a comma breaks the contract", userdata.Registration{InstanceARN: arn, Mode: userdata.ModeToken, Token: "A",
			URL: "https://github.com/acme", RunnerName: "r", Labels: []string{"a,b"}, ExpiresAt: expires}, nil},
	}
	for _, tc := range cases {
		err := w.Put(context.Background(), tc.reg)
		if tc.want == nil {
			if !errors.Is(err, userdata.ErrInvalidRegistration) {
				t.Errorf("%s: err = %v, want ErrInvalidRegistration", tc.name, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		out, err := client.DeleteItem(context.Background(), &dynamodb.DeleteItemInput{
			TableName: aws.String(table), ReturnValues: types.ReturnValueAllOld,
			Key: map[string]types.AttributeValue{userdata.AttrPK: &types.AttributeValueMemberS{Value: arn}},
		})
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range tc.want {
			var got string
			switch a := out.Attributes[k].(type) {
			case *types.AttributeValueMemberS:
				got = a.Value
			case *types.AttributeValueMemberN:
				got = a.Value
			}
			if got != v {
				t.Errorf("%s: %s = %q, want %q", tc.name, k, got, v)
			}
		}
		again, err := client.DeleteItem(context.Background(), &dynamodb.DeleteItemInput{
			TableName: aws.String(table), ReturnValues: types.ReturnValueAllOld,
			Key: map[string]types.AttributeValue{userdata.AttrPK: &types.AttributeValueMemberS{Value: arn}},
		})
		if err != nil || len(again.Attributes) != 0 {
			t.Errorf("%s: second read returned %v, %v", tc.name, again.Attributes, err)
		}
	}
}

type sqsRecorder struct {
	in  []*sqs.SendMessageInput
	err error
}

func (r *sqsRecorder) SendMessage(_ context.Context, in *sqs.SendMessageInput, _ ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	r.in = append(r.in, in)
	if r.err != nil {
		return nil, r.err
	}
	return &sqs.SendMessageOutput{MessageId: aws.String("dlq-1")}, nil
}

func TestSQSDeadLetters(t *testing.T) {
	t.Parallel()
	rec := &sqsRecorder{}
	d := scaleup.NewSQSDeadLetters(rec, "https://sqs.eu-west-1.amazonaws.com/123456789012/skiff-jobs-dlq")
	msg := message(job(9), 5)
	if err := d.DeadLetter(context.Background(), msg, 9, "ec2_quota", "VcpuLimitExceeded: limit of 0"); err != nil {
		t.Fatal(err)
	}
	in := rec.in[0]
	attr := func(k string) string { return aws.ToString(in.MessageAttributes[k].StringValue) }
	if aws.ToString(in.MessageBody) != msg.Body || attr("reason") != "ec2_quota" || attr("job_id") != "9" ||
		attr("receive_count") != "5" || attr("source_message_id") != msg.MessageID || attr("detail") != "VcpuLimitExceeded: limit of 0" {
		t.Errorf("sent %+v", in)
	}
	// No detail, no empty attribute (SQS refuses empty values).
	if err := d.DeadLetter(context.Background(), msg, 9, "max_runners", ""); err != nil {
		t.Fatal(err)
	}
	if _, ok := rec.in[1].MessageAttributes["detail"]; ok {
		t.Errorf("empty detail sent: %+v", rec.in[1].MessageAttributes)
	}
	rec.err = errInjected
	if err := d.DeadLetter(context.Background(), msg, 9, "x", ""); !errors.Is(err, errInjected) {
		t.Errorf("err = %v", err)
	}
}

func TestConfigFromEnv(t *testing.T) {
	t.Parallel()
	full := map[string]string{
		"SKIFF_TABLE_NAME": "skiff", "SKIFF_REGISTRATION_TABLE": "skiff-reg", "SKIFF_DLQ_URL": "https://sqs/dlq",
		"SKIFF_ACCOUNT_ID": "123456789012", "AWS_REGION": "eu-west-1", "SKIFF_GITHUB_APP_IDS": "1, 2",
		"SKIFF_GITHUB_PRIVATE_KEY_ARN": "arn:aws:secretsmanager:eu-west-1:123456789012:secret:key",
	}
	with := func(kv ...string) func(string) string {
		m := map[string]string{}
		for k, v := range full {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	cases := []struct {
		name    string
		getenv  func(string) string
		wantErr []string
	}{
		{"complete", with(), nil},
		{"nothing set", func(string) string { return "" }, []string{"SKIFF_TABLE_NAME", "SKIFF_REGISTRATION_TABLE", "SKIFF_DLQ_URL",
			"SKIFF_ACCOUNT_ID", "AWS_REGION", "SKIFF_GITHUB_APP_IDS", "SKIFF_GITHUB_PRIVATE_KEY_ARN"}},
		{"bad mode", with("SKIFF_REGISTRATION_MODE", "ssm"), []string{"SKIFF_REGISTRATION_MODE"}},
		{"bad scope", with("SKIFF_RUNNER_SCOPE", "enterprise"), []string{"SKIFF_RUNNER_SCOPE"}},
		{"fleet too big for its tags", with("SKIFF_MAX_FLEET_SIZE", "20"), []string{"SKIFF_MAX_FLEET_SIZE"}},
		{"lease shorter than the registration wait", with("SKIFF_CLAIM_LEASE", "2m"), []string{"SKIFF_CLAIM_LEASE"}},
		{"bad app id", with("SKIFF_GITHUB_APP_IDS", "1,x"), []string{"SKIFF_GITHUB_APP_IDS"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := scaleup.ConfigFromEnv(tc.getenv)
			if tc.wantErr == nil {
				if err != nil {
					t.Fatal(err)
				}
				if c.Mode != scaleup.ModeJIT || c.MaxAttempts != scaleup.DefaultMaxAttempts || len(c.AppIDs) != 2 ||
					c.LaunchTemplatePrefix != "skiff-" || c.CheckQueued {
					t.Errorf("defaults: %+v", c)
				}
				return
			}
			for _, v := range tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), v) {
					t.Errorf("error %v does not name %s", err, v)
				}
			}
		})
	}
}

func TestParseAppKeys(t *testing.T) {
	t.Parallel()
	pemKey := string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(testKey(t))}))
	both, _ := json.Marshal(map[string]string{"1": pemKey, "2": pemKey})
	cases := []struct {
		name  string
		ids   []int64
		value string
		apps  int
		err   bool
	}{
		{"one PEM for one App", []int64{1}, pemKey, 1, false},
		{"JSON for two Apps", []int64{1, 2}, string(both), 2, false},
		{"one PEM for two Apps", []int64{1, 2}, pemKey, 0, true},
		{"JSON missing an App", []int64{1, 3}, string(both), 0, true},
		{"not a key", []int64{1}, "-----BEGIN NOTHING-----", 0, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			apps, err := scaleup.ParseAppKeys(tc.ids, tc.value)
			if (err != nil) != tc.err || len(apps) != tc.apps {
				t.Fatalf("apps %d, err %v", len(apps), err)
			}
			if err != nil && strings.Contains(err.Error(), "BEGIN") {
				t.Errorf("error quotes the secret: %v", err)
			}
		})
	}
}
