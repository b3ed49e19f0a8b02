package main

import (
	"context"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/provider/ec2/ec2fake"
	"github.com/skiffci/skiff/pkg/store/dynamostore"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestBootstrapSize(t *testing.T) {
	t.Parallel()
	testenv.CheckBootstrapSize(t)
}

func env(t testing.TB, dynamo, table, ec2, gh, pem, dir string) []string {
	return testenv.LambdaEnv(
		"AWS_ENDPOINT_URL_DYNAMODB="+dynamo, "AWS_ENDPOINT_URL_EC2="+ec2,
		"AWS_ENDPOINT_URL_SECRETS_MANAGER="+testenv.SecretsManager(t, pem), "AWS_ENDPOINT_URL_SQS=http://127.0.0.1:1",
		"SKIFF_TABLE_NAME="+table, "SKIFF_QUEUE_URL=http://127.0.0.1:1/jobs", "SKIFF_ACCOUNT_ID=123456789012", "SKIFF_DEPLOYMENT=skiff",
		"SKIFF_GITHUB_APP_IDS="+strconv.Itoa(testenv.AppID), "SKIFF_GITHUB_PRIVATE_KEY_ARN="+testenv.SecretARN,
		"SKIFF_GITHUB_API_URL="+gh, "SKIFF_POOLS_FILE="+filepath.Join(dir, "pools.yaml"), "SKIFF_REDELIVER=false",
	)
}

// TestBootstrapUnderRIE runs the built bootstrap under the Lambda runtime
// interface emulator, with the state table on moto (the ledger's
// transactions), the EC2 fake over HTTP and the GitHub simulator, and sends
// it a scheduled event: the pass ends the ledger record of a runner whose
// instance is gone, and leaves the pool's count at zero.
func TestBootstrapUnderRIE(t *testing.T) {
	moto := testenv.Moto(t)
	ddb := testenv.DynamoClient(t, moto)
	ctx := context.Background()
	table := testenv.NewTable(t, ddb, "skiff-sd")
	led := dynamostore.NewLedgerDynamo(ddb, table)
	old := time.Now().Add(-time.Hour)
	r := ledger.Runner{Name: "skiff-9-1", Pool: "cpu", JobID: 9, RunID: 1, Attempt: 1, ReservedAt: old}
	if n, err := led.Reserve(ctx, "cpu", 5, []ledger.Runner{r}); err != nil || n != 1 {
		t.Fatalf("Reserve = %d, %v", n, err)
	}
	if err := led.Launched(ctx, r.Name, ledger.LaunchReport{InstanceID: "i-0000000000000dead", InstanceType: "c7i.large", At: old}); err != nil {
		t.Fatal(err)
	}
	if err := led.Advance(ctx, r.Name, ledger.StateJobCompleted, old, r.JobID); err != nil {
		t.Fatal(err)
	}
	sim, pemKey := testenv.GitHubApp(t, "CANARYSD")
	fake := ec2fake.New()
	bootstrap := testenv.BuildLambda(t, runtime.GOARCH)
	dir := t.TempDir() // the bootstrap's own is shared by the package's tests
	testenv.WritePoolsFile(t, dir, testenv.CPUPools)
	fn := testenv.StartRIE(t, bootstrap, env(t, moto, table, fake.Serve(t), sim.URL(), pemKey, dir))
	raw := fn.Invoke(t, map[string]any{"id": "sched-1", "detail-type": "Scheduled Event", "source": "aws.events",
		"time": time.Now().UTC().Format(time.RFC3339), "detail": map[string]any{}})
	if strings.Contains(string(raw), "errorType") {
		t.Fatalf("the pass failed: %s\n%s", raw, fn.Out.String())
	}
	got, err := led.Runner(ctx, r.Name)
	if err != nil || got.State != ledger.StateTerminated {
		t.Errorf("runner %+v, %v; want ended (its instance is gone)\n%s", got, err, fn.Out.String())
	}
	if n, _ := led.Live(ctx, "cpu"); n != 0 {
		t.Errorf("live %d, want 0", n)
	}
	out := fn.Out.String()
	if !strings.Contains(out, `"msg":"scale-down pass"`) || strings.Contains(out, "CANARYSD") || strings.Contains(out, "BEGIN RSA") {
		t.Errorf("output lacks the pass's report, or holds a credential:\n%s", out)
	}
	t.Logf("cold init under the runtime emulator: %v (BenchmarkColdInit measures it)", fn.InitDuration(t))
}

// BenchmarkColdInit is the function's cold init under the runtime emulator:
// the App key from a Secrets Manager stub, the pools file, the clients.
// The first event is a pass over an empty account.
func BenchmarkColdInit(b *testing.B) {
	moto := testenv.Moto(b)
	table := testenv.NewTable(b, testenv.DynamoClient(b, moto), "skiff-sd")
	sim := ghsim.New(ghsim.Options{})
	defer sim.Close()
	sim.AddApp(ghsim.AppConfig{ID: testenv.AppID, Slug: "skiff", PublicKey: &testenv.Key().PublicKey})
	bootstrap := testenv.BuildLambda(b, runtime.GOARCH)
	dir := b.TempDir() // the bootstrap's own is shared by the package's tests
	testenv.WritePoolsFile(b, dir, testenv.CPUPools)
	testenv.BenchColdInit(b, bootstrap, env(b, moto, table, ec2fake.New().Serve(b), sim.URL(), testenv.KeyPEM(), dir), map[string]any{"source": "aws.events"})
}
