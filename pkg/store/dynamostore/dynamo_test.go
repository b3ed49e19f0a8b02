package dynamostore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/store/dynamostore"
	"github.com/skiffci/skiff/pkg/store/storetest"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// newTable creates a fresh table in the binary's dynalite and returns a
// client for it and its name.
func newTable(t *testing.T) (*dynamodb.Client, string) {
	t.Helper()
	return testenv.DynaliteTable(t, "skiff-test")
}

// clock is a settable clock for WithClock.
type clock struct{ ns atomic.Int64 }

func newClock(t time.Time) *clock { c := &clock{}; c.set(t); return c }
func (c *clock) set(t time.Time)  { c.ns.Store(t.UnixNano()) }
func (c *clock) now() time.Time   { return time.Unix(0, c.ns.Load()).UTC() }

// clientsOf are the DynamoDB clients a Dynamo runs over: the SDK's.
var clientsOf = []struct {
	name string
	of   func(t *testing.T, client *dynamodb.Client, table string) dynamostore.DynamoAPI
}{
	{"sdk", func(_ *testing.T, client *dynamodb.Client, _ string) dynamostore.DynamoAPI { return client }},
}

func TestDynamoConformance(t *testing.T) {
	t.Parallel()
	for _, c := range clientsOf {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			storetest.Run(t, func(t *testing.T) store.Store {
				client, table := newTable(t)
				return dynamostore.NewDynamo(c.of(t, client, table), table, dynamostore.WithClock(func() time.Time { return storetest.Now }))
			})
			storetest.RunExpiry(t, func(t *testing.T, now func() time.Time) store.Store {
				client, table := newTable(t)
				return dynamostore.NewDynamo(c.of(t, client, table), table, dynamostore.WithClock(now))
			})
		})
	}
}

// plain turns an item into Go values for comparison: S as string, N as
// "N:<digits>", L as []any.
func plain(item map[string]types.AttributeValue) map[string]any {
	out := map[string]any{}
	for k, v := range item {
		out[k] = plainValue(v)
	}
	return out
}

func plainValue(v types.AttributeValue) any {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return v.Value
	case *types.AttributeValueMemberN:
		return "N:" + v.Value
	case *types.AttributeValueMemberL:
		l := make([]any, len(v.Value))
		for i, e := range v.Value {
			l[i] = plainValue(e)
		}
		return l
	}
	return fmt.Sprintf("unexpected %T", v)
}

func n(i int64) string { return "N:" + strconv.FormatInt(i, 10) }

