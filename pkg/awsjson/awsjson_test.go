package awsjson_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/awsjson"
	"github.com/skiffci/skiff/pkg/provisioning"
	"github.com/skiffci/skiff/pkg/queue"
	"github.com/skiffci/skiff/pkg/queue/sqsqueue"
	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/store/dynamostore"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// sent is one request as it left the client.
type sent struct {
	url    string
	header http.Header
	body   []byte
	req    *http.Request
}

// wire is an http.Client transport that records every request and answers
// with answer (default: 200 {} for DynamoDB, SendMessage's answer for SQS).
type wire struct {
	mu     sync.Mutex
	sent   []sent
	answer func(n int, s sent) (*http.Response, error) // n counts requests from 1
}

func (w *wire) RoundTrip(r *http.Request) (*http.Response, error) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	_ = r.Body.Close()
	s := sent{url: r.URL.String(), header: r.Header.Clone(), body: body, req: r}
	w.mu.Lock()
	w.sent = append(w.sent, s)
	n := len(w.sent)
	answer := w.answer
	w.mu.Unlock()
	if answer != nil {
		return answer(n, s)
	}
	return okAnswer(s), nil
}

func (w *wire) take() []sent {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.sent
	w.sent = nil
	return out
}

// okAnswer answers a request as SQS or DynamoDB answer a success.
func okAnswer(s sent) *http.Response {
	if strings.HasPrefix(s.header.Get("X-Amz-Target"), "AmazonSQS.") {
		var in struct{ MessageBody string }
		_ = json.Unmarshal(s.body, &in)
		sum := md5.Sum([]byte(in.MessageBody))
		return respond(200, fmt.Sprintf(`{"MD5OfMessageBody":%q,"MessageId":"5fea7756-0ea4-451a-a703-a558b933e274"}`, hex.EncodeToString(sum[:])), nil)
	}
	return respond(200, "{}", nil)
}

// respond is an AWS JSON answer, with DynamoDB's CRC-32 header.
func respond(status int, body string, headers map[string]string) *http.Response {
	h := http.Header{}
	h.Set("Content-Type", "application/x-amz-json-1.0")
	h.Set("X-Amzn-Requestid", "req-1")
	h.Set("X-Amz-Crc32", strconv.FormatUint(uint64(crc32.ChecksumIEEE([]byte(body))), 10))
	for k, v := range headers {
		h.Set(k, v)
	}
	return &http.Response{StatusCode: status, Status: http.StatusText(status), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body))}
}

// noBackoff is a standard retryer that retries at once, so that tests of
// retries do not wait.
func noBackoff() aws.Retryer {
	return retry.NewStandard(func(o *retry.StandardOptions) {
		o.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return 0, nil })
	})
}

// clients returns an SDK client and the hand client built from it, both
// over w.
func clients(t *testing.T, w *wire, retryer func() aws.Retryer) (*dynamodb.Client, *awsjson.DynamoDB, *sqs.Client, *awsjson.SQS) {
	t.Helper()
	cfg := testenv.AWSConfig(t)
	cfg.HTTPClient = &http.Client{Transport: w}
	if retryer == nil {
		retryer = noBackoff
	}
	cfg.Retryer = retryer
	ddb := dynamodb.NewFromConfig(cfg)
	hotDDB, err := awsjson.NewDynamoDB(t.Context(), ddb, table)
	if err != nil {
		t.Fatal(err)
	}
	q := sqs.NewFromConfig(cfg)
	hotSQS, err := awsjson.NewSQS(t.Context(), q)
	if err != nil {
		t.Fatal(err)
	}
	return ddb, hotDDB, q, hotSQS
}

const (
	table    = "skiff-table"
	queueURL = "https://sqs.us-east-1.amazonaws.com/123456789012/skiff-jobs"
)

func s(v string) *types.AttributeValueMemberS { return &types.AttributeValueMemberS{Value: v} }
func n(v string) *types.AttributeValueMemberN { return &types.AttributeValueMemberN{Value: v} }

// awkward are strings that test the JSON escaping: quotes, backslashes,
// control characters, HTML characters, U+2028/2029, emoji, invalid UTF-8.
var awkward = []string{
	`plain`, `quote " and \ backslash`, "tab\tnew\nline\rcr\x00nul\x1funit\x7fdel", `<html> & 'apos'`,
	"line\u2028para\u2029sep", "gpu-🚀 日本語", "bad \xff\xfe utf-8 \xe2\x82", "",
}

