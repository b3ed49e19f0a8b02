package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/store/dynamostore"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestBootstrapSize(t *testing.T) {
	t.Parallel()
	testenv.CheckBootstrapSize(t)
}

// sample reads one of AWS's documented sample events from testdata and
// replaces its instance id and, for state changes, its state and time.
func sample(t testing.TB, file, instanceID, state string, at time.Time) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	var ev map[string]any
	if err := json.Unmarshal(raw, &ev); err != nil {
		t.Fatal(err)
	}
	detail := ev["detail"].(map[string]any)
	detail["instance-id"] = instanceID
	if state != "" {
		detail["state"] = state
	}
	ev["time"] = at.UTC().Format(time.RFC3339)
	ev["resources"] = []string{"arn:aws:ec2:us-east-1:123456789012:instance/" + instanceID}
	return ev
}

func env(dynamo, table string) []string {
	return testenv.LambdaEnv(
		"AWS_ENDPOINT_URL_DYNAMODB="+dynamo, "SKIFF_TABLE_NAME="+table,
		"SKIFF_LOG_LEVEL=debug",
	)
}

// BenchmarkColdInit is the function's cold init under the runtime emulator:
// configuration, the SDK's default config and the DynamoDB client. The
// first event is a state change to pending, answered without an AWS call.
func BenchmarkColdInit(b *testing.B) {
	bootstrap := testenv.BuildLambda(b, runtime.GOARCH)
	testenv.BenchColdInit(b, bootstrap, env("http://127.0.0.1:1", "skiff-ec2events"),
		sample(b, "ec2-state-change.json", "i-0bench", "pending", time.Now()))
}