func TestDynamoItemShapes(t *testing.T) {
	t.Parallel()
	now := storetest.Now
	ts := func(d time.Duration) string { return now.Add(d).Format("2006-01-02T15:04:05.000000000Z") }
	queued := store.JobRecord{
		ID: 42, RunID: 7, Attempt: 2, Repository: "octo-org/hello", Owner: "octo-org", InstallationID: 99,
		Status: store.StatusQueued, Labels: []string{"self-hosted", "gpu-a10"}, Pool: "gpu-a10",
		WorkflowName: "CI", JobName: "build", Branch: "main", QueuedAt: now.Add(1500 * time.Millisecond),
		UpdatedAt: now.Add(2 * time.Second), ExpiresAt: now.Add(time.Hour + 100*time.Millisecond),
	}
	cases := []struct {
		name   string
		write  func(ctx context.Context, d *dynamostore.Dynamo) error
		pk, sk string
		want   map[string]any
	}{
		{"queued job writes only the fields it knows", func(ctx context.Context, d *dynamostore.Dynamo) error {
			_, err := d.RecordJob(ctx, queued)
			return err
		}, "JOB#42", "JOB", map[string]any{
			"pk": "JOB#42", "sk": "JOB", "status": "queued", "status_rank": n(2), "run_id": n(7), "attempt": n(2),
			"repository": "octo-org/hello", "owner": "octo-org", "installation_id": n(99),
			"labels": []any{"self-hosted", "gpu-a10"}, "pool": "gpu-a10", "workflow_name": "CI", "job_name": "build",
			"branch": "main", "queued_at": ts(1500 * time.Millisecond), "updated_at": ts(2 * time.Second),
			"expires_at": n(now.Unix() + 3601),
		}},
		{"completed job after queued", func(ctx context.Context, d *dynamostore.Dynamo) error {
			if _, err := d.RecordJob(ctx, queued); err != nil {
				return err
			}
			_, err := d.RecordJob(ctx, store.JobRecord{ID: 42, Status: store.StatusCompleted, Conclusion: "cancelled",
				CompletedAt: now.Add(time.Minute), RunnerID: 5, RunnerName: "r-5", UpdatedAt: now.Add(time.Minute)})
			return err
		}, "JOB#42", "JOB", map[string]any{
			"pk": "JOB#42", "sk": "JOB", "status": "completed", "status_rank": n(4), "run_id": n(7), "attempt": n(2),
			"repository": "octo-org/hello", "owner": "octo-org", "installation_id": n(99),
			"labels": []any{"self-hosted", "gpu-a10"}, "pool": "gpu-a10", "workflow_name": "CI", "job_name": "build",
			"branch": "main", "queued_at": ts(1500 * time.Millisecond), "completed_at": ts(time.Minute),
			"runner_name": "r-5", "runner_id": n(5), "conclusion": "cancelled", "updated_at": ts(time.Minute),
			"expires_at": n(now.Unix() + 3601),
		}},
		{"run", func(ctx context.Context, d *dynamostore.Dynamo) error {
			return d.RecordRun(ctx, store.RunRecord{ID: 7, Attempt: 1, Event: "pull_request", WorkflowName: "CI",
				Repository: "octo-org/hello", UpdatedAt: now, ExpiresAt: now.Add(24 * time.Hour)})
		}, "RUN#7", "RUN", map[string]any{
			"pk": "RUN#7", "sk": "RUN", "attempt": n(1), "event": "pull_request", "workflow_name": "CI",
			"repository": "octo-org/hello", "updated_at": ts(0), "expires_at": n(now.Add(24 * time.Hour).Unix()),
		}},
		{"run of attempt zero keeps the attempt", func(ctx context.Context, d *dynamostore.Dynamo) error {
			return d.RecordRun(ctx, store.RunRecord{ID: 8, Event: "push"})
		}, "RUN#8", "RUN", map[string]any{"pk": "RUN#8", "sk": "RUN", "attempt": n(0), "event": "push"}},
	}
	for _, c := range clientsOf {
		for _, tc := range cases {
			t.Run(c.name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				client, table := newTable(t)
				d := dynamostore.NewDynamo(c.of(t, client, table), table, dynamostore.WithClock(func() time.Time { return now }))
				if err := tc.write(t.Context(), d); err != nil {
					t.Fatal(err)
				}
				out, err := client.GetItem(t.Context(), &dynamodb.GetItemInput{
					TableName: aws.String(table), ConsistentRead: aws.Bool(true),
					Key: map[string]types.AttributeValue{
						"pk": &types.AttributeValueMemberS{Value: tc.pk}, "sk": &types.AttributeValueMemberS{Value: tc.sk},
					},
				})
				if err != nil {
					t.Fatal(err)
				}
				if got := plain(out.Item); !reflect.DeepEqual(got, tc.want) {
					t.Errorf("item:\n got %v\nwant %v", got, tc.want)
				}
			})
		}
	}
}

