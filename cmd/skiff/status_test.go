package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	cwtypes "github.com/aws/aws-sdk-go-v2/service/cloudwatch/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/skiffci/skiff/internal/local"
	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/metrics"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/queue"
	"github.com/skiffci/skiff/pkg/room"
	"github.com/skiffci/skiff/pkg/runnerversion"
	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/store/sqlitestore"
)

var statusNow = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

// fakeSQS answers GetQueueAttributes from a table of queue URLs.
type fakeSQS struct {
	//lint:ignore U1000 embedded so that the fake is an sqsAPI: a method it does not answer panics (nil interface)
	sqsAPI
	depth map[string][3]int // visible, in flight, delayed
}

func (f fakeSQS) GetQueueAttributes(_ context.Context, in *sqs.GetQueueAttributesInput, _ ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	d, ok := f.depth[aws.ToString(in.QueueUrl)]
	if !ok {
		return nil, errors.New("AWS.SimpleQueueService.NonExistentQueue")
	}
	return &sqs.GetQueueAttributesOutput{Attributes: map[string]string{
		"ApproximateNumberOfMessages": fmt.Sprint(d[0]), "ApproximateNumberOfMessagesNotVisible": fmt.Sprint(d[1]),
		"ApproximateNumberOfMessagesDelayed": fmt.Sprint(d[2]),
	}}, nil
}

// fakeCloudWatch answers the age metric of the queue named "jobs".
type fakeCloudWatch struct {
	//lint:ignore U1000 embedded so that the fake is a cloudWatchAPI: a method it does not answer panics (nil interface)
	cloudWatchAPI
	values []float64
	in     *cloudwatch.GetMetricDataInput
}

func (f *fakeCloudWatch) GetMetricData(_ context.Context, in *cloudwatch.GetMetricDataInput, _ ...func(*cloudwatch.Options)) (*cloudwatch.GetMetricDataOutput, error) {
	f.in = in
	return &cloudwatch.GetMetricDataOutput{MetricDataResults: []cwtypes.MetricDataResult{{Id: aws.String("oldest"), Values: f.values}}}, nil
}

