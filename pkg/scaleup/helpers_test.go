package scaleup_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/room"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/pool/poolfile"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/provider/ec2"
	"github.com/skiffci/skiff/pkg/provider/ec2/ec2fake"
	"github.com/skiffci/skiff/pkg/queue"
	"github.com/skiffci/skiff/pkg/scaleup"
	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/telemetry"
	"github.com/skiffci/skiff/pkg/userdata"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const poolsYAML = `
version: 1
defaults:
  image:
    ssm: /aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64
pools:
  - name: cpu
    labels: [self-hosted, linux, x64]
    instanceTypes: [c7i.large, m7i.large]
    subnets: [subnet-0aaaaaaaa, subnet-0bbbbbbbb]
    capacity: spot-then-on-demand
    maxRunners: 5000
  - name: tokens
    labels: [self-hosted, linux, x64, tokens]
    registration: token
    instanceTypes: [c7i.large, m7i.large]
    subnets: [subnet-0aaaaaaaa, subnet-0bbbbbbbb]
    capacity: spot-then-on-demand
    maxRunners: 5000
  - name: oss
    labels: [oss]
    visibility: [public, private, internal]
    forkPullRequests: allow
    instanceTypes: [c7i.large]
    subnets: [subnet-0aaaaaaaa]
  - name: ondemand
    labels: [ondemand]
    instanceTypes: [c7i.xlarge]
    subnets: [subnet-0aaaaaaaa]
    capacity: on-demand
    maxRunners: 5000
  - name: small
    labels: [small]
    instanceTypes: [t3.large]
    subnets: [subnet-0aaaaaaaa]
    capacity: on-demand
    maxRunners: 2
  - name: gpu
    labels: [gpu]
    instanceTypes: [g6.xlarge]
    image: {ssm: /aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-amazon-linux-2023/latest/ami-id}
    subnets: [subnet-0aaaaaaaa]
    capacity: on-demand
    maxRunners: 3
  - name: gpu8
    labels: [gpu8]
    instanceTypes: [g6.xlarge, g6.2xlarge]
    image: {ssm: /aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-amazon-linux-2023/latest/ami-id}
    subnets: [subnet-0aaaaaaaa, subnet-0bbbbbbbb]
    capacity: on-demand
    maxRunners: 8
  - name: mixed
    labels: [mixed]
    instanceTypes: [g6.xlarge, c7i.xlarge]
    image: {ssm: /aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-amazon-linux-2023/latest/ami-id}
    subnets: [subnet-0aaaaaaaa]
    capacity: on-demand
    maxRunners: 5000
  - name: warm
    labels: [warm]
    instanceTypes: [c7i.large]
    subnets: [subnet-0aaaaaaaa]
    capacity: on-demand
    maxRunners: 3
    dynamic: {maxDiskGiB: 100}
    warm: {stopped: 1, hot: 1}
  - name: private
    labels: [private]
    scope:
      repositories: [acme/secret]
    instanceTypes: [c7i.large]
    subnets: [subnet-0aaaaaaaa]
`

// secretPrefix starts every credential ghsim issues: the canary.
const secretPrefix = "CANARYSECRET"

// clock is a settable clock.
type clock struct{ ns atomic.Int64 }

func (c *clock) set(t time.Time)         { c.ns.Store(t.UnixNano()) }
func (c *clock) now() time.Time          { return time.Unix(0, c.ns.Load()).UTC() }
func (c *clock) advance(d time.Duration) { c.ns.Add(int64(d)) }

var start = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

// memRegistrations is the registration table in memory.
type memRegistrations struct {
	mu    sync.Mutex
	items map[string]userdata.Registration
	puts  int
	fail  error
}

func (m *memRegistrations) Put(ctx context.Context, r userdata.Registration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := r.Validate(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.puts++
	if m.fail != nil {
		return m.fail
	}
	m.items[r.InstanceARN] = r
	return nil
}

func (m *memRegistrations) all() map[string]userdata.Registration {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]userdata.Registration{}
	for k, v := range m.items {
		out[k] = v
	}
	return out
}