// everyValue is an item with every attribute value type, nested.
func everyValue() map[string]types.AttributeValue {
	m := map[string]types.AttributeValue{
		"pk": s("JOB#1"), "sk": s("JOB"),
		"n":    n("-12.5e3"),
		"b":    &types.AttributeValueMemberB{Value: []byte{0, 1, 2, 0xff, 'x'}},
		"t":    &types.AttributeValueMemberBOOL{Value: true},
		"f":    &types.AttributeValueMemberBOOL{Value: false},
		"null": &types.AttributeValueMemberNULL{Value: true},
		"l":    &types.AttributeValueMemberL{Value: []types.AttributeValue{s("a"), n("1"), &types.AttributeValueMemberL{Value: []types.AttributeValue{}}}},
		"m":    &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"in\"ner": s("x"), "deep": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"k": n("2")}}}},
		"ss":   &types.AttributeValueMemberSS{Value: []string{"a", "b\u2028"}},
		"ns":   &types.AttributeValueMemberNS{Value: []string{"1", "2.5"}},
		"bs":   &types.AttributeValueMemberBS{Value: [][]byte{{1}, {2, 3}}},
	}
	for i, a := range awkward {
		m["awkward"+strconv.Itoa(i)+a] = s(a)
	}
	return m
}

// call is one operation, made through either client.
type call struct {
	name string
	ddb  func(ctx context.Context, api dynamostore.DynamoAPI) error
	sqs  func(ctx context.Context, api sqsqueue.SQSAPI) error
}

func calls() []call {
	names := map[string]string{"#s": "status", "#w": "weird\"name\\"}
	values := map[string]types.AttributeValue{":r": n("3"), ":a": s(awkward[2]), ":b": &types.AttributeValueMemberB{Value: []byte("hi")}}
	key := map[string]types.AttributeValue{"pk": s("JOB#" + awkward[6]), "sk": s("JOB")}
	out := []call{
		{name: "UpdateItem, every member", ddb: func(ctx context.Context, api dynamostore.DynamoAPI) error {
			_, err := api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
				TableName: aws.String(table), Key: key, UpdateExpression: aws.String("SET #s = :a, b = :b"),
				ConditionExpression: aws.String("attribute_not_exists(pk) OR #s < :r"), ExpressionAttributeNames: names,
				ExpressionAttributeValues: values, ReturnValues: types.ReturnValueUpdatedOld,
				ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
			})
			return err
		}},
		{name: "UpdateItem, empty maps", ddb: func(ctx context.Context, api dynamostore.DynamoAPI) error {
			_, err := api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
				TableName: aws.String(table), Key: key, UpdateExpression: aws.String("SET a = b"),
				ExpressionAttributeNames: map[string]string{}, ExpressionAttributeValues: map[string]types.AttributeValue{},
			})
			return err
		}},
		{name: "PutItem, every value type", ddb: func(ctx context.Context, api dynamostore.DynamoAPI) error {
			_, err := api.PutItem(ctx, &dynamodb.PutItemInput{
				TableName: aws.String(table), Item: everyValue(), ConditionExpression: aws.String("attribute_not_exists(#s)"),
				ExpressionAttributeNames: map[string]string{"#s": "pk"}, ReturnValues: types.ReturnValueAllOld,
			})
			return err
		}},
		{name: "TransactWriteItems, every kind, with a token", ddb: func(ctx context.Context, api dynamostore.DynamoAPI) error {
			_, err := api.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{
				ClientRequestToken: aws.String("token-1"),
				TransactItems: []types.TransactWriteItem{
					{ConditionCheck: &types.ConditionCheck{TableName: aws.String(table), Key: key, ConditionExpression: aws.String("#s = :r"),
						ExpressionAttributeNames: map[string]string{"#s": "status"}, ExpressionAttributeValues: map[string]types.AttributeValue{":r": n("1")},
						ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}},
					{Delete: &types.Delete{TableName: aws.String(table), Key: key}},
					{Put: &types.Put{TableName: aws.String(table), Item: everyValue(), ConditionExpression: aws.String("attribute_not_exists(pk)")}},
					{Update: &types.Update{TableName: aws.String(table), Key: key, UpdateExpression: aws.String("SET #s = :a"),
						ConditionExpression: aws.String("#s < :r"), ExpressionAttributeNames: names, ExpressionAttributeValues: values}},
				},
			})
			return err
		}},
		{name: "TransactWriteItems, no token", ddb: func(ctx context.Context, api dynamostore.DynamoAPI) error {
			_, err := api.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
				{Update: &types.Update{TableName: aws.String(table), Key: key, UpdateExpression: aws.String("SET a = :b"),
					ExpressionAttributeValues: map[string]types.AttributeValue{":b": &types.AttributeValueMemberNULL{Value: true}}}},
			}})
			return err
		}},
		{name: "SendMessage, attributes", sqs: func(ctx context.Context, api sqsqueue.SQSAPI) error {
			_, err := api.SendMessage(ctx, &sqs.SendMessageInput{
				QueueUrl: aws.String(queueURL), MessageBody: aws.String(`{"job_id":1,"labels":["` + awkward[1] + `"]}` + awkward[4] + awkward[5]),
				DelaySeconds: 5, MessageGroupId: aws.String("g"), MessageDeduplicationId: aws.String("d"),
				MessageAttributes: map[string]sqstypes.MessageAttributeValue{
					"pool":   {DataType: aws.String("String"), StringValue: aws.String(awkward[3])},
					"job_id": {DataType: aws.String("Number"), StringValue: aws.String("1")},
					"bin":    {DataType: aws.String("Binary"), BinaryValue: []byte{0, 0xff}},
				},
			})
			return err
		}},
		{name: "SendMessage, body only", sqs: func(ctx context.Context, api sqsqueue.SQSAPI) error {
			_, err := api.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(queueURL), MessageBody: aws.String("x")})
			return err
		}},
	}
	// What the store and the queue send on the webhook's paths.
	at := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	job := store.Job{ID: 42, RunID: 7, Attempt: 1, Repository: "o/r", Owner: "o", InstallationID: 3, Status: store.StatusQueued,
		Labels: []string{"self-hosted", awkward[4]}, Pool: "default", WorkflowName: awkward[1], JobName: "build", Branch: "main",
		QueuedAt: at, UpdatedAt: at, ExpiresAt: at.Add(time.Hour)}
	started := job
	started.Status, started.StartedAt, started.RunnerName, started.RunnerID = store.StatusInProgress, at, "skiff-default-42-1", 9
	dynamo := func(api dynamostore.DynamoAPI) *dynamostore.Dynamo {
		return dynamostore.NewDynamo(api, table, dynamostore.WithClock(func() time.Time { return at }))
	}
	return append(out,
		call{name: "store: RecordJob", ddb: func(ctx context.Context, api dynamostore.DynamoAPI) error {
			_, err := dynamo(api).RecordJob(ctx, job)
			return err
		}},
		call{name: "store: RecordRun", ddb: func(ctx context.Context, api dynamostore.DynamoAPI) error {
			return dynamo(api).RecordRun(ctx, store.Run{ID: 7, Attempt: 2, Event: "push", WorkflowName: awkward[5], Repository: "o/r",
				HeadRepository: "f/r", FromFork: true, Actor: "a", UpdatedAt: at, ExpiresAt: at.Add(time.Hour)})
		}},
		call{name: "store: RecordLifecycle", ddb: func(ctx context.Context, api dynamostore.DynamoAPI) error {
			_, err := dynamo(api).RecordLifecycle(ctx, started, store.RunnerStep{Runner: started.RunnerName, To: provisioning.StateJobStarted, At: at})
			return err
		}},
		call{name: "queue: Send", sqs: func(ctx context.Context, api sqsqueue.SQSAPI) error {
			j := queue.Job{JobID: 42, RunID: 7, Attempt: 1, Repository: "o/r", Owner: "o", InstallationID: 3,
				Labels: []string{"self-hosted", awkward[4], "\ufffe"}, Pool: "default\x01", DeliveryID: "d", ReceivedAt: at}
			return sqsqueue.NewSQS(api, queueURL).Send(ctx, j)
		}},
	)
}

