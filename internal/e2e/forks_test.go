package e2e_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/allow"
	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/groups"
	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/pool/poolfile"
	"github.com/skiffci/skiff/pkg/provider/ec2"
	"github.com/skiffci/skiff/pkg/provider/ec2/ec2fake"
	"github.com/skiffci/skiff/pkg/queue"
	"github.com/skiffci/skiff/pkg/room"
	"github.com/skiffci/skiff/pkg/scaleup"
	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/telemetry"
	"github.com/skiffci/skiff/pkg/userdata"
	"github.com/skiffci/skiff/pkg/webhook"
)

// ec2Defaults start the tests' pools files: every pool's image and subnet.
const ec2Defaults = `
version: 1
defaults:
  image:
    ssm: /aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64
  subnets: [subnet-0aaaaaaaa]
`

// poolsYAML: the default policy (private and internal repositories, no
// forks), a pool for forks of collaborators, and one for any fork.
const poolsYAML = ec2Defaults + `pools:
  - name: cpu
    labels: [self-hosted, linux, x64]
    instanceTypes: [c7i.large]
  - name: trusted-forks
    labels: [trusted-forks]
    forkPullRequests: collaborators
    instanceTypes: [c7i.large]
  - name: any-fork
    labels: [any-fork]
    forkPullRequests: allow
    instanceTypes: [c7i.large]
`

const (
	appID         = 42
	webhookSecret = "e2e-webhook-secret"
)

var start = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

// regs is the runners' registration table: it checks each registration
// and keeps none (these tests boot no runner).
type regs struct{}

func (regs) Put(ctx context.Context, reg userdata.Registration) error {
	if err := reg.Validate(); err != nil {
		return err
	}
	return ctx.Err()
}

// stack is GitHub (the simulator) sending its signed webhooks to the real
// webhook handler, whose queue feeds the real scale-up service launching
// on the EC2 fake.
type stack struct {
	sim      *ghsim.Server
	queue    *queue.Memory
	ec2      *ec2fake.Fake
	hooks    *telemetry.Memory // the webhook's counters
	scaleup  *telemetry.Memory // scale-up's counters
	svc      *scaleup.Service
	logs     *testenv.SyncBuffer
	security *store.SecurityMemory // the webhook's security events
	hookURL  string                // where the simulator delivers
}

// stackOptions change a stack: its pools file, the runners' registration
// table, the allow-list. The zero value is newStack's.
type stackOptions struct {
	pools string
	regs  ec2.Registrations
	allow []string
}

func newStack(t *testing.T) *stack {
	t.Helper()
	return newStackWith(t, stackOptions{})
}

