package webhook

import (
	"context"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/store"
)

// instID is the installation of GitHub's installation.created examples.
const instID = 957387

var instRe = regexp.MustCompile(`("installation":\s*\{\s*"id":\s*)\d+`)

// withInstallation rewrites a published payload's installation id (the
// examples name different installations).
func withInstallation(body []byte, id int64) []byte {
	return instRe.ReplaceAll(body, []byte("${1}"+strconv.FormatInt(id, 10)))
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestRecordedInstallations: with no pin, a delivery is served once its
// installation was recorded from GitHub's installation webhook (the
// published examples), refused while suspended, served again when
// unsuspended, and refused for good once deleted, even when a created
// event is replayed after.
func TestRecordedInstallations(t *testing.T) {
	t.Parallel()
	recorded := store.NewInstallationsMemory()
	clk := &clock{t: fixedNow}
	hs := newHarness(t, func(o *Options) {
		o.Installations = mustInstallations(t)
		o.Recorded = recorded
		o.Now = clk.now
	})
	queued := withInstallation(examplesOf(t, "workflow_job", "queued")[0].body, instID)
	event := func(action string) []byte {
		return withInstallation(examplesOf(t, "installation", action)[0].body, instID)
	}
	steps := []struct {
		name   string
		event  string
		body   []byte
		status int
	}{
		{"not recorded yet", "workflow_job", queued, 403},
		{"created", "installation", event("created"), 200},
		{"served", "workflow_job", queued, 200},
		{"suspended", "installation", event("suspend"), 200},
		{"refused while suspended", "workflow_job", queued, 403},
		{"unsuspended", "installation", event("unsuspend"), 200},
		{"served again", "workflow_job", withInstallation(examplesOf(t, "workflow_job", "queued")[0].body, instID), 200},
		{"new permissions accepted", "installation", event("new_permissions_accepted"), 200},
		{"deleted", "installation", event("deleted"), 200},
		{"refused once deleted", "workflow_job", queued, 403},
		{"a replayed created", "installation", event("created"), 200},
		{"still refused", "workflow_job", queued, 403},
	}
	for i, s := range steps {
		clk.add(time.Second)
		if got := hs.deliver(s.event, "d-"+strconv.Itoa(i), s.body); got.Status != s.status {
			t.Fatalf("%s: %d %s, want %d\n%s", s.name, got.Status, got.Body, s.status, hs.logs.String())
		}
	}
	rec, err := recorded.Installation(context.Background(), instID)
	if err != nil || rec.Status != store.InstallationDeleted || rec.Account != "octocat" || rec.AccountType != "User" || rec.AppID == 0 {
		t.Errorf("record %+v, %v", rec, err)
	}
	if n := len(hs.queue.Jobs()); n != 2 {
		t.Errorf("%d jobs enqueued, want 2 (while active)", n)
	}
	for _, want := range []string{"is not recorded", "is suspended", "is deleted"} {
		if !strings.Contains(hs.logs.String(), want) {
			t.Errorf("no refusal log says %q", want)
		}
	}
}

// TestInstallationPin: the pin narrows, it never overrides a deletion or a
// suspension; "*" serves installations not recorded (Apps installed before
// the installation webhook was read).
func TestInstallationPin(t *testing.T) {
	t.Parallel()
	queued := func(id int64) []byte { return withInstallation(examplesOf(t, "workflow_job", "queued")[0].body, id) }
	rec := func(id int64, st store.InstallationStatus) store.Installation {
		return store.Installation{ID: id, AppID: 1, Account: "acme", AccountType: "Organization", Status: st, UpdatedAt: fixedNow}
	}
	tests := []struct {
		name    string
		pin     []string
		records []store.Installation
		id      int64
		want    int
	}{
		{"pinned, not recorded", []string{"5"}, nil, 5, 200},
		{"pinned, recorded active", []string{"5"}, []store.Installation{rec(5, store.InstallationActive)}, 5, 200},
		{"pinned, recorded deleted", []string{"5"}, []store.Installation{rec(5, store.InstallationDeleted)}, 5, 403},
		{"pinned, recorded suspended", []string{"5"}, []store.Installation{rec(5, store.InstallationSuspended)}, 5, 403},
		{"recorded active, not on the pin", []string{"5"}, []store.Installation{rec(6, store.InstallationActive)}, 6, 403},
		{"star, not recorded", []string{"*"}, nil, 7, 200},
		{"star, recorded deleted", []string{"*"}, []store.Installation{rec(7, store.InstallationDeleted)}, 7, 403},
		{"no pin, recorded active", nil, []store.Installation{rec(8, store.InstallationActive)}, 8, 200},
		{"no pin, not recorded", nil, nil, 8, 403},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			recorded := store.NewInstallationsMemory()
			for _, r := range tc.records {
				if err := recorded.RecordInstallation(context.Background(), r); err != nil {
					t.Fatal(err)
				}
			}
			hs := newHarness(t, func(o *Options) { o.Installations = mustInstallations(t, tc.pin...); o.Recorded = recorded })
			if got := hs.deliver("workflow_job", "d", queued(tc.id)); got.Status != tc.want {
				t.Errorf("status %d %s, want %d", got.Status, got.Body, tc.want)
			}
			if tc.want == 403 && hs.counter.Get(MetricRejected, "installation") != 1 {
				t.Errorf("refusal not counted: %v", hs.counter.Snapshot())
			}
		})
	}
}

