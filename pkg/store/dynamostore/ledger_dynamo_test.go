package dynamostore_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/ledger/ledgertest"
	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/store/dynamostore"
	"github.com/skiffci/skiff/pkg/store/storetest"
)

// newMotoTable creates a fresh table (with the live-pool index) in the
// binary's moto, which emulates TransactWriteItems (dynalite does not).
func newMotoTable(t *testing.T) (*dynamodb.Client, string) {
	t.Helper()
	return testenv.MotoTable(t, "skiff-ledger")
}

// newMotoLedger returns a ledger over a fresh moto table, on a clock that
// stands at storetest.Now, and the client and table under it.
func newMotoLedger(t *testing.T) (*dynamostore.LedgerDynamo, *dynamodb.Client, string) {
	t.Helper()
	client, table := newMotoTable(t)
	return dynamostore.NewLedgerDynamo(client, table, dynamostore.WithClock(func() time.Time { return storetest.Now })), client, table
}

func TestLedgerDynamoConformance(t *testing.T) {
	t.Parallel()
	ledgertest.RunLedger(t, func(t *testing.T, now func() time.Time) ledger.Ledger {
		client, table := newMotoTable(t)
		return dynamostore.NewLedgerDynamo(client, table, dynamostore.WithClock(now))
	})
	ledgertest.RunInterruptions(t, func(t *testing.T, now func() time.Time) ledgertest.InterruptLedger {
		client, table := newMotoTable(t)
		return dynamostore.NewLedgerDynamo(client, table, dynamostore.WithClock(now))
	})
}

// TestCreateTableHasLivePoolIndex checks the index on both emulators:
// dynalite serves every other store test, moto the ledger's.
func TestCreateTableHasLivePoolIndex(t *testing.T) {
	t.Parallel()
	for name, create := range map[string]func(*testing.T) (*dynamodb.Client, string){"dynalite": newTable, "moto": newMotoTable} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			client, table := create(t)
			out, err := client.DescribeTable(t.Context(), &dynamodb.DescribeTableInput{TableName: aws.String(table)})
			if err != nil {
				t.Fatal(err)
			}
			if len(out.Table.GlobalSecondaryIndexes) != 1 {
				t.Fatalf("indexes %+v, want live-pool", out.Table.GlobalSecondaryIndexes)
			}
			gsi := out.Table.GlobalSecondaryIndexes[0]
			if aws.ToString(gsi.IndexName) != dynamostore.LivePoolIndex || len(gsi.KeySchema) != 1 ||
				aws.ToString(gsi.KeySchema[0].AttributeName) != "live_pool" || gsi.Projection.ProjectionType != types.ProjectionTypeAll {
				t.Errorf("index %+v", gsi)
			}
		})
	}
}

// TestLedgerDynamoItems pins the stored shape of a runner through its
// lifecycle: live_pool only while live, expires_at only once ended (and on
// the instance pointer), and the count back to zero.
func TestLedgerDynamoItems(t *testing.T) {
	t.Parallel()
	l, client, table := newMotoLedger(t)
	ctx := t.Context()
	r := ledger.Runner{Name: "skiff-77-1", Pool: "gpu", JobID: 77, RunID: 7, Attempt: 1, Token: "tok", ReservedAt: storetest.Now}
	if n, err := l.Reserve(ctx, "gpu", 2, []ledger.Runner{r}); err != nil || n != 1 {
		t.Fatalf("Reserve = %d, %v", n, err)
	}
	get := func(pk, sk string) map[string]any {
		t.Helper()
		out, err := client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true),
			Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: pk}, "sk": &types.AttributeValueMemberS{Value: sk}}})
		if err != nil {
			t.Fatal(err)
		}
		return plain(out.Item)
	}
	rec := get("RUNNER#skiff-77-1", "RUNNER")
	if rec["live_pool"] != "gpu" || rec["state"] != "reserved" || rec["state_rank"] != n(1) || rec["job_id"] != n(77) || rec["expires_at"] != nil {
		t.Errorf("reserved record %v", rec)
	}
	if c := get("POOL#gpu", "RUNNERS"); c["count"] != n(1) {
		t.Errorf("count %v, want 1", c)
	}
	if err := l.Launched(ctx, r.Name, ledger.LaunchReport{InstanceID: "i-0c", InstanceType: "g6.xlarge", Zone: "us-east-1a", Spot: true, At: storetest.Now}); err != nil {
		t.Fatal(err)
	}
	if p := get("INSTANCE#i-0c", "INSTANCE"); p["runner"] != "skiff-77-1" || p["pool"] != "gpu" || p["expires_at"] != nil {
		t.Errorf("instance pointer %v", p)
	}
	end := storetest.Now.Add(time.Hour)
	if ended, err := l.EndInstance(ctx, "i-0c", end, "state_terminated"); err != nil || !ended {
		t.Fatalf("EndInstance = %v, %v", ended, err)
	}
	rec = get("RUNNER#skiff-77-1", "RUNNER")
	exp := n(end.Add(ledger.DefaultRunnerTTL).Unix())
	if _, live := rec["live_pool"]; live || rec["state"] != "terminated" || rec["expires_at"] != exp || rec["reason"] != "state_terminated" {
		t.Errorf("ended record %v", rec)
	}
	if p := get("INSTANCE#i-0c", "INSTANCE"); p["expires_at"] != exp {
		t.Errorf("instance pointer %v: want it to expire with the record", p)
	}
	if c := get("POOL#gpu", "RUNNERS"); c["count"] != n(0) {
		t.Errorf("count %v, want 0", c)
	}
}

