package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	cwtypes "github.com/aws/aws-sdk-go-v2/service/cloudwatch/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/skiffci/skiff/pkg/launch"
	"github.com/skiffci/skiff/pkg/store"
)

var statusNow = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

// fakeSQS answers GetQueueAttributes from a table of queue URLs.
type fakeSQS struct {
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
	cloudWatchAPI
	values []float64
	in     *cloudwatch.GetMetricDataInput
}

func (f *fakeCloudWatch) GetMetricData(_ context.Context, in *cloudwatch.GetMetricDataInput, _ ...func(*cloudwatch.Options)) (*cloudwatch.GetMetricDataOutput, error) {
	f.in = in
	return &cloudwatch.GetMetricDataOutput{MetricDataResults: []cwtypes.MetricDataResult{{Id: aws.String("oldest"), Values: f.values}}}, nil
}

func statusLedgerFixture(t *testing.T) *store.LedgerMemory {
	t.Helper()
	l := store.NewLedgerMemory(func() time.Time { return statusNow })
	ctx := context.Background()
	var rs []launch.Runner
	for i := range 5 {
		rs = append(rs, launch.Runner{Name: fmt.Sprintf("skiff-%d-1", 100+i), Pool: "cpu", JobID: int64(100 + i), ReservedAt: statusNow.Add(-time.Duration(10*(i+1)) * time.Second)})
	}
	if n, err := l.Reserve(ctx, "cpu", 10, rs); err != nil || n != 5 {
		t.Fatalf("Reserve = %d, %v", n, err)
	}
	for i, r := range rs[:3] {
		if err := l.Launched(ctx, r.Name, launch.Launch{InstanceID: fmt.Sprintf("i-0%d", i), At: statusNow}); err != nil {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(l.Advance(ctx, rs[1].Name, launch.StateJobStarted, statusNow, rs[1].JobID))
	must(l.Advance(ctx, rs[2].Name, launch.StateJobCompleted, statusNow, rs[2].JobID))
	if _, err := l.End(ctx, rs[2].Name, statusNow, "state_terminated"); err != nil {
		t.Fatal(err)
	}
	if n, err := l.Reserve(ctx, "gpu", 2, []launch.Runner{{Name: "skiff-200-1", Pool: "gpu", JobID: 200, ReservedAt: statusNow.Add(-3 * time.Minute)}}); err != nil || n != 1 {
		t.Fatalf("Reserve gpu = %d, %v", n, err)
	}
	return l
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
		{"status-missing-queue", []string{"--table", "skiff-state", "--queue-url", "https://sqs.eu-west-1.amazonaws.com/123456789012/gone",
			"-f", "testdata/status-pools.yaml"}, nil, exitFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cw := &fakeCloudWatch{values: tt.age}
			sources := func(context.Context, string) (statusSources, error) {
				return statusSources{ledger: statusLedgerFixture(t), cloudWatch: cw, now: func() time.Time { return statusNow },
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