// TestRequestsAsTheSDKSends makes each call through the SDK client and
// through the hand client, and compares what went on the wire: the same
// endpoint, operation and content type, a body that is valid JSON and
// means the same as the SDK's (member order and map order aside), and a
// signature that verifies for the same service, region and key.
func TestRequestsAsTheSDKSends(t *testing.T) {
	t.Parallel()
	token := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	for _, c := range calls() {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			w := &wire{}
			ddb, hotDDB, q, hotSQS := clients(t, w, nil)
			ctx := t.Context()
			run := func(hand bool) []sent {
				var err error
				switch {
				case c.ddb != nil && hand:
					err = c.ddb(ctx, hotDDB)
				case c.ddb != nil:
					err = c.ddb(ctx, ddb)
				case hand:
					err = c.sqs(ctx, hotSQS)
				default:
					err = c.sqs(ctx, q)
				}
				if err != nil {
					t.Fatalf("hand %v: %v", hand, err)
				}
				return w.take()
			}
			want, got := run(false), run(true)
			if len(got) != len(want) {
				t.Fatalf("the hand client made %d requests, the SDK %d", len(got), len(want))
			}
			for i := range got {
				g, w := got[i], want[i]
				if strings.Contains(g.header.Get("User-Agent"), "api/dynamodb") || strings.Contains(g.header.Get("User-Agent"), "api/sqs") {
					t.Fatalf("request %d went through the SDK client, not by hand", i)
				}
				if g.url != w.url {
					t.Errorf("request %d: URL %s, SDK %s", i, g.url, w.url)
				}
				for _, h := range []string{"X-Amz-Target", "Content-Type", "X-Amzn-Query-Mode", "X-Amz-Security-Token"} {
					if g.header.Get(h) != w.header.Get(h) {
						t.Errorf("request %d: %s %q, SDK %q", i, h, g.header.Get(h), w.header.Get(h))
					}
				}
				if !json.Valid(g.body) {
					t.Fatalf("request %d: body is not JSON: %s", i, g.body)
				}
				gb, wb := decode(t, g.body), decode(t, w.body)
				if tok, ok := gb["ClientRequestToken"].(string); ok && wb["ClientRequestToken"] != "token-1" {
					if !token.MatchString(tok) {
						t.Errorf("request %d: ClientRequestToken %q is not a random UUID", i, tok)
					}
					delete(gb, "ClientRequestToken")
					delete(wb, "ClientRequestToken")
				}
				if !reflect.DeepEqual(gb, wb) {
					t.Errorf("request %d: body\n%s\nmeans something else than the SDK's\n%s", i, g.body, w.body)
				}
				service := map[bool]string{true: "sqs", false: "dynamodb"}[c.sqs != nil]
				r := g.req.Clone(ctx)
				r.Host = r.URL.Host
				if err := testenv.VerifySigV4(r, g.body, testenv.SigV4Want{AccessKeyID: testenv.TestAccessKeyID,
					SecretAccessKey: testenv.TestSecretAccessKey, Region: testenv.TestRegion, Service: service}); err != nil {
					t.Errorf("request %d: %v", i, err)
				}
			}
		})
	}
}

