package wiring_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"testing"
	"time"

	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/internal/wiring"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/webhook"
)

// BenchmarkWebhookProduction is the webhook as the Lambda wires it
// (wiring.NewWebhook: the SDK's SQS and DynamoDB clients, EMF metrics and
// JSON logs), with only the HTTP round trips answered in process
// (testenv.AWSTransport, checksums included). For each event kind it
// reports, at 0 ms simulated per AWS call, the CPU per event (process user
// + system time, GC included: run with -cpu 1), the p99 handler time and
// the AWS calls per event by operation; at 5 ms simulated per call, the
// wall time per event (ns/op), which counts the calls made one after the
// other. Every delivery is a new one; every write succeeds (a fresh job, a
// runner one state behind), the common path in production. The installation
// (pinned by SKIFF_ALLOWED_INSTALLATIONS=*) is read once and then answered
// from the container's copy for its TTL; queued_new_installation names a
// new installation in every delivery, so each pays that read. GC runs at the
// function's GOGC and GOMEMLIMIT (names.WebhookGOGC, WebhookGOMEMLIMIT), as
// deployed.
//
//	go test -run '^$' -bench WebhookProduction -cpu 1 -count 5 ./internal/wiring
func BenchmarkWebhookProduction(b *testing.B) {
	root := testenv.Root(b)
	read := func(name string) []byte {
		body, err := os.ReadFile(filepath.Join(root, "testdata", "webhooks", name))
		if err != nil {
			b.Fatal(err)
		}
		return ours(body)
	}
	events := []struct {
		name, event string
		body        []byte
		// newInstallation: each delivery names an installation this
		// container has not read yet, so none is answered from its copy.
		newInstallation bool
	}{
		{"queued", "workflow_job", read("workflow_job.queued.1.json"), false},
		{"queued_new_installation", "workflow_job", read("workflow_job.queued.1.json"), true},
		{"in_progress", "workflow_job", read("workflow_job.in_progress.2.json"), false},
		{"completed", "workflow_job", read("workflow_job.completed.1.json"), false},
		{"workflow_run", "workflow_run", read("workflow_run.requested.1.json"), false},
	}
	for _, ev := range events {
		for _, latency := range []time.Duration{0, 5 * time.Millisecond} {
			b.Run(ev.name+"/"+strconv.Itoa(int(latency.Milliseconds()))+"ms", func(b *testing.B) {
				tr := &testenv.AWSTransport{Latency: latency}
				h := productionWebhook(b, tr)
				// As deployed: the stack sets the function's GOGC and GOMEMLIMIT.
				defer debug.SetGCPercent(debug.SetGCPercent(names.WebhookGOGC))
				defer debug.SetMemoryLimit(debug.SetMemoryLimit(names.WebhookGOMEMLIMIT))
				ids := make([]string, b.N)
				bodies, sigs := make([][]byte, b.N), make([]string, b.N)
				sig := webhook.Sign([]byte(benchSecret), ev.body)
				for i := range ids {
					ids[i] = "bench-" + strconv.Itoa(i)
					bodies[i], sigs[i] = ev.body, sig
					if ev.newInstallation {
						bodies[i] = bytes.Replace(ev.body, []byte(`"id": `+benchInstallation), []byte(`"id": `+strconv.Itoa(1+i)), 1)
						sigs[i] = webhook.Sign([]byte(benchSecret), bodies[i])
					}
				}
				ctx := context.Background()
				durations := make([]time.Duration, 0, b.N)
				tr.Take() // the calls of building the handler
				cpu0 := testenv.CPUTime()
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					start := time.Now()
					resp := h.Handle(ctx, webhook.Request{Event: ev.event, Delivery: ids[i], Signature: sigs[i], Body: bodies[i]})
					durations = append(durations, time.Since(start))
					if resp.Status != http.StatusOK {
						b.Fatalf("status %d %s", resp.Status, resp.Body)
					}
				}
				b.StopTimer()
				if latency == 0 {
					b.ReportMetric(float64((testenv.CPUTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/event")
					slices.Sort(durations)
					b.ReportMetric(float64(durations[len(durations)*99/100].Microseconds()), "p99-µs")
				}
				calls := tr.Take()
				ops := make([]string, 0, len(calls))
				total := 0
				for op, n := range calls {
					ops = append(ops, op)
					total += n
				}
				sort.Strings(ops)
				for _, op := range ops {
					b.ReportMetric(float64(calls[op])/float64(b.N), op+"/event")
				}
				b.ReportMetric(float64(total)/float64(b.N), "calls/event")
			})
		}
	}
}

const benchSecret = "benchmark-secret"

// benchInstallation is the installation id of GitHub's published examples.
const benchInstallation = "3456996"

// ours turns one of GitHub's published examples into a job skiff serves:
// the minimal pools file's labels, in a private repository.
func ours(body []byte) []byte {
	body = regexp.MustCompile(`"labels": \[[^\]]*\]`).ReplaceAll(body, []byte(`"labels": ["self-hosted", "linux", "x64"]`))
	body = regexp.MustCompile(`"visibility": "public"`).ReplaceAll(body, []byte(`"visibility": "private"`))
	return regexp.MustCompile(`"private": false`).ReplaceAll(body, []byte(`"private": true`))
}

// productionWebhook builds the handler with wiring.NewWebhook over an AWS
// configuration loaded as the function loads it, whose HTTP client is tr.
// The EMF metrics wiring writes to stdout go to /dev/null meanwhile.
func productionWebhook(b *testing.B, tr http.RoundTripper) *webhook.Handler {
	b.Helper()
	pools := filepath.Join(testenv.Root(b), "examples", "minimal.yaml")
	cfg, err := webhook.ConfigFromEnv(func(k string) string {
		return map[string]string{
			"SKIFF_WEBHOOK_SECRET": benchSecret, "SKIFF_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/skiff-jobs", "SKIFF_DEPLOYMENT": "skiff-ci",
			"SKIFF_TABLE_NAME": "skiff", "SKIFF_POOLS_FILE": pools, "SKIFF_ALLOW": "*", "SKIFF_ALLOWED_INSTALLATIONS": "*",
		}[k]
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	// The machine's CA bundle, if any, needs a transport of the SDK's own;
	// nothing here speaks TLS.
	b.Setenv("AWS_CA_BUNDLE", "")
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx,
		awsconfig.WithRegion("us-east-1"),
		awsconfig.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "example", "")),
		awsconfig.WithHTTPClient(&http.Client{Transport: tr}),
	)
	if err != nil {
		b.Fatal(err)
	}
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		b.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = devnull
	h, err := wiring.NewWebhook(ctx, cfg, awsCfg, slog.New(slog.NewJSONHandler(io.Discard, nil)))
	os.Stdout = stdout
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = devnull.Close() })
	return h
}
