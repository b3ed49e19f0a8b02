package ec2_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	sdkec2 "github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/provider/ec2"
	"github.com/skiffci/skiff/pkg/provider/ec2/ec2fake"
	"github.com/skiffci/skiff/pkg/provider/providertest"
	"github.com/skiffci/skiff/pkg/room"
	"github.com/skiffci/skiff/pkg/userdata"
)

// warmCanary is the JIT configuration handed to warm instances' jobs: it
// must never show in an error or a log line.
const warmCanary = "CANARYWARMJIT0123456789"

// callLog is the order of the calls that change something: EC2's
// CreateTags, StopInstances and StartInstances, and registration writes.
type callLog struct {
	mu  sync.Mutex
	ops []string
}

func (c *callLog) add(op string) {
	c.mu.Lock()
	c.ops = append(c.ops, op)
	c.mu.Unlock()
}

func (c *callLog) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.ops
	c.ops = nil
	return out
}

// loggedAPI is the fake, its state-changing instance calls logged.
type loggedAPI struct {
	ec2.API
	log *callLog
}

func (a loggedAPI) CreateTags(ctx context.Context, in *sdkec2.CreateTagsInput, o ...func(*sdkec2.Options)) (*sdkec2.CreateTagsOutput, error) {
	a.log.add("CreateTags")
	return a.API.CreateTags(ctx, in, o...)
}

func (a loggedAPI) StopInstances(ctx context.Context, in *sdkec2.StopInstancesInput, o ...func(*sdkec2.Options)) (*sdkec2.StopInstancesOutput, error) {
	a.log.add("StopInstances")
	return a.API.StopInstances(ctx, in, o...)
}

func (a loggedAPI) StartInstances(ctx context.Context, in *sdkec2.StartInstancesInput, o ...func(*sdkec2.Options)) (*sdkec2.StartInstancesOutput, error) {
	a.log.add("StartInstances")
	return a.API.StartInstances(ctx, in, o...)
}

// loggedRegs is the registration table in memory, its writes logged, and
// failing while fail is set.
type loggedRegs struct {
	*memRegistrations
	log  *callLog
	fail error
}

func (r *loggedRegs) Put(ctx context.Context, reg userdata.Registration) error {
	r.log.add("Put")
	if r.fail != nil {
		return r.fail
	}
	return r.memRegistrations.Put(ctx, reg)
}

// warmWorld is an EC2 provider of deployment "prod" over a fresh fake, on
// a clock the test moves.
type warmWorld struct {
	fake  *ec2fake.Fake
	p     *ec2.Provider
	regs  *loggedRegs
	calls *callLog
	logs  *testenv.SyncBuffer
	now   *time.Time
	warms int // warm launches so far: each has its own token and name
}

func newWarmWorld(t *testing.T) *warmWorld {
	t.Helper()
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	w := &warmWorld{fake: ec2fake.New(), calls: &callLog{}, logs: &testenv.SyncBuffer{}, now: &now}
	w.fake.SetClock(func() time.Time { return *w.now })
	w.regs = &loggedRegs{memRegistrations: &memRegistrations{items: map[string]userdata.Registration{}}, log: w.calls}
	noDelay := time.Duration(0)
	p, err := ec2.NewProvider(ec2.ProviderOptions{
		API: loggedAPI{API: w.fake, log: w.calls}, Registrations: w.regs, Capacity: room.CapacityMemory{Store: room.NewMemory()},
		Partition: "aws", Region: "eu-west-1", Account: "123456789012", Deployment: "prod", TagRetryDelay: &noDelay,
		Logger: slog.New(slog.NewJSONHandler(w.logs, nil)), Now: func() time.Time { return *w.now },
	})
	if err != nil {
		t.Fatal(err)
	}
	w.p = p
	return w
}

// warmSpec is a spot-first pool: its hot instances launch spot, its
// stopped ones on-demand.
var warmSpec = pool.Spec{Shared: pool.Shared{Pool: "warm", Backend: pool.BackendEC2},
	EC2: &pool.EC2{InstanceTypes: []string{"c7i.large"}, Subnets: []string{"subnet-0aaaaaaaa"}, Capacity: "spot-then-on-demand",
		Image: pool.Image{AMI: "ami-0123456789abcdef0"}, DiskGiB: 30}}

