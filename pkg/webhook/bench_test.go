package webhook

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/queue"
	"github.com/skiffci/skiff/pkg/telemetry"
)

// BenchmarkHandleQueued measures the handler's own cost for GitHub's
// published queued examples: signature verification, parsing, routing,
// dedupe claim, enqueue and lifecycle record, with in-memory ports (no
// network send), JSON logs to io.Discard and EMF counts to io.Discard. It
// reports events/s (per core: run with -cpu 1) and the p99 handler time.
func BenchmarkHandleQueued(b *testing.B) {
	examples := examplesOf(b, "workflow_job", "queued")
	secret := []byte("benchmark-secret")
	type delivery struct {
		body []byte
		sig  string
	}
	var ds []delivery
	for _, ex := range examples {
		ds = append(ds, delivery{ex.body, Sign(secret, ex.body)})
	}
	h, err := New(Options{
		Secrets: [][]byte{secret},
		Router:  testRouter,
		Queue:   &discardQueue{},
		Store:   memoryStore(fixedNow),
		Runners: ledger.NewMemory(nil),
		Counter: telemetry.NewEMF(io.Discard, "Skiff", "webhook", nil),
		Logger:  slog.New(slog.NewJSONHandler(io.Discard, nil)),
		// GitHub's examples are public repositories of several installations.
		Allow:         mustAllow(b, "*"),
		Installations: mustInstallations(b, "*"),
		Policies:      openPolicies,
	})
	if err != nil {
		b.Fatal(err)
	}
	ids := make([]string, b.N)
	for i := range ids {
		ids[i] = "d" + strconv.Itoa(i)
	}
	durations := make([]time.Duration, 0, b.N)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		d := ds[i%len(ds)]
		start := time.Now()
		resp := h.Handle(ctx, Request{Event: "workflow_job", Delivery: ids[i], Signature: d.sig, Body: d.body})
		durations = append(durations, time.Since(start))
		if resp.Status != 200 {
			b.Fatalf("status %d %s", resp.Status, resp.Body)
		}
	}
	b.StopTimer()
	slices.Sort(durations)
	b.ReportMetric(float64(durations[len(durations)*99/100].Nanoseconds()), "p99-ns")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkVerify measures signature verification alone on a queued example.
func BenchmarkVerify(b *testing.B) {
	body := examplesOf(b, "workflow_job", "queued")[1].body
	v, err := github.NewWebhookVerifier([][]byte{[]byte("s")})
	if err != nil {
		b.Fatal(err)
	}
	sig := Sign([]byte("s"), body)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if err := v.Verify(sig, body); err != nil {
			b.Fatal(err)
		}
	}
}

// discardQueue accepts every job without keeping it, so a long benchmark
// does not measure the growth of a slice.
type discardQueue struct{}

func (discardQueue) Send(context.Context, queue.Job) error { return nil }