func decode(t *testing.T, b []byte) map[string]any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		t.Fatalf("decoding %s: %v", b, err)
	}
	return m
}

// TestDelegates checks that calls the hand encoder does not cover go
// through the SDK client: never half-written by hand.
func TestDelegates(t *testing.T) {
	t.Parallel()
	key := map[string]types.AttributeValue{"pk": s("a"), "sk": s("b")}
	cases := []struct {
		name string
		ddb  func(ctx context.Context, api dynamostore.DynamoAPI) error
		sqs  func(ctx context.Context, api sqsqueue.SQSAPI) error
	}{
		{"another table", func(ctx context.Context, api dynamostore.DynamoAPI) error {
			_, err := api.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String("other"), Key: key, UpdateExpression: aws.String("SET a = b")})
			return err
		}, nil},
		{"legacy Expected", func(ctx context.Context, api dynamostore.DynamoAPI) error {
			_, err := api.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: key,
				Expected: map[string]types.ExpectedAttributeValue{"pk": {Exists: aws.Bool(false)}}})
			return err
		}, nil},
		{"legacy AttributeUpdates", func(ctx context.Context, api dynamostore.DynamoAPI) error {
			_, err := api.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(table), Key: key,
				AttributeUpdates: map[string]types.AttributeValueUpdate{"a": {Action: types.AttributeActionDelete}}})
			return err
		}, nil},
		{"consumed capacity", func(ctx context.Context, api dynamostore.DynamoAPI) error {
			_, err := api.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal,
				TransactItems: []types.TransactWriteItem{{Delete: &types.Delete{TableName: aws.String(table), Key: key}}}})
			return err
		}, nil},
		{"per-call options", func(ctx context.Context, api dynamostore.DynamoAPI) error {
			_, err := api.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: key}, func(*dynamodb.Options) {})
			return err
		}, nil},
		{"a transaction touching another table", func(ctx context.Context, api dynamostore.DynamoAPI) error {
			_, err := api.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
				{Delete: &types.Delete{TableName: aws.String(table), Key: key}}, {Delete: &types.Delete{TableName: aws.String("other"), Key: key}}}})
			return err
		}, nil},
		{"GetItem", func(ctx context.Context, api dynamostore.DynamoAPI) error {
			_, err := api.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: key})
			return err
		}, nil},
		{"message system attributes", nil, func(ctx context.Context, api sqsqueue.SQSAPI) error {
			_, err := api.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(queueURL), MessageBody: aws.String("x"),
				MessageSystemAttributes: map[string]sqstypes.MessageSystemAttributeValue{
					"AWSTraceHeader": {DataType: aws.String("String"), StringValue: aws.String("Root=1")}}})
			return err
		}},
		{"list attribute values", nil, func(ctx context.Context, api sqsqueue.SQSAPI) error {
			_, err := api.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(queueURL), MessageBody: aws.String("x"),
				MessageAttributes: map[string]sqstypes.MessageAttributeValue{"l": {DataType: aws.String("String"), StringListValues: []string{"a"}}}})
			return err
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := &wire{}
			_, hotDDB, _, hotSQS := clients(t, w, nil)
			var err error
			if tc.ddb != nil {
				err = tc.ddb(t.Context(), hotDDB)
			} else {
				err = tc.sqs(t.Context(), hotSQS)
			}
			if err != nil {
				t.Fatal(err)
			}
			reqs := w.take()
			if len(reqs) != 1 || !strings.Contains(reqs[0].header.Get("User-Agent"), "aws-sdk-go-v2/") ||
				strings.HasPrefix(reqs[0].header.Get("User-Agent"), "skiff-awsjson") {
				t.Errorf("not sent by the SDK client: %d requests, User-Agent %q", len(reqs), reqs[0].header.Get("User-Agent"))
			}
		})
	}
}