// TestLedgerDynamoTransactionFailures sends moto transactions that fail in
// each way the ledger meets, and checks how the ledger reads them: a
// record that exists (reservation retried: not counted again), a count at
// its max (nothing reserved), both at once, and a racing end (one wins).
func TestLedgerDynamoTransactionFailures(t *testing.T) {
	t.Parallel()
	l, _, _ := newMotoLedger(t)
	ctx := t.Context()
	rs := []ledger.Runner{
		{Name: "skiff-1-1", Pool: "p", JobID: 1, ReservedAt: storetest.Now},
		{Name: "skiff-2-1", Pool: "p", JobID: 2, ReservedAt: storetest.Now},
		{Name: "skiff-3-1", Pool: "p", JobID: 3, ReservedAt: storetest.Now},
	}
	steps := []struct {
		name    string
		max     int
		runners []ledger.Runner
		want    int
		live    int
	}{
		{"fits", 2, rs[:1], 1, 1},
		{"one exists, one new", 3, rs[:2], 1, 2},           // the record's condition fails: dropped, the rest retried
		{"count at max", 2, rs[2:], 0, 2},                  // never sent: the count says full
		{"exists and the rest do not fit", 2, rs, 0, 2},    // dropped, then full
		{"max raised: the missing one", 10, rs, 1, 3},      // two exist, one new
		{"all exist", 10, rs, 0, 3},                        // every record's condition fails
		{"count lowered below live", 1, rs[2:] /**/, 0, 3}, // a pool shrunk under its live count
	}
	for _, s := range steps {
		got, err := l.Reserve(ctx, "p", s.max, s.runners)
		live, _ := l.Live(ctx, "p")
		if err != nil || got != s.want || live != s.live {
			t.Errorf("%s: Reserve = %d, %v, live %d; want %d, nil, live %d", s.name, got, err, live, s.want, s.live)
		}
	}
}

// TestClassifyTransactionErrors checks the classification of real moto
// cancellations and of the failures moto cannot produce (conflicts,
// throttling inside a transaction).
func TestClassifyTransactionErrors(t *testing.T) {
	t.Parallel()
	client, table := newMotoTable(t)
	ctx := t.Context()
	put := func(pk string, cond string) types.TransactWriteItem {
		in := &types.Put{TableName: aws.String(table), Item: map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: pk}, "sk": &types.AttributeValueMemberS{Value: "X"}}}
		if cond != "" {
			in.ConditionExpression = aws.String(cond)
		}
		return types.TransactWriteItem{Put: in}
	}
	if _, err := client.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{put("A", ""), put("B", "")}}); err != nil {
		t.Fatal(err)
	}
	_, real := client.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		put("A", "attribute_not_exists(pk)"), put("C", "attribute_not_exists(pk)"), put("B", "attribute_not_exists(pk)"),
	}})
	reasons := func(codes ...string) error {
		r := make([]types.CancellationReason, len(codes))
		for i, c := range codes {
			r[i] = types.CancellationReason{Code: aws.String(c)}
		}
		return fmt.Errorf("wrapped: %w", &types.TransactionCanceledException{CancellationReasons: r})
	}
	cases := []struct {
		name     string
		err      error
		n        int
		ok       bool
		failed   []bool
		conflict bool
	}{
		{"moto: conditions of items 0 and 2", real, 3, true, []bool{true, false, true}, false},
		{"conflict", reasons("None", "TransactionConflict"), 2, true, []bool{false, false}, true},
		{"condition and conflict", reasons("ConditionalCheckFailed", "TransactionConflict"), 2, true, []bool{true, false}, true},
		{"throttled", reasons("None", "ThrottlingError"), 2, false, nil, false},
		{"validation", reasons("ValidationError"), 1, false, nil, false},
		{"reasons missing", reasons(), 2, false, nil, false},
		{"conflict exception", &types.TransactionConflictException{}, 2, true, nil, true},
		{"other error", errors.New("connection reset"), 2, false, nil, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			failed, conflict, ok := dynamostore.ClassifyTxForTest(c.err, c.n)
			if ok != c.ok || conflict != c.conflict || fmt.Sprint(failed) != fmt.Sprint(c.failed) {
				t.Errorf("classify(%v) = %v, %v, %v; want %v, %v, %v", c.err, failed, conflict, ok, c.failed, c.conflict, c.ok)
			}
		})
	}
}