func TestDynamoExpiredRecordsAreAbsent(t *testing.T) {
	t.Parallel()
	now := storetest.Now
	ctx := t.Context()
	cases := []struct {
		name string
		run  func(t *testing.T, d *dynamostore.Dynamo, c *clock)
	}{
		{"job is readable until the second it expires", func(t *testing.T, d *dynamostore.Dynamo, c *clock) {
			if _, err := d.RecordJob(ctx, store.JobRecord{ID: 1, Status: store.StatusQueued, ExpiresAt: now.Add(time.Hour)}); err != nil {
				t.Fatal(err)
			}
			c.set(now.Add(time.Hour - time.Nanosecond))
			if _, err := d.Job(ctx, 1); err != nil {
				t.Errorf("Job just before expiry: %v", err)
			}
			c.set(now.Add(time.Hour))
			if _, err := d.Job(ctx, 1); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("Job at expiry: %v, want ErrNotFound", err)
			}
		}},
		{"event for an expired job starts a new record", func(t *testing.T, d *dynamostore.Dynamo, c *clock) {
			old := store.JobRecord{ID: 2, Status: store.StatusCompleted, Conclusion: "success", RunnerName: "r-1",
				Labels: []string{"old"}, ExpiresAt: now.Add(time.Hour)}
			if _, err := d.RecordJob(ctx, old); err != nil {
				t.Fatal(err)
			}
			c.set(now.Add(2 * time.Hour))
			fresh := store.JobRecord{ID: 2, Status: store.StatusQueued, Pool: "cpu", ExpiresAt: now.Add(5 * time.Hour)}
			adv, err := d.RecordJob(ctx, fresh)
			if err != nil || !adv {
				t.Fatalf("RecordJob over an expired record = %v, %v; want true, nil", adv, err)
			}
			got, err := d.Job(ctx, 2)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, fresh) {
				t.Errorf("record:\n got %+v\nwant %+v (nothing of the expired record)", got, fresh)
			}
		}},
		{"run expires and an older attempt may then be recorded", func(t *testing.T, d *dynamostore.Dynamo, c *clock) {
			if err := d.RecordRun(ctx, store.RunRecord{ID: 3, Attempt: 5, Event: "push", ExpiresAt: now.Add(time.Hour)}); err != nil {
				t.Fatal(err)
			}
			c.set(now.Add(time.Hour))
			if _, err := d.Run(ctx, 3); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("Run at expiry: %v, want ErrNotFound", err)
			}
			want := store.RunRecord{ID: 3, Attempt: 1, Event: "schedule"}
			if err := d.RecordRun(ctx, want); err != nil {
				t.Fatal(err)
			}
			if got, err := d.Run(ctx, 3); err != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("Run = %+v, %v; want %+v", got, err, want)
			}
		}},
		{"record without ExpiresAt never expires", func(t *testing.T, d *dynamostore.Dynamo, c *clock) {
			if _, err := d.RecordJob(ctx, store.JobRecord{ID: 4, Status: store.StatusWaiting}); err != nil {
				t.Fatal(err)
			}
			c.set(now.Add(100 * 365 * 24 * time.Hour))
			if _, err := d.Job(ctx, 4); err != nil {
				t.Errorf("Job a century later: %v", err)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			client, table := newTable(t)
			c := newClock(now)
			tc.run(t, dynamostore.NewDynamo(client, table, dynamostore.WithClock(c.now)), c)
		})
	}
}

// TestDynamoItemExpiredBeforeTTLDeletion writes an item the way DynamoDB
// leaves it when TTL has not deleted it yet: past expires_at, still there.
func TestDynamoItemExpiredBeforeTTLDeletion(t *testing.T) {
	t.Parallel()
	client, table := newTable(t)
	ctx := t.Context()
	_, err := client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: "JOB#5"}, "sk": &types.AttributeValueMemberS{Value: "JOB"},
		"status": &types.AttributeValueMemberS{Value: "queued"}, "status_rank": &types.AttributeValueMemberN{Value: "2"},
		"expires_at": &types.AttributeValueMemberN{Value: strconv.FormatInt(time.Now().Add(-48*time.Hour).Unix(), 10)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	d := dynamostore.NewDynamo(client, table) // the real clock
	if j, err := d.Job(ctx, 5); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Job = %+v, %v; want ErrNotFound", j, err)
	}
}