// TestInputFieldsKnown fails when an SDK upgrade adds a field to an input
// the hand encoder writes: the encoder (or the delegation test in front
// of it) must then learn it, or the field would be dropped.
func TestInputFieldsKnown(t *testing.T) {
	t.Parallel()
	known := map[reflect.Type][]string{
		reflect.TypeFor[dynamodb.PutItemInput](): {"Item", "TableName", "ConditionExpression", "ConditionalOperator", "Expected",
			"ExpressionAttributeNames", "ExpressionAttributeValues", "ReturnConsumedCapacity", "ReturnItemCollectionMetrics",
			"ReturnValues", "ReturnValuesOnConditionCheckFailure"},
		reflect.TypeFor[dynamodb.UpdateItemInput](): {"Key", "TableName", "AttributeUpdates", "ConditionExpression", "ConditionalOperator",
			"Expected", "ExpressionAttributeNames", "ExpressionAttributeValues", "ReturnConsumedCapacity",
			"ReturnItemCollectionMetrics", "ReturnValues", "ReturnValuesOnConditionCheckFailure", "UpdateExpression"},
		reflect.TypeFor[dynamodb.TransactWriteItemsInput](): {"TransactItems", "ClientRequestToken", "ReturnConsumedCapacity", "ReturnItemCollectionMetrics"},
		reflect.TypeFor[types.TransactWriteItem]():          {"ConditionCheck", "Delete", "Put", "Update"},
		reflect.TypeFor[types.ConditionCheck](): {"ConditionExpression", "Key", "TableName", "ExpressionAttributeNames", "ExpressionAttributeValues",
			"ReturnValuesOnConditionCheckFailure"},
		reflect.TypeFor[types.Delete](): {"Key", "TableName", "ConditionExpression", "ExpressionAttributeNames", "ExpressionAttributeValues",
			"ReturnValuesOnConditionCheckFailure"},
		reflect.TypeFor[types.Put](): {"Item", "TableName", "ConditionExpression", "ExpressionAttributeNames", "ExpressionAttributeValues",
			"ReturnValuesOnConditionCheckFailure"},
		reflect.TypeFor[types.Update](): {"Key", "TableName", "UpdateExpression", "ConditionExpression", "ExpressionAttributeNames",
			"ExpressionAttributeValues", "ReturnValuesOnConditionCheckFailure"},
		reflect.TypeFor[sqs.SendMessageInput](): {"MessageBody", "QueueUrl", "DelaySeconds", "MessageAttributes", "MessageDeduplicationId",
			"MessageGroupId", "MessageSystemAttributes"},
		reflect.TypeFor[sqstypes.MessageAttributeValue](): {"DataType", "BinaryListValues", "BinaryValue", "StringListValues", "StringValue"},
	}
	for typ, fields := range known {
		for i := range typ.NumField() {
			if f := typ.Field(i); f.IsExported() && !slices.Contains(fields, f.Name) {
				t.Errorf("%s has a field %s the hand encoder does not know", typ, f.Name)
			}
		}
	}
}

// errorAnswer is an error answer both clients get, and what each must
// make of it.
type errorAnswer struct {
	name     string
	answer   func(n int, s sent) (*http.Response, error)
	requests int    // attempts made
	code     string // ErrorCode of the API error; "" for none
	as       any    // a pointer to the error type errors.As must find
	ok       bool   // the call succeeds in the end
}