// countingAPI counts the ledger's requests and the items they write.
type countingAPI struct {
	dynamostore.LedgerDynamoAPI
	writes, items atomic.Int64
}

func (c *countingAPI) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	c.writes.Add(1)
	c.items.Add(1)
	return c.LedgerDynamoAPI.UpdateItem(ctx, in, opts...)
}

func (c *countingAPI) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	c.writes.Add(1)
	c.items.Add(int64(len(in.TransactItems)))
	return c.LedgerDynamoAPI.TransactWriteItems(ctx, in, opts...)
}

// TestLedgerDynamoWritesPerLifecycle counts the write requests and item
// writes of one runner from reservation to end, uncontended; README's
// cost note quotes it. Transactional items cost twice a plain write, and
// each write of a live record also writes the live-pool index.
func TestLedgerDynamoWritesPerLifecycle(t *testing.T) {
	t.Parallel()
	client, table := newMotoTable(t)
	api := &countingAPI{LedgerDynamoAPI: client}
	l := dynamostore.NewLedgerDynamo(api, table, dynamostore.WithClock(func() time.Time { return storetest.Now }))
	ctx := t.Context()
	r := ledger.Runner{Name: "skiff-9-1", Pool: "cpu", JobID: 9, ReservedAt: storetest.Now}
	type step struct {
		name          string
		do            func() error
		writes, items int64
	}
	steps := []step{
		{"reserve", func() error { _, err := l.Reserve(ctx, "cpu", 5, []ledger.Runner{r}); return err }, 1, 2},
		{"launched", func() error {
			return l.Launched(ctx, r.Name, ledger.LaunchReport{InstanceID: "i-09", InstanceType: "c7i.large", At: storetest.Now})
		}, 2, 2},
		{"registered", func() error { return l.Advance(ctx, r.Name, ledger.StateRegistered, storetest.Now, 0) }, 1, 1},
		{"job started", func() error { return l.Advance(ctx, r.Name, ledger.StateJobStarted, storetest.Now, 9) }, 1, 1},
		{"job completed", func() error { return l.Advance(ctx, r.Name, ledger.StateJobCompleted, storetest.Now, 9) }, 1, 1},
		{"end", func() error { _, err := l.EndInstance(ctx, "i-09", storetest.Now, "state_terminated"); return err }, 1, 3},
		{"end again", func() error { _, err := l.EndInstance(ctx, "i-09", storetest.Now, "state_terminated"); return err }, 0, 0},
	}
	var total, totalItems int64
	for _, s := range steps {
		w0, i0 := api.writes.Load(), api.items.Load()
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		w, i := api.writes.Load()-w0, api.items.Load()-i0
		total, totalItems = total+w, totalItems+i
		t.Logf("%-13s %d write requests, %d items", s.name, w, i)
		if w != s.writes || i != s.items {
			t.Errorf("%s: %d write requests, %d items; want %d, %d", s.name, w, i, s.writes, s.items)
		}
	}
	t.Logf("lifecycle: %d write requests, %d item writes", total, totalItems)
}