// launchWarm launches one warm instance of kind through Plan and Launch
// (the first with token warm-<kind>-1 and id 1 in its name) and returns
// its id; with ready, it boots and tags itself ready, as its boot script
// does.
func (w *warmWorld) launchWarm(t *testing.T, kind pool.WarmKind, ready bool) string {
	t.Helper()
	ctx := context.Background()
	w.warms++
	n := strconv.Itoa(w.warms)
	name := names.WarmRunnerName("prod", string(kind), "abc123", n)
	_, res := providertest.PlanAndLaunch(t, w.p, provider.Launch{Token: "warm-" + string(kind) + "-" + n, Spec: warmSpec,
		Runners: []provider.RunnerRequest{{Name: name, Owner: "acme", Warm: kind}}},
		[]provider.Registration{{Mode: provider.ModeWarm, RunnerName: name, WarmKind: string(kind), WarmUntil: w.now.Add(24 * time.Hour)}})
	if res.Runners[0].Err != nil {
		t.Fatalf("launching warm %s: %v", kind, res.Runners)
	}
	id := res.Runners[0].Instance.ID
	if ready {
		w.fake.SetState(id, "running")
		if _, err := w.fake.CreateTags(ctx, &sdkec2.CreateTagsInput{Resources: []string{id},
			Tags: []types.Tag{{Key: ptr(names.TagWarmReady), Value: ptr(w.now.Format(time.RFC3339))}}}); err != nil {
			t.Fatal(err)
		}
	}
	return id
}

func ptr(s string) *string { return &s }

func (w *warmWorld) instance(t *testing.T, id string) ec2fake.Instance {
	t.Helper()
	for _, in := range w.fake.Instances() {
		if in.ID == id {
			return in
		}
	}
	t.Fatalf("no instance %s", id)
	return ec2fake.Instance{}
}

// TestWarmLaunch: a warm launch goes through Plan and Launch: its instance
// is tagged warm with its warm name and no job, a stopped one launches
// on-demand (EC2 stops no one-time spot instance), and its registration
// item says wait, without a secret.
func TestWarmLaunch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		kind pool.WarmKind
		spot bool
	}{{pool.WarmHot, true}, {pool.WarmStopped, false}} {
		t.Run(string(tc.kind), func(t *testing.T) {
			t.Parallel()
			w := newWarmWorld(t)
			id := w.launchWarm(t, tc.kind, false)
			in := w.instance(t, id)
			if in.Spot != tc.spot {
				t.Errorf("spot = %v, want %v", in.Spot, tc.spot)
			}
			want := map[string]string{names.TagWarm: string(tc.kind), names.TagRunnerName: names.WarmRunnerName("prod", string(tc.kind), "abc123", "1"),
				names.TagManaged: names.ManagedValue, names.TagDeployment: "prod", names.TagPool: "warm",
				names.TagLaunchToken: "warm-" + string(tc.kind) + "-1", names.TagOwner: "acme"}
			for k, v := range want {
				if in.Tags[k] != v {
					t.Errorf("tag %s = %q, want %q", k, in.Tags[k], v)
				}
			}
			for _, k := range []string{names.TagJobID, names.TagRunID, names.TagRepository, names.TagJobIDs, names.TagRunIDs, names.TagRunnerNames} {
				if v, ok := in.Tags[k]; ok {
					t.Errorf("a warm instance carries %s=%q", k, v)
				}
			}
			reg, ok := w.regs.get(id)
			if !ok {
				t.Fatal("no registration item")
			}
			if reg.Mode != userdata.ModeWarm || reg.WarmKind != string(tc.kind) || !reg.WarmUntil.Equal(w.now.Add(24*time.Hour)) ||
				reg.JITConfig != "" || reg.Token != "" || !reg.ExpiresAt.Equal(w.now.Add(ec2.DefaultRegistrationTTL)) {
				t.Errorf("registration item %+v", reg)
			}
		})
	}
}

