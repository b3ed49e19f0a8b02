package dynamostore_test

import (
	"context"
	"maps"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/store/dynamostore"
)

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