// TestDynamoRecordLifecycle checks RecordLifecycle against moto: the job's
// record merges as RecordJob merges it, the runner's ledger record moves
// forward only as Ledger.Advance moves it, an in-order event on one of
// skiff's runners costs one TransactWriteItems, and a replay changes
// nothing.
func TestDynamoRecordLifecycle(t *testing.T) {
	t.Parallel()
	at, job := lifecycleAt, lifecycleJob
	started := store.RunnerStep{Runner: lifecycleRunner, To: ledger.StateJobStarted, At: at(2)}
	completed := store.RunnerStep{Runner: lifecycleRunner, To: ledger.StateJobCompleted, At: at(9)}
	type event = lifecycleEvent
	cases := []lifecycleCase{
		{"in order: one transaction", ledger.StateLaunched, []event{{job(store.StatusQueued, 0), store.RunnerStep{}}},
			event{job(store.StatusInProgress, 2), started}, true, store.StatusInProgress, at(2),
			ledger.StateJobStarted, true, true, map[string]int{"TransactWriteItems": 1}},
		{"completed after in_progress: one transaction", ledger.StateLaunched, []event{{job(store.StatusInProgress, 2), started}},
			event{job(store.StatusCompleted, 9), completed}, true, store.StatusCompleted, at(9),
			ledger.StateJobCompleted, true, true, map[string]int{"TransactWriteItems": 1}},
		{"replayed in_progress changes nothing", ledger.StateLaunched, []event{{job(store.StatusInProgress, 2), started}},
			event{job(store.StatusInProgress, 2), started}, false, store.StatusInProgress, at(2),
			ledger.StateJobStarted, true, true, nil},
		{"late in_progress after completed fills, never reopens", ledger.StateRegistered, []event{{job(store.StatusCompleted, 9), completed}},
			event{job(store.StatusInProgress, 12), started}, false, store.StatusCompleted, at(12),
			ledger.StateJobCompleted, true, true, nil},
		{"late in_progress after completed, runner behind: the runner moves, the job stays", ledger.StateRegistered,
			[]event{{job(store.StatusCompleted, 9), store.RunnerStep{}}},
			event{job(store.StatusInProgress, 12), started}, false, store.StatusCompleted, at(12),
			ledger.StateJobStarted, true, true, nil},
		{"a runner that is not skiff's: the job alone", ledger.StateUnknown, nil,
			event{job(store.StatusInProgress, 2), started}, true, store.StatusInProgress, at(2),
			ledger.StateUnknown, false, false, nil},
		{"a terminated runner gets only its missing times", ledger.StateTerminated, nil,
			event{job(store.StatusInProgress, 2), started}, true, store.StatusInProgress, at(2),
			ledger.StateTerminated, true, true, nil},
		{"an advance older than the record keeps updated_at", ledger.StateLaunched, []event{{job(store.StatusQueued, 20), store.RunnerStep{}}},
			event{job(store.StatusInProgress, 2), started}, true, store.StatusInProgress, at(20),
			ledger.StateJobStarted, true, true, nil},
		{"no runner named: the job alone, one write", ledger.StateUnknown, []event{{job(store.StatusQueued, 0), store.RunnerStep{}}},
			event{job(store.StatusCompleted, 9), store.RunnerStep{}}, true, store.StatusCompleted, at(9),
			ledger.StateUnknown, false, false, map[string]int{"UpdateItem": 1}},
	}
	for _, c := range clientsOf {
		for _, tc := range cases {
			t.Run(c.name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				client, table := newMotoTable(t)
				calls := &testenv.CountingTransport{}
				counted := dynamodb.New(client.Options(), func(o *dynamodb.Options) { o.HTTPClient = &http.Client{Transport: calls} })
				d := dynamostore.NewDynamo(c.of(t, counted, table), table, dynamostore.WithClock(func() time.Time { return at(30) }))
				ctx := context.Background()
				if tc.runnerState != ledger.StateUnknown {
					seedRunner(t, client, table, lifecycleRunner, tc.runnerState)
				}
				for _, ev := range tc.before {
					if _, err := d.RecordLifecycle(ctx, ev.j, ev.step); err != nil {
						t.Fatal(err)
					}
				}
				_ = calls.Take()
				advanced, err := d.RecordLifecycle(ctx, tc.ev.j, tc.ev.step)
				if err != nil || advanced != tc.wantAdvanced {
					t.Fatalf("RecordLifecycle = %v, %v; want %v", advanced, err, tc.wantAdvanced)
				}
				if got := calls.Take(); tc.wantCalls != nil && !maps.Equal(got, tc.wantCalls) {
					t.Errorf("calls = %v, want %v", got, tc.wantCalls)
				}
				checkLifecycleJob(t, d, tc)
				checkLifecycleRunner(t, runnerItem(t, client, table, lifecycleRunner), tc)
			})
		}
	}
}

// The job and the runner of TestDynamoRecordLifecycle.
const (
	lifecycleJobID  = 9001
	lifecycleRunner = "skiff-default-9001-1"
)

// lifecycleAt is min minutes past noon on the test's day.
func lifecycleAt(min int) time.Time { return time.Date(2026, 6, 1, 12, min, 0, 0, time.UTC) }