type failingInstallations struct{ store.Installations }

func (failingInstallations) Installation(context.Context, int64) (store.Installation, error) {
	return store.Installation{}, errors.New("ProvisionedThroughputExceededException")
}

func (failingInstallations) RecordInstallation(context.Context, store.Installation) error {
	return errors.New("ProvisionedThroughputExceededException")
}

// TestInstallationStoreFailure: a store that cannot answer is a 503 (GitHub
// can redeliver), for a job and for an installation event alike.
func TestInstallationStoreFailure(t *testing.T) {
	t.Parallel()
	hs := newHarness(t, func(o *Options) { o.Installations = mustInstallations(t); o.Recorded = failingInstallations{} })
	if got := hs.deliver("workflow_job", "d1", withInstallation(examplesOf(t, "workflow_job", "queued")[0].body, instID)); got.Status != 503 {
		t.Errorf("job: %d, want 503", got.Status)
	}
	if got := hs.deliver("installation", "d2", examplesOf(t, "installation", "created")[0].body); got.Status != 503 {
		t.Errorf("installation event: %d, want 503", got.Status)
	}
	if len(hs.queue.Jobs()) != 0 {
		t.Error("a job was enqueued without its installation's record")
	}
}

// TestInstallationCache: a container trusts a record it read for
// InstallationCacheTTL; a deletion recorded by another container reaches it
// then. The container that records an event drops its own copy at once.
func TestInstallationCache(t *testing.T) {
	t.Parallel()
	recorded := store.NewInstallationsMemory()
	clk := &clock{t: fixedNow}
	mk := func() *harness {
		return newHarness(t, func(o *Options) { o.Installations = mustInstallations(t); o.Recorded = recorded; o.Now = clk.now })
	}
	a, b := mk(), mk()
	created := withInstallation(examplesOf(t, "installation", "created")[0].body, instID)
	deleted := withInstallation(examplesOf(t, "installation", "deleted")[0].body, instID)
	queued := withInstallation(examplesOf(t, "workflow_job", "queued")[0].body, instID)
	if got := a.deliver("installation", "c", created); got.Status != 200 {
		t.Fatal(got)
	}
	for _, h := range []*harness{a, b} { // both read and keep the record
		if got := h.deliver("workflow_job", "q1", queued); got.Status != 200 {
			t.Fatal(got)
		}
	}
	clk.add(time.Second)
	if got := a.deliver("installation", "x", deleted); got.Status != 200 {
		t.Fatal(got)
	}
	if got := a.deliver("workflow_job", "q2", queued); got.Status != 403 {
		t.Errorf("the container that recorded the deletion served it: %d", got.Status)
	}
	if got := b.deliver("workflow_job", "q3", queued); got.Status != 200 {
		t.Errorf("within the TTL the other container serves from its copy: %d", got.Status)
	}
	clk.add(DefaultInstallationCacheTTL)
	if got := b.deliver("workflow_job", "q4", queued); got.Status != 403 {
		t.Errorf("after the TTL the deletion reaches the other container: %d", got.Status)
	}
}

// TestSecretRefresh: a delivery signed with a secret the handler has not
// read yet (the setup page wrote it) verifies after one refresh; refreshes
// are bounded to one per SecretRefreshEvery however many bad signatures come.
func TestSecretRefresh(t *testing.T) {
	t.Parallel()
	clk := &clock{t: fixedNow}
	var mu sync.Mutex
	current, reads := "placeholder-before-setup", 0
	hs := newHarness(t, func(o *Options) {
		o.Secrets = [][]byte{[]byte("placeholder-before-setup")}
		o.Now = clk.now
		o.RefreshSecrets = func(context.Context) ([][]byte, error) {
			mu.Lock()
			defer mu.Unlock()
			reads++
			return [][]byte{[]byte(current)}, nil
		}
	})
	ping := examplesOf(t, "ping", "none")[0].body
	// The harness signs with its canary secret, which the App now uses.
	mu.Lock()
	current = canarySecret
	mu.Unlock()
	clk.add(DefaultSecretRefreshEvery)
	if got := hs.deliver("ping", "p1", ping); got.Status != 200 {
		t.Fatalf("after the setup wrote the secret: %d, want 200", got.Status)
	}
	for i := range 5 {
		got := hs.h.Handle(context.Background(), Request{Event: "ping", Delivery: "bad" + strconv.Itoa(i), Signature: Sign([]byte("forged"), ping), Body: ping})
		if got.Status != 401 {
			t.Fatalf("forged: %d", got.Status)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if reads != 1 {
		t.Errorf("%d secret reads, want 1 (bounded per SecretRefreshEvery)", reads)
	}
}