func statusLedgerFixture(t *testing.T) *ledger.Memory {
	t.Helper()
	l := ledger.NewMemory(func() time.Time { return statusNow })
	ctx := context.Background()
	var rs []ledger.Runner
	for i := range 5 {
		rs = append(rs, ledger.Runner{Name: fmt.Sprintf("skiff-%d-1", 100+i), Pool: "cpu", JobID: int64(100 + i), ReservedAt: statusNow.Add(-time.Duration(10*(i+1)) * time.Second)})
	}
	if n, err := l.Reserve(ctx, "cpu", 10, rs); err != nil || n != 5 {
		t.Fatalf("Reserve = %d, %v", n, err)
	}
	for i, r := range rs[:3] {
		if err := l.Launched(ctx, r.Name, ledger.LaunchReport{InstanceID: fmt.Sprintf("i-0%d", i), At: statusNow}); err != nil {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(l.Advance(ctx, rs[1].Name, ledger.StateJobStarted, statusNow, rs[1].JobID))
	must(l.Advance(ctx, rs[2].Name, ledger.StateJobCompleted, statusNow, rs[2].JobID))
	if _, err := l.End(ctx, rs[2].Name, statusNow, "state_terminated"); err != nil {
		t.Fatal(err)
	}
	// Pool cpu's warm machines: a stopped one ready, a hot one booting.
	stopped, hot := names.WarmRunnerName("", "stopped", "k1", "a"), names.WarmRunnerName("", "hot", "k1", "b")
	if n, err := l.Reserve(ctx, "cpu", 10, []ledger.Runner{{Name: stopped, Pool: "cpu", ReservedAt: statusNow.Add(-time.Hour)},
		{Name: hot, Pool: "cpu", ReservedAt: statusNow.Add(-time.Minute)}}); err != nil || n != 2 {
		t.Fatalf("Reserve warm = %d, %v", n, err)
	}
	must(l.Launched(ctx, stopped, ledger.LaunchReport{InstanceID: "i-0w1", At: statusNow.Add(-time.Hour)}))
	must(l.Advance(ctx, stopped, ledger.StateRegistered, statusNow.Add(-50*time.Minute), 0))
	must(l.Launched(ctx, hot, ledger.LaunchReport{InstanceID: "i-0w2", At: statusNow.Add(-time.Minute)}))
	if n, err := l.Reserve(ctx, "gpu", 2, []ledger.Runner{{Name: "skiff-200-1", Pool: "gpu", JobID: 200, ReservedAt: statusNow.Add(-3 * time.Minute)}}); err != nil || n != 1 {
		t.Fatalf("Reserve gpu = %d, %v", n, err)
	}
	return l
}

// statusRoomFixture: two jobs of pool gpu wait for capacity, since 4 and
// 1 minutes.
func statusRoomFixture(t *testing.T) *room.Memory {
	t.Helper()
	r := room.NewMemory()
	for i, ago := range []time.Duration{4 * time.Minute, time.Minute} {
		at := statusNow.Add(-ago)
		if _, err := r.Enter(context.Background(), room.Waiting{Pool: "gpu", JobID: int64(300 + i), Repository: "acme/app",
			Message: "{}", Since: at, Reason: "launch_capacity", Detail: "g6.xlarge: no capacity in us-east-1a, us-east-1b",
			ExpiresAt: at.Add(room.Limit)}); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// statusSecurityFixture records two security events: a fork's job on a
// runner of pool oss three hours ago, and one older than status shows.
func statusSecurityFixture(t *testing.T, s store.SecurityEvents) {
	t.Helper()
	for _, e := range []store.SecurityEvent{
		{JobID: 41, RunID: 4, Attempt: 1, Repository: "acme/site", Runner: "skiff-40-1", Pool: "gpu", Reason: "fork_pull_request",
			Detail: "pool gpu: pull_request from a fork; the pool refuses forks", At: statusNow.Add(-3 * time.Hour)},
		{JobID: 12, RunID: 1, Attempt: 1, Repository: "other/app", Runner: "skiff-11-1", Pool: "gpu", Reason: "forbidden",
			At: statusNow.Add(-8 * 24 * time.Hour)},
	} {
		if _, err := s.RecordSecurityEvent(context.Background(), e); err != nil {
			t.Fatal(err)
		}
	}
}

func TestStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		age  []float64
		code int
	}{
		{"status", []string{"--table", "skiff-state", "--queue-url", "https://sqs.eu-west-1.amazonaws.com/123456789012/jobs",
			"--dlq-url", "https://sqs.eu-west-1.amazonaws.com/123456789012/dlq", "-f", "testdata/status-pools.yaml"}, []float64{250, 190}, exitOK},
		{"status-json", []string{"--json", "--table", "skiff-state", "--queue-url", "https://sqs.eu-west-1.amazonaws.com/123456789012/jobs",
			"-f", "testdata/status-pools.yaml"}, []float64{250}, exitOK},
		{"status-no-datapoint", []string{"--table", "skiff-state", "--queue-url", "https://sqs.eu-west-1.amazonaws.com/123456789012/jobs",
			"-f", "testdata/status-pools.yaml"}, nil, exitOK},
		{"status-no-table", []string{"-f", "testdata/status-pools.yaml"}, nil, exitUsage},
		{"status-security", []string{"--table", "skiff-state", "-f", "testdata/status-pools.yaml"}, nil, exitOK},
		{"status-missing-queue", []string{"--table", "skiff-state", "--queue-url", "https://sqs.eu-west-1.amazonaws.com/123456789012/gone",
			"-f", "testdata/status-pools.yaml"}, nil, exitFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cw := &fakeCloudWatch{values: tt.age}
			security := store.NewSecurityMemory(func() time.Time { return statusNow })
			if tt.name == "status-security" {
				statusSecurityFixture(t, security)
			}
			sources := func(context.Context, string) (statusSources, error) {
				return statusSources{ledger: statusLedgerFixture(t), room: statusRoomFixture(t), cloudWatch: cw, security: security,
					now: func() time.Time { return statusNow },
					sqs: fakeSQS{depth: map[string][3]int{
						"https://sqs.eu-west-1.amazonaws.com/123456789012/jobs": {12, 3, 0},
						"https://sqs.eu-west-1.amazonaws.com/123456789012/dlq":  {1, 0, 0},
					}}}, nil
			}
			var stdout, stderr bytes.Buffer
			if code := statusCommand(tt.args, &stdout, &stderr, sources); code != tt.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, tt.code, stderr.String())
			}
			if tt.code != exitOK {
				if stderr.Len() == 0 {
					t.Error("a failure without a message")
				}
				return
			}
			golden(t, tt.name, stdout.String())
			if cw.in != nil {
				q := cw.in.MetricDataQueries[0].MetricStat
				if aws.ToString(q.Metric.Dimensions[0].Value) != "jobs" || aws.ToString(q.Metric.MetricName) != "ApproximateAgeOfOldestMessage" {
					t.Errorf("metric query %+v", q)
				}
			}
		})
	}
}