// lifecycleJob is the test's job in status s, as an event received at
// minute received says it: started at minute 2 on the test's runner once in
// progress, completed at minute 9.
func lifecycleJob(s store.Status, received int) store.JobRecord {
	at := lifecycleAt
	j := store.JobRecord{ID: lifecycleJobID, RunID: 77, Attempt: 1, Repository: "o/r", Status: s, Pool: "default",
		QueuedAt: at(0), UpdatedAt: at(received), ExpiresAt: at(received).Add(24 * time.Hour)}
	if s >= store.StatusInProgress {
		j.StartedAt, j.RunnerName, j.RunnerID = at(2), lifecycleRunner, 5
	}
	if s == store.StatusCompleted {
		j.CompletedAt, j.Conclusion = at(9), "success"
	}
	return j
}

// lifecycleEvent is one event's write: the job's record and its runner's
// step.
type lifecycleEvent struct {
	j    store.JobRecord
	step store.RunnerStep
}

// lifecycleCase is one event recorded over the records the events before
// it left, and what it must leave.
type lifecycleCase struct {
	name         string
	runnerState  ledger.State // the runner's record before; unknown: none
	before       []lifecycleEvent
	ev           lifecycleEvent
	wantAdvanced bool
	wantStatus   store.Status
	wantUpdated  time.Time
	wantRunner   ledger.State // unknown: no record
	wantStarted  bool         // the runner has started_at
	wantBusyJob  bool
	wantCalls    map[string]int
}

// checkLifecycleJob checks the job's record against tc: its status, its
// updated_at, and its runner and start once in progress.
func checkLifecycleJob(t *testing.T, d *dynamostore.Dynamo, tc lifecycleCase) {
	t.Helper()
	j, err := d.Job(context.Background(), lifecycleJobID)
	if err != nil {
		t.Fatal(err)
	}
	if j.Status != tc.wantStatus || !j.UpdatedAt.Equal(tc.wantUpdated) || j.QueuedAt.IsZero() && len(tc.before) > 0 {
		t.Errorf("job = status %s, updated %s; want %s, %s", j.Status, j.UpdatedAt, tc.wantStatus, tc.wantUpdated)
	}
	if tc.wantStatus >= store.StatusInProgress && (j.RunnerName != lifecycleRunner || j.StartedAt.IsZero()) {
		t.Errorf("job lacks its runner or start: %+v", j)
	}
}

// checkLifecycleRunner checks the runner's stored item against tc: none
// for no record, else its state, started_at and busy_job.
func checkLifecycleRunner(t *testing.T, item map[string]types.AttributeValue, tc lifecycleCase) {
	t.Helper()
	if tc.wantRunner == ledger.StateUnknown {
		if item != nil {
			t.Errorf("a runner record was made: %v", plain(item))
		}
		return
	}
	p := plain(item)
	if p["state"] != tc.wantRunner.String() || p["state_rank"] != "N:"+strconv.Itoa(int(tc.wantRunner)) {
		t.Errorf("runner = %v, want %s", p, tc.wantRunner)
	}
	if _, ok := p["started_at"]; ok != tc.wantStarted {
		t.Errorf("runner started_at present %v, want %v: %v", ok, tc.wantStarted, p)
	}
	if got := p["busy_job"]; (got == "N:"+strconv.Itoa(lifecycleJobID)) != tc.wantBusyJob {
		t.Errorf("runner busy_job = %v, want job %d: %v", got, lifecycleJobID, tc.wantBusyJob)
	}
}

// seedRunner writes a runner's ledger record as the ledger writes it (see
// the key design in the package doc): the state and its rank.
func seedRunner(t *testing.T, client *dynamodb.Client, table, name string, s ledger.State) {
	t.Helper()
	_, err := client.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: "RUNNER#" + name}, "sk": &types.AttributeValueMemberS{Value: "RUNNER"},
		"pool": &types.AttributeValueMemberS{Value: "default"}, "job_id": &types.AttributeValueMemberN{Value: "9001"},
		"state": &types.AttributeValueMemberS{Value: s.String()}, "state_rank": &types.AttributeValueMemberN{Value: strconv.Itoa(int(s))},
	}})
	if err != nil {
		t.Fatal(err)
	}
}

func runnerItem(t *testing.T, client *dynamodb.Client, table, name string) map[string]types.AttributeValue {
	t.Helper()
	out, err := client.GetItem(t.Context(), &dynamodb.GetItemInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "RUNNER#" + name}, "sk": &types.AttributeValueMemberS{Value: "RUNNER"}}})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item
}