func errorAnswers() []errorAnswer {
	always := func(status int, body string, h map[string]string) func(int, sent) (*http.Response, error) {
		return func(int, sent) (*http.Response, error) { return respond(status, body, h), nil }
	}
	return []errorAnswer{
		{name: "conditional check failed", answer: always(400, `{"__type":"com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException",`+
			`"message":"The conditional request failed","Item":{"pk":{"S":"JOB#1"},"status_rank":{"N":"3"}}}`, nil),
			requests: 1, code: "ConditionalCheckFailedException", as: new(*types.ConditionalCheckFailedException)},
		{name: "transaction canceled", answer: always(400, `{"__type":"com.amazonaws.dynamodb.v20120810#TransactionCanceledException",`+
			`"Message":"Transaction cancelled, please refer cancellation reasons for specific reasons [ConditionalCheckFailed, None]",`+
			`"CancellationReasons":[{"Code":"ConditionalCheckFailed","Message":"The conditional request failed"},{"Code":"None"}]}`, nil),
			requests: 1, code: "TransactionCanceledException", as: new(*types.TransactionCanceledException)},
		{name: "transaction conflict", answer: always(400, `{"__type":"com.amazonaws.dynamodb.v20120810#TransactionConflictException","message":"conflict"}`, nil),
			requests: 1, code: "TransactionConflictException", as: new(*types.TransactionConflictException)},
		{name: "throttled, every attempt", answer: always(400, `{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException","message":"slow down"}`, nil),
			requests: 3, code: "ProvisionedThroughputExceededException", as: new(*types.ProvisionedThroughputExceededException)},
		{name: "throttled, then through", answer: func(n int, s sent) (*http.Response, error) {
			if n == 1 {
				return respond(400, `{"__type":"com.amazonaws.dynamodb.v20120810#ThrottlingException","message":"rate"}`, nil), nil
			}
			return okAnswer(s), nil
		}, requests: 2, ok: true},
		{name: "5xx, then through", answer: func(n int, s sent) (*http.Response, error) {
			if n == 1 {
				return respond(500, `{"__type":"com.amazon.coral.service#InternalFailure"}`, nil), nil
			}
			return okAnswer(s), nil
		}, requests: 2, ok: true},
		{name: "5xx, every attempt", answer: always(503, `{"__type":"com.amazon.coral.service#ServiceUnavailable","message":"later"}`, nil),
			requests: 3, code: "ServiceUnavailable", as: new(*awshttp.ResponseError)},
		{name: "connection reset, then through", answer: func(n int, s sent) (*http.Response, error) {
			if n == 1 {
				return nil, errors.New("read tcp 10.0.0.1:443: connection reset by peer")
			}
			return okAnswer(s), nil
		}, requests: 2, ok: true},
		{name: "validation error: no retry", answer: always(400, `{"__type":"com.amazon.coral.validate#ValidationException","message":"bad"}`, nil),
			requests: 1, code: "ValidationException", as: new(smithy.APIError)},
		{name: "error type in a header, with a suffix", answer: always(400, `{"message":"bad"}`,
			map[string]string{"X-Amzn-ErrorType": "ValidationException:http://internal.amazon.com/coral/com.amazon.coral.validate/"}),
			requests: 1, code: "ValidationException", as: new(smithy.APIError)},
	}
}

// TestErrorsAsTheSDK gives both clients the same error answers and checks
// that the hand client's errors classify as the SDK's do (errors.As to
// the same exception type, the same error code), after as many attempts.
func TestErrorsAsTheSDK(t *testing.T) {
	t.Parallel()
	update := &dynamodb.UpdateItemInput{TableName: aws.String(table), Key: map[string]types.AttributeValue{"pk": s("a"), "sk": s("b")},
		UpdateExpression: aws.String("SET a = :a"), ExpressionAttributeValues: map[string]types.AttributeValue{":a": n("1")}}
	for _, tc := range errorAnswers() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			type result struct {
				err      error
				requests int
			}
			run := func(hand bool) result {
				w := &wire{answer: tc.answer}
				ddb, hotDDB, _, _ := clients(t, w, nil)
				var api dynamostore.DynamoAPI = ddb
				if hand {
					api = hotDDB
				}
				_, err := api.UpdateItem(t.Context(), update)
				return result{err, len(w.take())}
			}
			sdk, hand := run(false), run(true)
			if sdk.requests != tc.requests || (sdk.err == nil) != tc.ok {
				t.Fatalf("the SDK made %d requests and returned %v; the case wants %d, ok %v", sdk.requests, sdk.err, tc.requests, tc.ok)
			}
			if hand.requests != sdk.requests {
				t.Errorf("the hand client made %d requests, the SDK %d", hand.requests, sdk.requests)
			}
			if tc.ok {
				if hand.err != nil {
					t.Errorf("the hand client failed: %v", hand.err)
				}
				return
			}
			if hand.err == nil {
				t.Fatalf("the hand client succeeded; the SDK: %v", sdk.err)
			}
			var op *smithy.OperationError
			if !errors.As(hand.err, &op) || op.Service() != "DynamoDB" || op.Operation() != "UpdateItem" {
				t.Errorf("not an operation error of DynamoDB UpdateItem: %v", hand.err)
			}
			if !errors.As(hand.err, tc.as) {
				t.Errorf("errors.As(%T) fails on %v", tc.as, hand.err)
			}
			var hapi, sapi smithy.APIError
			if errors.As(hand.err, &hapi) != errors.As(sdk.err, &sapi) || hapi != nil && (hapi.ErrorCode() != tc.code || sapi.ErrorCode() != tc.code) {
				t.Errorf("error codes: hand %v, SDK %v, want %s", hand.err, sdk.err, tc.code)
			}
			var hresp, sresp *awshttp.ResponseError
			if errors.As(hand.err, &hresp) != errors.As(sdk.err, &sresp) || hresp != nil && hresp.HTTPStatusCode() != sresp.HTTPStatusCode() {
				t.Errorf("HTTP status: hand %v, SDK %v", hand.err, sdk.err)
			}
		})
	}
}