func TestDynamoMissingTableIsAFailureNotAnAnswer(t *testing.T) {
	t.Parallel()
	for _, c := range clientsOf {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			client, _ := newTable(t)
			testMissingTable(t, dynamostore.NewDynamo(c.of(t, client, "skiff-no-such-table"), "skiff-no-such-table"))
		})
	}
}

func testMissingTable(t *testing.T, d *dynamostore.Dynamo) {
	ctx := t.Context()
	var rnf *types.ResourceNotFoundException
	if _, err := d.Job(ctx, 1); !errors.As(err, &rnf) || errors.Is(err, store.ErrNotFound) {
		t.Errorf("Job: %v, want ResourceNotFoundException and not ErrNotFound", err)
	}
	if _, err := d.RecordJob(ctx, store.JobRecord{ID: 1, Status: store.StatusQueued}); !errors.As(err, &rnf) {
		t.Errorf("RecordJob: %v, want ResourceNotFoundException", err)
	}
	if err := d.RecordRun(ctx, store.RunRecord{ID: 1}); !errors.As(err, &rnf) {
		t.Errorf("RecordRun: %v, want ResourceNotFoundException", err)
	}
}

func TestCreateTableTwice(t *testing.T) {
	t.Parallel()
	client, table := newTable(t)
	if err := dynamostore.CreateTable(t.Context(), client, table); err != nil {
		t.Errorf("second CreateTable: %v, want nil", err)
	}
	out, err := client.DescribeTable(t.Context(), &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	if err != nil {
		t.Fatal(err)
	}
	if out.Table.TableStatus != types.TableStatusActive {
		t.Errorf("table status %s, want ACTIVE", out.Table.TableStatus)
	}
	if bm := out.Table.BillingModeSummary; bm == nil || bm.BillingMode != types.BillingModePayPerRequest {
		t.Errorf("billing mode %+v, want PAY_PER_REQUEST", bm)
	}
}

// TestDynamoDeadlineMidRequest points the real SDK at a server that never
// answers: every call must return when its context ends.
func TestDynamoDeadlineMidRequest(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // the server notices a closed connection only once the body is read
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	for _, c := range clientsOf {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			testDeadline(t, dynamostore.NewDynamo(c.of(t, testenv.DynamoClient(t, srv.URL), "skiff"), "skiff"))
		})
	}
}

func testDeadline(t *testing.T, d *dynamostore.Dynamo) {
	calls := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"RecordJob", func(ctx context.Context) error {
			_, err := d.RecordJob(ctx, store.JobRecord{ID: 1, Status: store.StatusQueued})
			return err
		}},
		{"Job", func(ctx context.Context) error { _, err := d.Job(ctx, 1); return err }},
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
			defer cancel()
			if err := c.call(ctx); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s: %v, want context.DeadlineExceeded", c.name, err)
			}
		})
	}
}

// alwaysConflicting is a DynamoAPI whose every conditional write fails, as
// if other writers kept changing the record under RecordJob.
type alwaysConflicting struct {
	dynamostore.DynamoAPI
	calls atomic.Int64
}

func (f *alwaysConflicting) UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	f.calls.Add(1)
	return nil, &types.ConditionalCheckFailedException{Message: aws.String("The conditional request failed")}
}

func (f *alwaysConflicting) PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	f.calls.Add(1)
	return nil, &types.ConditionalCheckFailedException{Message: aws.String("The conditional request failed")}
}

func TestDynamoRecordJobGivesUpUnderEndlessConflicts(t *testing.T) {
	t.Parallel()
	f := &alwaysConflicting{}
	d := dynamostore.NewDynamo(f, "skiff")
	adv, err := d.RecordJob(t.Context(), store.JobRecord{ID: 1, Status: store.StatusQueued})
	if err == nil || adv {
		t.Fatalf("RecordJob = %v, %v; want false and an error", adv, err)
	}
	if got := f.calls.Load(); got != 9 {
		t.Errorf("%d calls, want 9 (3 tries of advance, fill, replace)", got)
	}
}