func newStackWith(t *testing.T, o stackOptions) *stack {
	t.Helper()
	if o.pools == "" {
		o.pools = poolsYAML
	}
	if o.regs == nil {
		o.regs = regs{}
	}
	if o.allow == nil {
		o.allow = []string{"acme"}
	}
	clock := ghsim.NewClock(start)
	k := testenv.Key()
	s := &stack{sim: ghsim.New(ghsim.Options{Now: clock.Now}), queue: &queue.Memory{}, ec2: ec2fake.New(),
		hooks: &telemetry.Memory{}, scaleup: &telemetry.Memory{}, logs: &testenv.SyncBuffer{}}
	t.Cleanup(s.sim.Close)
	s.queue.SetClock(clock.Now)
	s.ec2.SetClock(clock.Now)
	logger := slog.New(slog.NewJSONHandler(s.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	pools, err := poolfile.Parse([]byte(o.pools), "pools.yaml")
	if err != nil {
		t.Fatal(err)
	}

	s.sim.AddApp(ghsim.AppConfig{ID: appID, Slug: "skiff", PublicKey: &k.PublicKey})
	s.sim.AddOrg("acme")
	s.sim.AddRepo("acme", "app") // private
	if err := s.sim.SetVisibility("acme/site", ghsim.VisibilityPublic); err != nil {
		t.Fatal(err)
	}
	inst := s.sim.Install(appID, "acme")

	jobs := store.NewMemory()
	jobs.SetClock(clock.Now)
	s.security = store.NewSecurityMemory(clock.Now)
	c := stackParts{pools: pools, jobs: jobs, led: ledger.NewMemory(clock.Now), logger: logger, now: clock.Now}
	s.startWebhook(t, c, o.allow, inst)
	s.startScaleUp(t, c, o.regs, k)
	return s
}

// stackParts are what a stack's webhook and scale-up share.
type stackParts struct {
	pools  *pool.Config
	jobs   *store.Memory
	led    *ledger.Memory
	logger *slog.Logger
	now    func() time.Time
}

// startWebhook serves the webhook, admitting the owners of allowList and the
// installation inst, and makes it the simulated app's webhook.
func (s *stack) startWebhook(t *testing.T, c stackParts, allowList []string, inst int64) {
	t.Helper()
	allowed := mustAllow(t, allowList...)
	installs, err := webhook.ParseInstallationList([]string{strconv.FormatInt(inst, 10)})
	if err != nil {
		t.Fatal(err)
	}
	h, err := webhook.New(webhook.Options{
		Secrets: [][]byte{[]byte(webhookSecret)}, Router: c.pools, Policies: c.pools, Scopes: c.pools, Queue: s.queue,
		SecurityEvents: s.security,
		Store:          c.jobs, Runners: c.led, Counter: s.hooks, Logger: c.logger, Now: c.now,
		Allow: allowed, Installations: installs,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	s.sim.SetWebhook(appID, srv.URL, webhookSecret)
	s.hookURL = srv.URL
}

// startScaleUp builds scale-up over the fake EC2 with regs, signing in to
// the simulated GitHub as the app with key k.
func (s *stack) startScaleUp(t *testing.T, c stackParts, regs ec2.Registrations, k *rsa.PrivateKey) {
	t.Helper()
	gh, err := github.NewClient([]github.App{{ID: appID, Key: k}}, github.WithBaseURL(s.sim.URL()), github.WithClock(c.now),
		github.WithSleep(func(ctx context.Context, _ time.Duration) error { return ctx.Err() }))
	if err != nil {
		t.Fatal(err)
	}
	launches := ledger.NewLaunchMemory()
	noDelay := time.Duration(0)
	provider, err := ec2.NewProvider(ec2.ProviderOptions{
		API: s.ec2, Registrations: regs, Capacity: room.CapacityMemory{Store: room.NewMemory()}, Partition: "aws", Region: "eu-west-1",
		Account: "123456789012", LaunchTemplatePrefix: "skiff-", RootDevice: "/dev/xvda", TagRetryDelay: &noDelay,
		Counter: s.scaleup, Logger: c.logger, Now: c.now,
	})
	if err != nil {
		t.Fatal(err)
	}
	keeper, err := groups.New(groups.Options{Pools: c.pools, Allow: mustAllow(t, "acme"), GitHub: gh, Logger: c.logger, Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	s.svc, err = scaleup.New(scaleup.Options{
		Pools: c.pools, Launches: launches, Ledger: c.led, Jobs: c.jobs, Provider: provider, GitHub: gh, Groups: keeper,
		Counter: s.scaleup, Logger: c.logger, Now: c.now,
	})
	if err != nil {
		t.Fatal(err)
	}
}

func mustAllow(t *testing.T, entries ...string) allow.List {
	t.Helper()
	a, err := allow.Parse(entries)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// replayJobEvents delivers again, signed, every workflow_job in_progress
// and completed delivery the simulator made for the job, as GitHub's
// redelivery does.
func (s *stack) replayJobEvents(t *testing.T, job int64) {
	t.Helper()
	id := `"id":` + strconv.FormatInt(job, 10) + `,`
	for _, d := range s.sim.Deliveries() {
		if d.Event != "workflow_job" || d.Action == "queued" || d.Action == "waiting" || !strings.Contains(string(d.Payload), id) {
			continue
		}
		mac := hmac.New(sha256.New, []byte(webhookSecret))
		mac.Write(d.Payload)
		req, err := http.NewRequest(http.MethodPost, s.hookURL, bytes.NewReader(d.Payload))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-GitHub-Event", d.Event)
		req.Header.Set("X-GitHub-Delivery", d.GUID+"-replay")
		req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
}

// drain hands everything the webhook enqueued to scale-up and completes
// each answer, as queue.Consume does. It returns how many answers were
// retries or dead letters.
func (s *stack) drain(t *testing.T) (notDone int) {
	t.Helper()
	ctx := context.Background()
	for s.queue.Depth() > 0 {
		ds, err := s.queue.Receive(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) == 0 {
			break // the rest is in flight: answered with a retry
		}
		for i, a := range s.svc.Handle(ctx, ds) {
			if a.Verdict != queue.Done {
				notDone++
			}
			if err := s.queue.Complete(ctx, ds[i], a); err != nil {
				t.Fatal(err)
			}
		}
	}
	return notDone
}

// TestWhoMayRunEndToEnd: runs started in the simulator reach the real
// webhook handler as signed deliveries; what it enqueues goes to scale-up,
// which launches on the EC2 fake or refuses — a public repository at the
// webhook, a fork's pull request at scale-up unless the pool admits it
// (for collaborators: the author's permission, asked of GitHub).
// whoWant is what must become of a job: the webhook's answer, enqueued,
// launched, or refused (and where).
type whoWant struct {
	hook     int // the webhook's answer to workflow_job queued (default 200)
	enqueued bool
	launched bool
	refused  string // the reason counted: at the webhook (public_repository) or scale-up (fork_pull_request)
}

func TestWhoMayRunEndToEnd(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		repo   string
		event  string
		head   string // the fork the code comes from; "" the repository itself
		actor  string
		role   string // the actor's role on the repository; "" not a collaborator
		labels []string
		lost   bool // the workflow_run delivery is lost: scale-up looks the run up
		want   whoWant
	}{
		{name: "a push in a private repository", repo: "acme/app", event: "push", labels: []string{"self-hosted", "linux", "x64"},
			want: whoWant{enqueued: true, launched: true}},
		{name: "a public repository", repo: "acme/site", event: "push", labels: []string{"self-hosted", "linux", "x64"},
			want: whoWant{hook: 202, refused: "public_repository"}},
		{name: "a pull request from a fork", repo: "acme/app", event: "pull_request", head: "mallory/app", actor: "mallory",
			labels: []string{"self-hosted", "linux", "x64"}, want: whoWant{enqueued: true, refused: "fork_pull_request"}},
		{name: "a fork's pull request by a collaborator with write access", repo: "acme/app", event: "pull_request",
			head: "alice/app", actor: "alice", role: "write", labels: []string{"trusted-forks"},
			want: whoWant{enqueued: true, launched: true}},
		{name: "a fork's pull request by a collaborator, its workflow_run lost", repo: "acme/app", event: "pull_request",
			head: "alice/app", actor: "alice", role: "maintain", labels: []string{"trusted-forks"}, lost: true,
			want: whoWant{enqueued: true, launched: true}},
		{name: "a fork's pull request by a reader", repo: "acme/app", event: "pull_request",
			head: "rita/app", actor: "rita", role: "read", labels: []string{"trusted-forks"},
			want: whoWant{enqueued: true, refused: "fork_pull_request"}},
		{name: "a fork's pull request by a first-time contributor", repo: "acme/app", event: "pull_request",
			head: "newbie/app", actor: "newbie", labels: []string{"trusted-forks"},
			want: whoWant{enqueued: true, refused: "fork_pull_request"}},
		{name: "a fork's pull request on a pool that allows forks", repo: "acme/app", event: "pull_request",
			head: "mallory/app", actor: "mallory", labels: []string{"any-fork"}, want: whoWant{enqueued: true, launched: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newStack(t)
			if tc.role != "" {
				if err := s.sim.SetPermission(tc.repo, tc.actor, tc.role); err != nil {
					t.Fatal(err)
				}
			}
			if tc.lost {
				s.sim.SetFault(ghsim.OpWebhook, ghsim.Fault{FailNext: 1}) // workflow_run requested comes first
			}
			if _, err := s.sim.StartRun(ghsim.RunSpec{Repo: tc.repo, Event: tc.event, HeadRepo: tc.head, Actor: tc.actor,
				Jobs: []ghsim.JobSpec{{Labels: tc.labels}}}); err != nil {
				t.Fatal(err)
			}
			for _, d := range s.sim.Deliveries() {
				want := 200
				switch {
				case tc.lost && d.Event == "workflow_run":
					continue // dropped on the way
				case d.Event == "workflow_job" && tc.want.hook != 0:
					want = tc.want.hook
				}
				if d.StatusCode != want {
					t.Errorf("%s delivery answered %d, want %d", d.Event, d.StatusCode, want)
				}
			}
			if got := s.queue.Depth(); (got == 1) != tc.want.enqueued {
				t.Fatalf("%d jobs enqueued, want enqueued %v\n%s", got, tc.want.enqueued, s.logs.String())
			}
			if n := s.drain(t); n != 0 {
				t.Errorf("%d jobs retried or dead-lettered, want none\n%s", n, s.logs.String())
			}
			if got := len(s.ec2.Live()); (got == 1) != tc.want.launched || got > 1 {
				t.Errorf("%d instances launched, want launched %v\n%s", got, tc.want.launched, s.logs.String())
			}
			checkRefusal(t, s, tc.want.refused)
			if wantRuns := map[bool]int{true: 1}[tc.lost]; s.sim.Requests(ghsim.OpGetWorkflowRun) != wantRuns {
				t.Errorf("%d run lookups, want %d (the webhook's workflow_run record serves)", s.sim.Requests(ghsim.OpGetWorkflowRun), wantRuns)
			}
		})
	}
}

// checkRefusal fails t unless a job refused for refused ("" none) was
// counted where it was refused, and got no JIT configuration.
func checkRefusal(t *testing.T, s *stack, refused string) {
	t.Helper()
	switch refused {
	case "public_repository":
		if s.hooks.Get(webhook.MetricUnmatched, refused) != 1 {
			t.Errorf("the webhook did not count %s: %v", refused, s.hooks.Snapshot())
		}
	case "fork_pull_request":
		if s.scaleup.Get(scaleup.MetricSkipped, refused) != 1 {
			t.Errorf("scale-up did not count %s: %v", refused, s.scaleup.Snapshot())
		}
	}
	if refused != "" && s.sim.Requests(ghsim.OpGenerateOrgJITConfig) != 0 {
		t.Error("a refused job got a JIT configuration")
	}
}

func TestMain(m *testing.M) { testenv.Main(m) }