// TestWarmLaunchRefused: Plan refuses a warm runner launched with others,
// of an unknown kind or with a job; Launch refuses a registration that
// does not go with its runner, before launching anything.
func TestWarmLaunchRefused(t *testing.T) {
	t.Parallel()
	warm := provider.RunnerRequest{Name: "skiff-prod-warm-hot-abc-1", Warm: pool.WarmHot}
	job := provider.RunnerRequest{Name: "skiff-prod-7-1", JobID: 7, RunID: 3, Repository: "acme/app", Owner: "acme"}
	for _, tc := range []struct {
		name    string
		runners []provider.RunnerRequest
	}{
		{"warm with a job's runner", []provider.RunnerRequest{warm, job}},
		{"two warm runners", []provider.RunnerRequest{warm, {Name: "skiff-prod-warm-hot-abc-2", Warm: pool.WarmHot}}},
		{"an unknown kind", []provider.RunnerRequest{{Name: "w", Warm: "lukewarm"}}},
		{"a warm runner with a job", []provider.RunnerRequest{{Name: "w", Warm: pool.WarmStopped, JobID: 7}}},
	} {
		t.Run("plan/"+tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := newWarmWorld(t).p.Plan(context.Background(), provider.Launch{Token: "t", Spec: warmSpec, Runners: tc.runners})
			if !errors.Is(err, provider.ErrInvalid) || !provider.Permanent(err) {
				t.Errorf("err = %v, want a final ErrInvalid", err)
			}
		})
	}
	for _, tc := range []struct {
		name   string
		runner provider.RunnerRequest
		reg    provider.Registration
	}{
		{"a warm runner with a JIT configuration", warm, provider.Registration{Mode: provider.ModeJIT, JITConfig: warmCanary}},
		{"a job's runner told to wait", job, provider.Registration{Mode: provider.ModeWarm, WarmKind: "hot", WarmUntil: time.Now()}},
		{"a warm runner told another kind", warm, provider.Registration{Mode: provider.ModeWarm, WarmKind: "stopped", WarmUntil: time.Now()}},
	} {
		t.Run("launch/"+tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWarmWorld(t)
			pl, err := w.p.Plan(context.Background(), provider.Launch{Token: "t", Spec: warmSpec, Runners: []provider.RunnerRequest{tc.runner}})
			if err != nil {
				t.Fatal(err)
			}
			_, err = w.p.Launch(context.Background(), pl, []provider.Registration{tc.reg})
			if !errors.Is(err, provider.ErrInvalid) || w.fake.Calls("CreateFleet") != 0 || strings.Contains(err.Error(), warmCanary) {
				t.Errorf("err = %v after %d CreateFleet calls, want a final ErrInvalid before any", err, w.fake.Calls("CreateFleet"))
			}
		})
	}
}

// TestWarmStop: Stop stops a ready warm instance, and List tells it
// stopping, then stopped, with its warm tags; stopping it again, or one
// unknown or terminated along with it, is no error.
func TestWarmStop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWarmWorld(t)
	w.fake.SetStateDelays(time.Minute, 0)
	a := w.launchWarm(t, pool.WarmStopped, true)
	gone := w.launchWarm(t, pool.WarmStopped, true)
	if err := w.p.Terminate(ctx, []string{gone}); err != nil {
		t.Fatal(err)
	}
	list := func(want provider.State) {
		t.Helper()
		got, err := w.p.List(ctx, provider.Filter{Pool: "warm"})
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(got, func(in provider.Instance) bool { return in.ID == a })
		if i < 0 || got[i].State != want || got[i].Tags[names.TagWarm] != "stopped" || got[i].Tags[names.TagWarmReady] == "" {
			t.Errorf("List: %+v, want %s with its warm tags", got, want)
		}
	}
	if err := w.p.Stop(ctx, []string{a, gone, "i-0feedfacecafe0000"}); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	list(provider.Stopping)
	if err := w.p.Stop(ctx, []string{a}); err != nil {
		t.Errorf("Stop of a stopping instance: %v", err)
	}
	*w.now = w.now.Add(time.Minute)
	list(provider.Stopped)
	if err := w.p.Stop(ctx, []string{a}); err != nil {
		t.Errorf("Stop of a stopped instance: %v", err)
	}
	if st := w.instance(t, gone).State; st != "terminated" {
		t.Errorf("the terminated instance is %s", st)
	}
}