// TestErrorDetails checks what the exceptions carry: the item of a failed
// condition, a canceled transaction's reasons.
func TestErrorDetails(t *testing.T) {
	t.Parallel()
	w := &wire{answer: func(_ int, sn sent) (*http.Response, error) {
		if strings.HasSuffix(sn.header.Get("X-Amz-Target"), ".TransactWriteItems") {
			return respond(400, `{"__type":"com.amazonaws.dynamodb.v20120810#TransactionCanceledException","Message":"canceled",`+
				`"CancellationReasons":[{"Code":"ConditionalCheckFailed","Message":"failed","Item":{"n":{"N":"2"}}},{"Code":"None"}]}`, nil), nil
		}
		return respond(400, `{"__type":"com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException","message":"failed",`+
			`"Item":{"s":{"S":"a\"\u2028"},"l":{"L":[{"N":"1"},{"BOOL":true},{"NULL":true},{"B":"AAE="}]},"m":{"M":{"ss":{"SS":["x"]}}}}}`, nil), nil
	}}
	_, hotDDB, _, _ := clients(t, w, nil)
	key := map[string]types.AttributeValue{"pk": s("a"), "sk": s("b")}
	_, err := hotDDB.UpdateItem(t.Context(), &dynamodb.UpdateItemInput{TableName: aws.String(table), Key: key, UpdateExpression: aws.String("SET a = b")})
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		t.Fatalf("UpdateItem = %v", err)
	}
	want := map[string]types.AttributeValue{
		"s": s("a\"\u2028"),
		"l": &types.AttributeValueMemberL{Value: []types.AttributeValue{n("1"), &types.AttributeValueMemberBOOL{Value: true},
			&types.AttributeValueMemberNULL{Value: true}, &types.AttributeValueMemberB{Value: []byte{0, 1}}}},
		"m": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"ss": &types.AttributeValueMemberSS{Value: []string{"x"}}}},
	}
	if !reflect.DeepEqual(ccf.Item, want) || aws.ToString(ccf.Message) != "failed" {
		t.Errorf("exception item %#v, message %q", ccf.Item, aws.ToString(ccf.Message))
	}
	_, err = hotDDB.TransactWriteItems(t.Context(), &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Delete: &types.Delete{TableName: aws.String(table), Key: key}}, {Delete: &types.Delete{TableName: aws.String(table), Key: key}}}})
	var tce *types.TransactionCanceledException
	if !errors.As(err, &tce) || len(tce.CancellationReasons) != 2 || aws.ToString(tce.CancellationReasons[0].Code) != "ConditionalCheckFailed" ||
		aws.ToString(tce.CancellationReasons[1].Code) != "None" || !reflect.DeepEqual(tce.CancellationReasons[0].Item, map[string]types.AttributeValue{"n": n("2")}) {
		t.Errorf("TransactWriteItems = %v, reasons %+v", err, tce)
	}
}

