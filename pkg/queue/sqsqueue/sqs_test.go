package sqsqueue_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/skiffci/skiff/pkg/queue"
	"github.com/skiffci/skiff/pkg/queue/queuetest"
	"github.com/skiffci/skiff/pkg/queue/sqsqueue"
)

const queueURL = "https://sqs.us-east-1.amazonaws.com/123456789012/skiff-jobs"

// fakeSQS records SendMessage inputs and answers with err when set.
type fakeSQS struct {
	sqsqueue.SQSAPI
	mu     sync.Mutex
	inputs []*sqs.SendMessageInput
	err    error
}

func (f *fakeSQS) SendMessage(ctx context.Context, in *sqs.SendMessageInput, _ ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	if err := ctx.Err(); err != nil {
		return nil, err // as the SDK does before sending
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	f.inputs = append(f.inputs, in)
	return &sqs.SendMessageOutput{MessageId: aws.String("b1c2d3e4-0000-4000-8000-000000000001")}, nil
}

func (f *fakeSQS) sent() []*sqs.SendMessageInput {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*sqs.SendMessageInput(nil), f.inputs...)
}

// Reset forgets the inputs and the injected error.
func (f *fakeSQS) Reset() {
	f.mu.Lock()
	f.inputs, f.err = nil, nil
	f.mu.Unlock()
}

func jobN(id int64) queue.Job {
	j := queuetest.ValidJob()
	j.JobID = id
	return j
}

func TestSQSSendsOneMessagePerJob(t *testing.T) {
	t.Parallel()
	f := &fakeSQS{}
	q := sqsqueue.NewSQS(f, queueURL)
	if err := q.Send(t.Context(), queuetest.ValidJob()); err != nil {
		t.Fatal(err)
	}
	in := f.sent()
	if len(in) != 1 {
		t.Fatalf("%d messages sent, want 1", len(in))
	}
	const wantBody = `{"job_id":29679449,"run_id":10867447,"attempt":1,"repository":"octo-org/hello","owner":"octo-org",` +
		`"installation_id":4242,"labels":["self-hosted","linux","gpu-a10"],"pool":"gpu-a10",` +
		`"delivery_id":"7a1c6e40-9a51-11ef-8b5e-2f4b1f7c0a01","received_at":"2026-06-01T12:00:00.123Z"}`
	if got := aws.ToString(in[0].MessageBody); got != wantBody {
		t.Errorf("body:\n got %s\nwant %s", got, wantBody)
	}
	if got := aws.ToString(in[0].QueueUrl); got != queueURL {
		t.Errorf("queue URL %q, want %q", got, queueURL)
	}
	wantAttrs := map[string]types.MessageAttributeValue{
		"pool":   {DataType: aws.String("String"), StringValue: aws.String("gpu-a10")},
		"job_id": {DataType: aws.String("Number"), StringValue: aws.String("29679449")},
	}
	if !reflect.DeepEqual(in[0].MessageAttributes, wantAttrs) {
		t.Errorf("attributes %+v, want %+v", in[0].MessageAttributes, wantAttrs)
	}
	if in[0].MessageGroupId != nil || in[0].MessageDeduplicationId != nil || in[0].DelaySeconds != 0 {
		t.Errorf("FIFO or delay fields set on a standard queue message: %+v", in[0])
	}
	got, err := queue.DecodeMessage(aws.ToString(in[0].MessageBody))
	if err != nil || !reflect.DeepEqual(got, queuetest.ValidJob()) {
		t.Errorf("DecodeMessage = %+v, %v; want %+v", got, err, queuetest.ValidJob())
	}
}

func TestSQSRefusesInvalidJobsWithoutSending(t *testing.T) {
	t.Parallel()
	manyLabels := make([]string, 8000)
	for i := range manyLabels {
		manyLabels[i] = "label-that-is-long"
	}
	cases := []struct {
		name   string
		mutate func(*queue.Job)
	}{
		{"no job id", func(j *queue.Job) { j.JobID = 0 }},
		{"no run id", func(j *queue.Job) { j.RunID = -1 }},
		{"no repository", func(j *queue.Job) { j.Repository = "" }},
		{"no pool", func(j *queue.Job) { j.Pool = "" }},
		{"no labels", func(j *queue.Job) { j.Labels = nil }},
		{"body past MaxMessageBytes", func(j *queue.Job) { j.Labels = manyLabels }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := &fakeSQS{}
			j := queuetest.ValidJob()
			tc.mutate(&j)
			if err := sqsqueue.NewSQS(f, queueURL).Send(t.Context(), j); !errors.Is(err, queue.ErrInvalidJob) {
				t.Errorf("Send = %v, want ErrInvalidJob", err)
			}
			if n := len(f.sent()); n != 0 {
				t.Errorf("%d messages sent, want none", n)
			}
		})
	}
}