// TestWarmStopRefused: EC2 refuses to stop a spot instance (final: a warm
// stopped instance is on-demand, only a wrong caller asks) and one still
// pending from its launch (it will be running soon); neither spares the
// running instance stopped in the same call.
func TestWarmStopRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, w *warmWorld) string
		kind  error
		final bool
	}{
		{"a spot instance", func(t *testing.T, w *warmWorld) string { return w.launchWarm(t, pool.WarmHot, true) }, provider.ErrInvalid, true},
		{"an instance pending from its launch", func(t *testing.T, w *warmWorld) string { return w.launchWarm(t, pool.WarmStopped, false) },
			provider.ErrTransient, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWarmWorld(t)
			ok := w.launchWarm(t, pool.WarmStopped, true)
			refused := tc.setup(t, w)
			err := w.p.Stop(context.Background(), []string{refused, ok})
			if !errors.Is(err, tc.kind) || provider.Permanent(err) != tc.final || !strings.Contains(err.Error(), refused) {
				t.Errorf("err = %v, want %v (final %v) naming %s", err, tc.kind, tc.final, refused)
			}
			if st := w.instance(t, ok).State; st != "stopped" {
				t.Errorf("the other instance is %s", st)
			}
		})
	}
}

// TestHand: a warm instance given to a job is tagged the job's first,
// started when it waits stopped, then gets the job's registration; a
// failed step leaves the registration unwritten and says which kind of
// failure it was, never with the secret.
// handWant is what a handover must give.
type handWant struct {
	calls []string       // the changing calls of Hand, in order
	state provider.State // of the returned instance
	kind  error          // Hand's error kind; nil: no error
	final bool
	code  string
}

// checkHandRefused fails t unless the handover of id failed as want says,
// and wrote no job's registration.
func checkHandRefused(t *testing.T, w *warmWorld, id string, err error, want handWant) {
	t.Helper()
	var pe *provider.Error
	if !errors.Is(err, want.kind) || provider.Permanent(err) != want.final || !errors.As(err, &pe) || pe.Code != want.code {
		t.Errorf("err = %v, want %v (final %v, code %s)", err, want.kind, want.final, want.code)
	}
	if reg, ok := w.regs.get(id); ok && reg.Mode != userdata.ModeWarm {
		t.Errorf("a failed handover wrote the registration %v", reg)
	}
}

// checkHanded fails t unless got, the instance id handed to job's runner
// as a warm instance of kind, is in state with the job's tags, running in
// the fake, with the job's registration.
func checkHanded(t *testing.T, w *warmWorld, id string, got provider.Instance, job provider.RunnerRequest, kind pool.WarmKind, state provider.State) {
	t.Helper()
	if got.ID != id || got.State != state || got.Tags[names.TagWarm] != string(kind) {
		t.Errorf("Hand = %+v", got)
	}
	in := w.instance(t, id)
	for k, v := range map[string]string{names.TagRunnerName: job.Name, names.TagJobID: "42", names.TagRunID: "7",
		names.TagRepository: "acme/app", names.TagOwner: "acme", names.TagWarm: string(kind), names.TagPool: "warm"} {
		if in.Tags[k] != v {
			t.Errorf("tag %s = %q, want %q", k, in.Tags[k], v)
		}
	}
	if in.State != "running" {
		t.Errorf("the handed instance is %s", in.State)
	}
	reg, _ := w.regs.get(id)
	if reg.Mode != userdata.ModeJIT || reg.JITConfig != warmCanary || !reg.ExpiresAt.Equal(w.now.Add(ec2.DefaultRegistrationTTL)) {
		t.Errorf("registration item %v", reg)
	}
}