// TestAnswerChecks checks that a corrupted answer is refused as the SDK
// refuses it: DynamoDB's CRC-32, SQS's MD5 of the body.
func TestAnswerChecks(t *testing.T) {
	t.Parallel()
	w := &wire{answer: func(_ int, sn sent) (*http.Response, error) {
		if strings.HasPrefix(sn.header.Get("X-Amz-Target"), "AmazonSQS.") {
			return respond(200, `{"MD5OfMessageBody":"00000000000000000000000000000000","MessageId":"m-1"}`, nil), nil
		}
		return respond(200, "{}", map[string]string{"X-Amz-Crc32": "12345"}), nil
	}}
	_, hotDDB, _, hotSQS := clients(t, w, nil)
	_, err := hotDDB.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{"pk": s("a")}})
	var de *smithy.DeserializationError
	if !errors.As(err, &de) || !strings.Contains(err.Error(), "checksum") {
		t.Errorf("PutItem with a wrong CRC-32 = %v", err)
	}
	_, err = hotSQS.SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: aws.String(queueURL), MessageBody: aws.String("x")})
	if err == nil || !strings.Contains(err.Error(), "checksum") {
		t.Errorf("SendMessage with a wrong MD5 = %v", err)
	}
	if n := len(w.take()); n != 2 {
		t.Errorf("%d requests, want 2 (no retries)", n)
	}
}

// TestSQSErrorCode checks that SQS's query-compatible error code is the
// one the error carries, as the SDK reads it.
func TestSQSErrorCode(t *testing.T) {
	t.Parallel()
	w := &wire{answer: func(int, sent) (*http.Response, error) {
		return respond(400, `{"__type":"com.amazonaws.sqs#QueueDoesNotExist","message":"The specified queue does not exist."}`,
			map[string]string{"X-Amzn-Query-Error": "AWS.SimpleQueueService.NonExistentQueue;Sender"}), nil
	}}
	_, _, q, hotSQS := clients(t, w, nil)
	in := &sqs.SendMessageInput{QueueUrl: aws.String(queueURL), MessageBody: aws.String("x")}
	_, handErr := hotSQS.SendMessage(t.Context(), in)
	_, sdkErr := q.SendMessage(t.Context(), in)
	var hand, sdk smithy.APIError
	if !errors.As(handErr, &hand) || !errors.As(sdkErr, &sdk) || hand.ErrorCode() != sdk.ErrorCode() || hand.ErrorFault() != sdk.ErrorFault() {
		t.Errorf("hand %v, SDK %v", handErr, sdkErr)
	}
}

// TestDeadlineStopsRetries checks that a retry whose backoff would end
// after the context's deadline is not waited for.
func TestDeadlineStopsRetries(t *testing.T) {
	t.Parallel()
	w := &wire{answer: func(int, sent) (*http.Response, error) {
		return respond(400, `{"__type":"com.amazonaws.dynamodb.v20120810#ThrottlingException","message":"rate"}`, nil), nil
	}}
	hourBackoff := func() aws.Retryer {
		return retry.NewStandard(func(o *retry.StandardOptions) {
			o.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return time.Hour, nil })
		})
	}
	_, hotDDB, _, _ := clients(t, w, hourBackoff)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	_, err := hotDDB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{"pk": s("a")}})
	var te *types.ThrottlingException
	if !errors.As(err, &te) || ctx.Err() != nil {
		t.Errorf("PutItem = %v (context: %v), want the throttling error before the deadline", err, ctx.Err())
	}
	if n := len(w.take()); n != 1 {
		t.Errorf("%d attempts, want 1", n)
	}
}

// TestNoSecretsInErrors makes failing calls with canary credentials and
// checks that no error text carries the secret key or the session token.
func TestNoSecretsInErrors(t *testing.T) {
	t.Parallel()
	const secret, token = "CANARY-SECRET-0c1f", "CANARY-TOKEN-77aa"
	for _, a := range errorAnswers() {
		w := &wire{answer: a.answer}
		cfg := testenv.AWSConfig(t)
		cfg.Credentials = aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "AKID", SecretAccessKey: secret, SessionToken: token, Source: "test"}, nil
		})
		cfg.HTTPClient, cfg.Retryer = &http.Client{Transport: w}, noBackoff
		hotDDB, err := awsjson.NewDynamoDB(t.Context(), dynamodb.NewFromConfig(cfg), table)
		if err != nil {
			t.Fatal(err)
		}
		hotSQS, err := awsjson.NewSQS(t.Context(), sqs.NewFromConfig(cfg))
		if err != nil {
			t.Fatal(err)
		}
		_, derr := hotDDB.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{"pk": s("a")}})
		_, serr := hotSQS.SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: aws.String(queueURL), MessageBody: aws.String("x")})
		for _, err := range []error{derr, serr} {
			if err != nil && (strings.Contains(fmt.Sprintf("%v %+v %#v", err, err, err), secret) || strings.Contains(fmt.Sprint(err), token)) {
				t.Errorf("%s: an error carries a credential: %v", a.name, err)
			}
		}
		for _, r := range w.take() {
			if strings.Contains(r.header.Get("Authorization"), secret) || bytes.Contains(r.body, []byte(secret)) {
				t.Errorf("%s: the secret key went on the wire", a.name)
			}
		}
	}
}