// TestStatusLocal reads a local mode data directory: runners by pool and
// state from the ledger, the queue's depth and the newest dead letters.
func TestStatusLocal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	seedLocalStatus(t, dir)

	var stdout, stderr bytes.Buffer
	noAWS := func(context.Context, string) (statusSources, error) {
		return statusSources{}, errors.New("AWS asked in local mode")
	}
	if code := statusCommand([]string{"--data-dir", dir, "-f", "testdata/status-pools.yaml"}, &stdout, &stderr, noAWS); code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{"job queue: 1 waiting, 1 in flight", "dead letters: 1", "job 7  launch_quota: raise the vCPU quota",
		"pool cpu, last hour, 2 cold starts: queued → assigned p50 40.0s, p95 50.0s; skiff's own share (queued → launch requested) p50 0.5s, p95 0.8s"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if !regexp.MustCompile(`(?m)^\s+cpu\s+1\s+\d+\s+0\s+1\s`).MatchString(out) {
		t.Errorf("want pool cpu with one live runner, launched:\n%s", out)
	}

	// A directory without local mode's file is an error, and stays empty.
	empty := t.TempDir()
	stderr.Reset()
	if code := statusCommand([]string{"--data-dir", empty, "-f", "testdata/status-pools.yaml"}, &stdout, &stderr, noAWS); code != exitFailed {
		t.Errorf("exit %d for an empty directory, want %d", code, exitFailed)
	}
	if entries, _ := os.ReadDir(empty); len(entries) != 0 {
		t.Errorf("status created %v in an empty directory", entries)
	}
	if code := statusCommand([]string{"--data-dir", dir, "--table", "t", "-f", "testdata/status-pools.yaml"}, &stdout, &stderr, noAWS); code != exitUsage {
		t.Errorf("exit %d with both --table and --data-dir, want %d", code, exitUsage)
	}
}