func TestSQSFailures(t *testing.T) {
	t.Parallel()
	throttled := &types.RequestThrottled{Message: aws.String("Request is throttled.")}
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	cases := []struct {
		name    string
		ctx     context.Context
		apiErr  error
		wantErr func(error) bool
	}{
		{"throttled", context.Background(), throttled, func(err error) bool {
			var rt *types.RequestThrottled
			return errors.As(err, &rt)
		}},
		{"queue gone", context.Background(), &types.QueueDoesNotExist{Message: aws.String("The specified queue does not exist.")},
			func(err error) bool { var q *types.QueueDoesNotExist; return errors.As(err, &q) }},
		{"canceled context", canceled, nil, func(err error) bool { return errors.Is(err, context.Canceled) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := &fakeSQS{err: tc.apiErr}
			err := sqsqueue.NewSQS(f, queueURL).Send(tc.ctx, queuetest.ValidJob())
			if err == nil || !tc.wantErr(err) || errors.Is(err, queue.ErrInvalidJob) {
				t.Errorf("Send = %v: want the cause kept, retryable (not ErrInvalidJob)", err)
			}
			if !strings.Contains(err.Error(), "sending job 29679449") && tc.apiErr != nil {
				t.Errorf("error %q does not say what failed", err)
			}
			f.Reset()
			if err := sqsqueue.NewSQS(f, queueURL).Send(context.Background(), queuetest.ValidJob()); err != nil {
				t.Errorf("Send after Reset: %v", err)
			}
		})
	}
}

// sqsBodyOK reports whether s has only the characters SQS accepts in a message.
func sqsBodyOK(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		ok := r == '\t' || r == '\n' || r == '\r' || (r >= 0x20 && r <= 0xD7FF) ||
			(r >= 0xE000 && r <= 0xFFFD) || (r >= 0x10000 && r <= 0x10FFFF)
		if !ok {
			return false
		}
	}
	return true
}

func TestSQSCharactersSQSRefuses(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, label, pool, wantPoolAttr string
	}{
		{"noncharacters", "gpu\uFFFF\uFFFE", "p\uFFFF", "p\uFFFD"},
		{"control characters", "a\x00b\x1f", "p\x01\t", "p\uFFFD\t"},
		{"invalid UTF-8", "a\xffb", "p\xfe", "p\uFFFD"},
		{"astral plane", "🚀-runner", "pool-🚀", "pool-🚀"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := &fakeSQS{}
			j := queuetest.ValidJob()
			j.Labels, j.Pool = []string{tc.label}, tc.pool
			if err := sqsqueue.NewSQS(f, queueURL).Send(t.Context(), j); err != nil {
				t.Fatal(err)
			}
			in := f.sent()[0]
			body := aws.ToString(in.MessageBody)
			if !sqsBodyOK(body) {
				t.Errorf("body %q has characters SQS refuses", body)
			}
			if got := aws.ToString(in.MessageAttributes["pool"].StringValue); got != tc.wantPoolAttr {
				t.Errorf("pool attribute %q, want %q", got, tc.wantPoolAttr)
			}
			got, err := queue.DecodeMessage(body)
			if err != nil {
				t.Fatal(err)
			}
			// What JSON can carry comes back exactly; invalid UTF-8 becomes U+FFFD.
			if want := string([]rune(tc.label)); got.Labels[0] != want {
				t.Errorf("label round trip %q, want %q", got.Labels[0], want)
			}
		})
	}
}

func TestDecodeMessage(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		body    string
		wantErr bool
	}{
		{"valid", `{"job_id":1,"run_id":2,"repository":"o/r","labels":["x"],"pool":"p"}`, false},
		{"unknown fields are ignored", `{"job_id":1,"run_id":2,"repository":"o/r","labels":["x"],"pool":"p","new_field":{"a":1}}`, false},
		{"not JSON", `job 1`, true},
		{"wrong type", `{"job_id":"1","run_id":2,"repository":"o/r","labels":["x"],"pool":"p"}`, true},
		{"missing pool", `{"job_id":1,"run_id":2,"repository":"o/r","labels":["x"]}`, true},
		{"empty", ``, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := queue.DecodeMessage(tc.body)
			if tc.wantErr != (err != nil) || (err != nil && !errors.Is(err, queue.ErrInvalidJob)) {
				t.Errorf("DecodeMessage(%q) = %v, want error: %v (ErrInvalidJob)", tc.body, err, tc.wantErr)
			}
		})
	}
}

func FuzzEncodeDecode(f *testing.F) {
	f.Add("gpu-a10", "octo-org/hello", "self-hosted")
	f.Add("p\uFFFF", "o/\x00r", "a\xffb")
	f.Fuzz(func(t *testing.T, pool, repo, label string) {
		j := queuetest.ValidJob()
		j.Pool, j.Repository, j.Labels = pool, repo, []string{label}
		body, err := queue.EncodeMessage(j)
		if err != nil {
			if !errors.Is(err, queue.ErrInvalidJob) {
				t.Fatalf("EncodeMessage: %v, want nil or ErrInvalidJob", err)
			}
			return
		}
		if !sqsBodyOK(body) {
			t.Fatalf("body %q has characters SQS refuses", body)
		}
		got, err := queue.DecodeMessage(body)
		if err != nil {
			t.Fatalf("DecodeMessage(EncodeMessage(job)): %v", err)
		}
		want := j
		want.Pool, want.Repository = string([]rune(pool)), string([]rune(repo)) // invalid UTF-8 becomes U+FFFD
		want.Labels = []string{string([]rune(label))}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, want)
		}
	})
}