// env is one scale-up service with all its fakes.
type env struct {
	t       testing.TB
	sim     *ghsim.Server
	inst    int64
	gh      *github.Client
	ec2     *ec2fake.Fake
	store   *ledger.LaunchMemory
	ledger  *ledger.Memory
	jobs    *store.Memory
	regs    *memRegistrations
	dlq     *queue.Memory
	counter *telemetry.Memory
	timings *telemetry.MemoryTimings
	logs    *testenv.SyncBuffer
	clock   *clock
	svc     *scaleup.Service
	opts    scaleup.Options
	popts   ec2.ProviderOptions
	// unknownRuns leaves the jobs' runs unrecorded (the workflow_run event
	// has not arrived), so scale-up must ask GitHub.
	unknownRuns bool
}

func newEnv(t testing.TB, tweak func(*scaleup.Options)) *env {
	t.Helper()
	key := testenv.Key()
	sim := ghsim.New(ghsim.Options{SecretPrefix: secretPrefix})
	t.Cleanup(sim.Close)
	sim.AddApp(ghsim.AppConfig{ID: 42, Slug: "skiff", PublicKey: &key.PublicKey})
	sim.AddOrg("acme")
	sim.AddRepo("acme", "app")
	sim.AddRepo("acme", "secret")
	inst := sim.Install(42, "acme")
	gh, err := github.NewClient([]github.App{{ID: 42, Key: key}}, github.WithBaseURL(sim.URL()),
		github.WithSleep(func(ctx context.Context, _ time.Duration) error { return ctx.Err() }))
	if err != nil {
		t.Fatal(err)
	}
	pools, err := poolfile.Parse([]byte(poolsYAML), "pools.yaml")
	if err != nil {
		t.Fatal(err)
	}
	testenv.KeptGroups(t, sim, pools, "acme")
	e := &env{
		t: t, sim: sim, inst: inst, gh: gh, ec2: ec2fake.New(), store: ledger.NewLaunchMemory(),
		regs: &memRegistrations{items: map[string]userdata.Registration{}}, dlq: &queue.Memory{},
		counter: &telemetry.Memory{}, timings: &telemetry.MemoryTimings{}, logs: &testenv.SyncBuffer{}, clock: &clock{},
	}
	e.clock.set(start)
	e.ec2.SetClock(e.clock.now)
	e.ledger = ledger.NewMemory(e.clock.now)
	e.jobs = store.NewMemory()
	e.jobs.SetClock(e.clock.now)
	logger := slog.New(slog.NewJSONHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	noDelay := time.Duration(0)
	e.popts = ec2.ProviderOptions{
		API: e.ec2, Registrations: e.regs, Capacity: room.CapacityMemory{Store: room.NewMemory()}, Partition: "aws", Region: "eu-west-1", Account: "123456789012",
		LaunchTemplatePrefix: "skiff-", RootDevice: "/dev/xvda", TagRetryDelay: &noDelay,
		Counter: e.counter, Logger: logger, Now: e.clock.now,
	}
	e.opts = scaleup.Options{
		Pools: pools, Launches: e.store, Ledger: e.ledger, Jobs: e.jobs, Provider: e.provider(), GitHub: gh,
		Counter: e.counter, Timings: e.timings, Logger: logger, Now: e.clock.now,
	}
	if tweak != nil {
		tweak(&e.opts)
	}
	e.svc, err = scaleup.New(e.opts)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// provider is an EC2 provider over the env's fake, registrations and store.
func (e *env) provider() *ec2.Provider {
	e.t.Helper()
	p, err := ec2.NewProvider(e.popts)
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

// response is what a Lambda SQS event source gets back: the messages to
// deliver again (dead letters are sent to e.dlq on the way).
type response struct{ BatchItemFailures []failure }

type failure struct{ ItemIdentifier string }

// handleAtOnce hands each batch to an invocation of its own, all at once,
// and returns their responses in the batches' order.
func (e *env) handleAtOnce(batches ...[]queue.Delivery) []response {
	resps := make([]response, len(batches))
	var wg sync.WaitGroup
	for i, b := range batches {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resps[i] = e.handle(context.Background(), e.svc, b...)
		}()
	}
	wg.Wait()
	return resps
}

// handle runs one batch through svc and completes it as the Lambda does.
// Unless e.unknownRuns, the jobs' runs are recorded first as pushes, as the
// webhook records each run's workflow_run event.
func (e *env) handle(ctx context.Context, svc *scaleup.Service, ds ...queue.Delivery) response {
	for _, d := range ds {
		if d.Err != nil || e.unknownRuns {
			continue
		}
		if _, err := e.jobs.Run(context.Background(), d.Job.RunID); err == nil {
			continue
		}
		_ = e.jobs.RecordRun(context.Background(), store.RunRecord{ID: d.Job.RunID, Attempt: 1, Event: "push",
			Repository: d.Job.Repository, UpdatedAt: e.clock.now(), ExpiresAt: e.clock.now().Add(time.Hour)})
	}
	answers := svc.Handle(ctx, ds)
	if len(answers) != len(ds) {
		e.t.Fatalf("%d answers for %d deliveries", len(answers), len(ds))
	}
	var r response
	for _, id := range queue.CompleteBatch(context.Background(), e.dlq, ds, answers, e.counter, slog.New(slog.NewJSONHandler(e.logs, nil))) {
		r.BatchItemFailures = append(r.BatchItemFailures, failure{id})
	}
	return r
}

var msgSeq atomic.Int64

// job is a queued job of acme/app with the given labels.
func job(id int64, labels ...string) queue.Job {
	if len(labels) == 0 {
		labels = []string{"self-hosted", "linux", "x64"}
	}
	return queue.Job{JobID: id, RunID: id/10 + 1, Attempt: 1, Repository: "acme/app", Owner: "acme",
		InstallationID: 0, Labels: labels, Pool: "cpu", DeliveryID: "d-" + strconv.FormatInt(id, 10),
		ReceivedAt: start.Add(-2 * time.Second)}
}

// message wraps a job as a delivery received receiveCount times.
func message(j queue.Job, receiveCount int) queue.Delivery {
	body, _ := json.Marshal(j)
	return queue.NewDelivery(fmt.Sprintf("m-%d-%d", j.JobID, msgSeq.Add(1)), string(body), receiveCount, "")
}

func jobs(from int64, n int, labels ...string) []queue.Delivery {
	out := make([]queue.Delivery, n)
	for i := range out {
		out[i] = message(job(from+int64(i), labels...), 1)
	}
	return out
}

// failed returns the message ids of a response.
func failed(r response) map[string]bool {
	out := map[string]bool{}
	for _, f := range r.BatchItemFailures {
		out[f.ItemIdentifier] = true
	}
	return out
}

// instancesPerJob maps each job id to its live instances, by the runner
// names ("skiff-<job id>-<gen>") of their registrations.
func (e *env) instancesPerJob() map[string]int {
	out := map[string]int{}
	regs := e.regs.all()
	for _, in := range e.ec2.Live() {
		arn := userdata.InstanceARN("aws", "eu-west-1", "123456789012", in.ID)
		if r, ok := regs[arn]; ok {
			parts := strings.Split(r.RunnerName, "-")
			out[parts[1]]++
		}
	}
	return out
}

// crashProvider wraps the provider: it cancels the invocation's context
// right before (before=true) or right after the launch, like a Lambda that
// dies there.
type crashProvider struct {
	provider.Provider
	cancel context.CancelFunc
	before bool
}

func (c *crashProvider) Launch(ctx context.Context, p provider.Plan, regs []provider.Registration) (provider.Result, error) {
	if c.before {
		c.cancel()
		return provider.Result{}, ctx.Err()
	}
	res, err := c.Provider.Launch(ctx, p, regs)
	c.cancel()
	return res, err
}

// crashAtLaunch handles msg in an invocation that dies at the launch:
// before the launch reaches the provider when before is set, else right
// after it.
func (e *env) crashAtLaunch(msg queue.Delivery, before bool) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	o := e.opts
	o.Provider = &crashProvider{Provider: e.provider(), cancel: cancel, before: before}
	crashing, err := scaleup.New(o)
	if err != nil {
		e.t.Fatal(err)
	}
	e.handle(ctx, crashing, msg)
}

var errInjected = errors.New("injected failure")

// cancelOnPutLaunch cancels the invocation when it records a launch's
// intent, and fails that write: the crash between registration and launch.
type cancelOnPutLaunch struct {
	LaunchMemoryish
	cancel context.CancelFunc
}

// LaunchMemoryish is the store interface, embedded so the wrapper overrides one method.
type LaunchMemoryish = ledger.Launches

func (c *cancelOnPutLaunch) PutLaunch(ctx context.Context, f ledger.Launch) error {
	c.cancel()
	return ctx.Err()
}

// tokenLabels are the labels of the pool whose runners register with a
// registration token (registration: token).
var tokenLabels = []string{"self-hosted", "linux", "x64", "tokens"}