// seedLocalStatus writes a local-mode file in dir: a runner launched in
// pool cpu, three jobs' metrics records (two in the last hour), a queue of
// one waiting job, one in flight and one dead letter.
func seedLocalStatus(t *testing.T, dir string) {
	t.Helper()
	ctx := context.Background()
	db, err := sqlitestore.Open(local.DBFile(dir), sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l := sqlitestore.NewLedger(db, time.Now)
	if n, err := l.Reserve(ctx, "cpu", 10, []ledger.Runner{{Name: "skiff-7-1", Pool: "cpu", JobID: 7, ReservedAt: time.Now()}}); err != nil || n != 1 {
		t.Fatalf("Reserve = %d, %v", n, err)
	}
	if err := l.Launched(ctx, "skiff-7-1", ledger.LaunchReport{InstanceID: "p-1", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	// The last hour's start time: jobs 1 and 2, assigned 30 and 20 minutes
	// ago; job 3, assigned two hours ago and ended 20 minutes ago, is out
	// of the window.
	recs := sqlitestore.NewMetricsRecords(db)
	for i, ago := range []time.Duration{30 * time.Minute, 20 * time.Minute, 2 * time.Hour} {
		started := time.Now().Add(-ago).UTC().Truncate(time.Second)
		done := started.Add(5 * time.Minute)
		if i == 2 {
			done = started.Add(100 * time.Minute)
		}
		p := &metrics.Phases{QueuedToAssigned: ptrTo(float64(40 + 10*i)), QueuedToRequested: ptrTo(0.5 + float64(i)/4)}
		if err := recs.Put(ctx, metrics.Record{Version: metrics.SchemaVersion, Repository: "acme/app", WorkflowName: "ci", Trigger: "push",
			CloudProvider: "local", InstanceType: "local", Runtime: metrics.Duration(5 * time.Minute), JobID: int64(i + 1), RunAttempt: 1,
			Pool: "cpu", StartedAt: &started, CompletedAt: &done, Start: &metrics.Start{Kind: metrics.StartCold, Phases: p}}); err != nil {
			t.Fatal(err)
		}
	}
	q := sqlitestore.NewQueue(db, sqlitestore.QueueOptions{})
	for _, id := range []int64{7, 8, 9} {
		if err := q.Send(ctx, queue.Job{JobID: id, RunID: 1, Attempt: 1, Repository: "acme/app", Owner: "acme", Labels: []string{"self-hosted"}, Pool: "cpu",
			DeliveryID: fmt.Sprint("d", id), ReceivedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	ds, err := q.Receive(ctx, 2)
	if err != nil || len(ds) != 2 {
		t.Fatalf("Receive = %d, %v", len(ds), err)
	}
	if err := q.Complete(ctx, ds[0], queue.Answer{Verdict: queue.DeadLetter, Reason: "launch_quota", Detail: "raise the vCPU quota"}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestStatusRunners: each pool's runner line from the stored release list
// and holds — the newest release, days behind with the days GitHub still
// serves it (an alarm in the last week), out of the window, or stopped with
// the fix; the same in JSON.
func TestStatusRunners(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	state := store.NewRunnerMemory()
	rel := func(v string, daysAgo int) runnerversion.Release {
		ver, _ := runnerversion.Parse(v)
		return runnerversion.Release{Version: ver, PublishedAt: statusNow.AddDate(0, 0, -daysAgo)}
	}
	if err := state.PutRunnerReleases(ctx, store.ReleaseList{FetchedAt: statusNow.Add(-time.Hour), Releases: []runnerversion.Release{
		rel("2.334.0", 25), rel("2.333.0", 40), rel("2.332.0", 70), rel("2.331.0", 100)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := state.HoldPool(ctx, store.RunnerHold{Pool: "held", Version: "2.332.0", Reason: "runner_outdated",
		Detail: "GitHub refuses runner 2.332.0 (deprecated: exit code 7). Fix: rebuild the image.", At: statusNow}); err != nil {
		t.Fatal(err)
	}
	// The reconciler saw these pools' runners run another version than
	// their pools file names (an image's own runner, an updated directory).
	for pool, v := range map[string]string{"image": "2.333.0", "updated": "2.334.0"} {
		if err := state.PutInstalled(ctx, store.InstalledRunner{Pool: pool, Version: v, SeenAt: statusNow}); err != nil {
			t.Fatal(err)
		}
	}
	sources := func(context.Context, string) (statusSources, error) {
		return statusSources{ledger: ledger.NewMemory(func() time.Time { return statusNow }), runners: state,
			now: func() time.Time { return statusNow }}, nil
	}
	for _, name := range []string{"status-runners", "status-runners-json"} {
		args := []string{"--table", "skiff-state", "-f", "testdata/status-runner-pools.yaml"}
		if strings.HasSuffix(name, "json") {
			args = append(args, "--json")
		}
		var stdout, stderr bytes.Buffer
		if code := statusCommand(args, &stdout, &stderr, sources); code != exitOK {
			t.Fatalf("exit %d: %s", code, stderr.String())
		}
		golden(t, name, stdout.String())
	}
}

func ptrTo[T any](v T) *T { return &v }