// TestBootstrapUnderRIE runs the built bootstrap under the Lambda runtime
// interface emulator against moto's DynamoDB, with AWS's sample events:
// a skiff runner's instance stopping (ends it), its repeated and late
// events (change nothing), a late spot warning (recorded on the ended
// runner), a spot-interrupted runner's end (left to the reconciler), an
// instance that is not skiff's, an event of another type, and a malformed
// detail.
func TestBootstrapUnderRIE(t *testing.T) {
	t.Parallel()
	moto := testenv.Moto(t)
	ddb := testenv.DynamoClient(t, moto)
	ctx := t.Context()
	t0 := time.Now().UTC().Truncate(time.Second) // the function reads the real clock to hide expired records
	table := testenv.NewTable(t, ddb, "skiff-ec2events")
	led, r, r2 := seedRunning(t, ddb, table, t0)

	fn := testenv.StartRIE(t, testenv.BuildLambda(t, runtime.GOARCH), env(moto, table))
	invoke := func(ev any) string {
		t.Helper()
		return string(fn.Invoke(t, ev))
	}
	ok := func(what, resp string) {
		t.Helper()
		if strings.Contains(resp, "errorType") {
			t.Fatalf("%s: function error %s\noutput:\n%s", what, resp, fn.Out.String())
		}
	}

	ok("running", invoke(sample(t, "ec2-state-change.json", "i-0abc42", "running", t0.Add(10*time.Second))))
	if live, _ := led.Live(ctx, "gpu"); live != 2 {
		t.Fatalf("live %d after running, want 2", live)
	}
	ok("stopping", invoke(sample(t, "ec2-state-change.json", "i-0abc42", "stopping", t0.Add(3*time.Minute))))
	ok("terminated, late", invoke(sample(t, "ec2-state-change.json", "i-0abc42", "terminated", t0.Add(4*time.Minute))))
	ok("stopping, repeated", invoke(sample(t, "ec2-state-change.json", "i-0abc42", "stopping", t0.Add(3*time.Minute))))
	ok("spot warning, after the end", invoke(sample(t, "ec2-spot-interruption.json", "i-0abc42", "", t0.Add(5*time.Minute))))
	got, err := led.Runner(ctx, r.Name)
	if err != nil || got.State != ledger.StateTerminated || got.Reason != "state_stopping" || !got.EndedAt.Equal(t0.Add(3*time.Minute)) ||
		!got.InterruptedAt.Equal(t0.Add(5*time.Minute)) {
		t.Errorf("runner %+v, %v; want ended by the first stopping event and interrupted at the warning", got, err)
	}
	// A spot-interrupted runner's job failed: its record is the reconciler's
	// to end, once it has decided the re-run.
	ok("spot warning", invoke(sample(t, "ec2-spot-interruption.json", "i-0abc43", "", t0.Add(time.Minute))))
	ok("terminated, interrupted", invoke(sample(t, "ec2-state-change.json", "i-0abc43", "terminated", t0.Add(3*time.Minute))))
	if got, err := led.Runner(ctx, r2.Name); err != nil || !got.State.Live() || !got.InterruptedAt.Equal(t0.Add(time.Minute)) {
		t.Errorf("interrupted runner %+v, %v; want it live, interrupted at the warning", got, err)
	}
	if live, _ := led.Live(ctx, "gpu"); live != 1 {
		t.Errorf("live %d, want 1 (the interrupted runner)", live)
	}

	ok("not skiff's", invoke(sample(t, "ec2-state-change.json", "i-0someoneelse", "terminated", t0)))
	ok("not skiff's spot", invoke(sample(t, "ec2-spot-interruption.json", "i-0someoneelse", "", t0)))
	other := sample(t, "ec2-state-change.json", "i-0abc42", "terminated", t0)
	other["detail-type"] = "EBS Volume Notification"
	ok("another type", invoke(other))
	bad := sample(t, "ec2-state-change.json", "i-0abc42", "terminated", t0)
	bad["detail"] = "not an object"
	if resp := invoke(bad); !strings.Contains(resp, "errorType") {
		t.Errorf("a malformed detail answered %s, want a function error (Lambda retries, then the event's DLQ)", resp)
	}
	out := fn.Out.String()
	for _, want := range []string{`"msg":"ec2events ready"`, `"msg":"runner ended"`, `"msg":"not a skiff runner's instance"`, `"reason":"state_stopping"`,
		`"msg":"leaving the runner to the reconciler"`} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %s:\n%s", want, out)
		}
	}
	if n := bytes.Count([]byte(out), []byte(`"msg":"runner ended"`)); n != 1 {
		t.Errorf("%d runner-ended logs, want 1", n)
	}
}

// seedRunning writes two runners of pool gpu, launched at t0 on
// i-0abc42 and i-0abc43, each running its own job (a runner that did not
// is left to the reconciler), to the ledger in table.
func seedRunning(t *testing.T, ddb *dynamodb.Client, table string, t0 time.Time) (led *dynamostore.LedgerDynamo, r, r2 ledger.Runner) {
	t.Helper()
	ctx := t.Context()
	led = dynamostore.NewLedgerDynamo(ddb, table)
	r = ledger.Runner{Name: "skiff-42-1", Pool: "gpu", JobID: 42, RunID: 4, Attempt: 1, ReservedAt: t0}
	r2 = ledger.Runner{Name: "skiff-43-1", Pool: "gpu", JobID: 43, RunID: 4, Attempt: 1, ReservedAt: t0}
	if n, err := led.Reserve(ctx, "gpu", 5, []ledger.Runner{r, r2}); err != nil || n != 2 {
		t.Fatalf("Reserve = %d, %v", n, err)
	}
	for i, rr := range []ledger.Runner{r, r2} {
		id := []string{"i-0abc42", "i-0abc43"}[i]
		if err := led.Launched(ctx, rr.Name, ledger.LaunchReport{InstanceID: id, InstanceType: "g6.xlarge", Spot: true, At: t0}); err != nil {
			t.Fatal(err)
		}
		if err := led.Advance(ctx, rr.Name, ledger.StateJobStarted, t0, rr.JobID); err != nil {
			t.Fatal(err)
		}
	}
	return led, r, r2
}