func TestHand(t *testing.T) {
	t.Parallel()
	job := provider.RunnerRequest{Name: "skiff-prod-42-1", JobID: 42, RunID: 7, Repository: "acme/app", Owner: "acme"}
	jit := provider.Registration{Mode: provider.ModeJIT, JITConfig: warmCanary, RunnerName: job.Name}
	cases := []struct {
		name  string
		kind  pool.WarmKind
		setup func(t *testing.T, w *warmWorld, id string) string // returns the id to hand over
		reg   provider.Registration
		want  handWant
	}{
		{"hot: tag, then the registration", pool.WarmHot, nil, jit,
			handWant{calls: []string{"CreateTags", "Put"}, state: provider.Running}},
		{"stopped: tag, start, then the registration", pool.WarmStopped, nil, jit,
			handWant{calls: []string{"CreateTags", "StartInstances", "Put"}, state: provider.Pending}},
		{"no capacity to start: capacity, no registration", pool.WarmStopped,
			func(t *testing.T, w *warmWorld, id string) string {
				w.fake.FailOp("StartInstances", "InsufficientInstanceCapacity")
				return id
			}, jit, handWant{calls: []string{"CreateTags", "StartInstances"}, kind: provider.ErrCapacity, code: "InsufficientInstanceCapacity"}},
		{"still stopping: transient, not final", pool.WarmStopped,
			func(t *testing.T, w *warmWorld, id string) string {
				w.fake.SetState(id, "running")
				w.fake.SetStateDelays(time.Minute, 0)
				if err := w.p.Stop(context.Background(), []string{id}); err != nil {
					t.Fatal(err)
				}
				w.calls.take()
				return id
			}, jit, handWant{calls: []string{"CreateTags", "StartInstances"}, kind: provider.ErrTransient, code: "IncorrectInstanceState"}},
		{"gone: transient, not final", pool.WarmHot,
			func(*testing.T, *warmWorld, string) string { return "i-0feedfacecafe0000" }, jit,
			handWant{calls: []string{"CreateTags"}, kind: provider.ErrTransient, code: "InvalidInstanceID.NotFound"}},
		{"the registration not written", pool.WarmHot,
			func(t *testing.T, w *warmWorld, id string) string {
				w.regs.fail = errors.New("dynamodb: ProvisionedThroughputExceededException")
				return id
			}, jit, handWant{calls: []string{"CreateTags", "Put"}, kind: provider.ErrTransient, code: "RegistrationNotDelivered"}},
		{"a registration to wait is no handover", pool.WarmHot, nil,
			provider.Registration{Mode: provider.ModeWarm, WarmKind: "hot", WarmUntil: time.Now()},
			handWant{kind: provider.ErrInvalid, final: true, code: "InvalidHandover"}},
		{"a registration the boot script refuses", pool.WarmHot, nil,
			provider.Registration{Mode: provider.ModeJIT, JITConfig: warmCanary + " with a space"},
			handWant{kind: provider.ErrInvalid, final: true, code: "InvalidRegistration"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			w := newWarmWorld(t)
			id := w.launchWarm(t, tc.kind, true)
			if tc.kind == pool.WarmStopped {
				if err := w.p.Stop(ctx, []string{id}); err != nil {
					t.Fatal(err)
				}
			}
			w.calls.take()
			if tc.setup != nil {
				id = tc.setup(t, w, id)
			}
			got, err := w.p.Hand(ctx, provider.Handover{InstanceID: id, Kind: tc.kind, Runner: job, Registration: tc.reg})
			if calls := w.calls.take(); !slices.Equal(calls, tc.want.calls) {
				t.Errorf("calls %v, want %v", calls, tc.want.calls)
			}
			if err != nil && strings.Contains(err.Error(), warmCanary) || strings.Contains(w.logs.String(), warmCanary) {
				t.Errorf("the secret leaked: err %v, logs %s", err, w.logs.String())
			}
			if tc.want.kind != nil {
				checkHandRefused(t, w, id, err, tc.want)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			checkHanded(t, w, id, got, job, tc.kind, tc.want.state)
		})
	}
}

// TestWarmMoto runs a stopped warm instance's life through the real SDK
// against moto's EC2 and DynamoDB: a warm launch (CreateFleet, the
// registration item of mode warm), Stop, then Hand (tags, StartInstances,
// the job's registration item), with List telling the states and tags at
// each step.
func TestWarmMoto(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	suffix := strconv.FormatInt(time.Now().UnixNano(), 36)
	w := newMotoWarm(t, suffix)
	api, p, spec, deployment := w.api, w.p, w.spec, w.deployment

	// The warm launch: tagged warm, on-demand, its item says wait.
	name := names.WarmRunnerName(deployment, "stopped", "abc123", "1")
	until := time.Now().Add(24 * time.Hour).Truncate(time.Second)
	_, res := providertest.PlanAndLaunch(t, p, provider.Launch{Token: "warm-" + suffix, Spec: spec,
		Runners: []provider.RunnerRequest{{Name: name, Owner: "acme", Warm: pool.WarmStopped}}},
		[]provider.Registration{{Mode: provider.ModeWarm, RunnerName: name, WarmKind: "stopped", WarmUntil: until}})
	if res.Runners[0].Err != nil {
		t.Fatalf("Launch: %+v", res.Runners)
	}
	id := res.Runners[0].Instance.ID
	t.Cleanup(func() { _ = p.Terminate(context.Background(), []string{id}) })
	in := w.listed(t, id)
	if in.Tags[names.TagWarm] != "stopped" || in.Tags[names.TagRunnerName] != name || in.Tags[names.TagJobID] != "" ||
		in.Capacity != provider.OnDemand {
		t.Errorf("warm instance %+v", in)
	}
	if it := w.item(t, id); it[userdata.AttrMode] != "warm" || it[userdata.AttrWarmKind] != "stopped" ||
		it[userdata.AttrWarmUntil] != strconv.FormatInt(until.Unix(), 10) || it[userdata.AttrJITConfig] != "" {
		t.Errorf("warm registration item %v", it)
	}
	t.Logf("moto: a fleet's instance is %s right after the launch", in.State)

	// Ready, then stopped: List says so, with the warm tags.
	if _, err := api.CreateTags(ctx, &sdkec2.CreateTagsInput{Resources: []string{id},
		Tags: []types.Tag{{Key: aws.String(names.TagWarmReady), Value: aws.String(time.Now().UTC().Format(time.RFC3339))}}}); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(ctx, []string{id}); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	in = w.listed(t, id)
	if in.State != provider.Stopped && in.State != provider.Stopping || in.Tags[names.TagWarmReady] == "" {
		t.Errorf("after Stop: %+v", in)
	}
	t.Logf("moto: right after StopInstances the instance is %s (EC2: stopping, then stopped)", in.State)
	if err := p.Stop(ctx, []string{id, "i-0123456789abcdef0"}); err != nil {
		t.Errorf("Stop again, with an unknown id: %v", err)
	}

	// The handover: the job's tags, started, the job's registration.
	job := provider.RunnerRequest{Name: names.RunnerName(deployment, 42, 1), JobID: 42, RunID: 7, Repository: "acme/app", Owner: "acme"}
	got, err := p.Hand(ctx, provider.Handover{InstanceID: id, Kind: pool.WarmStopped, Runner: job,
		Registration: provider.Registration{Mode: provider.ModeJIT, JITConfig: "eyJjYW5hcnkiOiJ5ZXMifQ==", RunnerName: job.Name}})
	if err != nil {
		t.Fatalf("Hand: %v", err)
	}
	if got.ID != id || got.State != provider.Pending {
		t.Errorf("Hand = %+v, want %s pending", got, id)
	}
	in = w.listed(t, id)
	if !in.State.Alive() || in.Tags[names.TagRunnerName] != job.Name || in.Tags[names.TagJobID] != "42" ||
		in.Tags[names.TagRepository] != "acme/app" || in.Tags[names.TagWarm] != "stopped" {
		t.Errorf("after Hand: %+v", in)
	}
	t.Logf("moto: right after StartInstances the instance is %s", in.State)
	if it := w.item(t, id); it[userdata.AttrMode] != "jit" || it[userdata.AttrJITConfig] != "eyJjYW5hcnkiOiJ5ZXMifQ==" || it[userdata.AttrWarmKind] != "" {
		t.Errorf("job's registration item %v", it)
	}
}

// motoWarm is a warm pool's provider on moto: the account's side (a
// launch template, a subnet, the registration table) and the pool's spec.
type motoWarm struct {
	api                         *sdkec2.Client
	db                          *dynamodb.Client
	p                           *ec2.Provider
	spec                        pool.Spec
	table, poolName, deployment string
}

func newMotoWarm(t *testing.T, suffix string) *motoWarm {
	t.Helper()
	ctx := context.Background()
	api := motoEC2(t)
	poolName, deployment := "warm-"+suffix, "moto-"+suffix
	endpoint := testenv.Moto(t)

	// The account's side: a launch template, a subnet, the registration table.
	if _, err := api.CreateLaunchTemplate(ctx, &sdkec2.CreateLaunchTemplateInput{
		LaunchTemplateName: aws.String(names.LaunchTemplate("skiff-", poolName)),
		LaunchTemplateData: &types.RequestLaunchTemplateData{ImageId: aws.String("ami-12c6146b"), InstanceType: types.InstanceTypeC7iLarge},
	}); err != nil {
		t.Fatalf("CreateLaunchTemplate: %v", err)
	}
	subnets, err := api.DescribeSubnets(ctx, &sdkec2.DescribeSubnetsInput{})
	if err != nil || len(subnets.Subnets) == 0 {
		t.Fatalf("DescribeSubnets: %v %v", subnets, err)
	}
	db := testenv.DynamoClient(t, endpoint)
	table := "skiff-registrations-" + suffix
	if err := ec2.CreateRegistrationTable(ctx, db, table); err != nil {
		t.Fatal(err)
	}

	p, err := ec2.NewProvider(ec2.ProviderOptions{API: api, Registrations: ec2.NewRegistrationTable(db, table),
		Capacity: room.CapacityMemory{Store: room.NewMemory()}, Partition: "aws", Region: "eu-west-1", Account: "123456789012",
		Deployment: deployment, LaunchTemplatePrefix: "skiff-", RootDevice: "-", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	spec := pool.Spec{Shared: pool.Shared{Pool: poolName, Backend: pool.BackendEC2},
		EC2: &pool.EC2{InstanceTypes: []string{"c7i.large"}, Subnets: []string{aws.ToString(subnets.Subnets[0].SubnetId)},
			Capacity: "spot-then-on-demand", Image: pool.Image{AMI: "ami-12c6146b"}}}

	return &motoWarm{api: api, db: db, p: p, spec: spec, table: table, poolName: poolName, deployment: deployment}
}

// item is the registration item of instance id, its string and number
// attributes.
func (w *motoWarm) item(t *testing.T, id string) map[string]string {
	t.Helper()
	ctx := context.Background()
	out, err := w.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(w.table), ConsistentRead: aws.Bool(true),
		Key: map[string]ddbtypes.AttributeValue{userdata.AttrPK: &ddbtypes.AttributeValueMemberS{
			Value: userdata.InstanceARN("aws", "eu-west-1", "123456789012", id)}}})
	if err != nil {
		t.Fatalf("GetItem: %v", err)
	}
	m := map[string]string{}
	for k, v := range out.Item {
		switch a := v.(type) {
		case *ddbtypes.AttributeValueMemberS:
			m[k] = a.Value
		case *ddbtypes.AttributeValueMemberN:
			m[k] = a.Value
		}
	}
	return m
}

// listed is instance id, which List must list alone in the pool.
func (w *motoWarm) listed(t *testing.T, id string) provider.Instance {
	t.Helper()
	got, err := w.p.List(context.Background(), provider.Filter{Pool: w.poolName})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(got) != 1 || got[0].ID != id {
		t.Fatalf("List(pool) = %+v, want %s alone", got, id)
	}
	return got[0]
}
