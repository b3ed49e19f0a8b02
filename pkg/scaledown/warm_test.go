package scaledown_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	sdkec2 "github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/provider/ec2"
	"github.com/skiffci/skiff/pkg/provider/ec2/ec2fake"
	"github.com/skiffci/skiff/pkg/queue"
	"github.com/skiffci/skiff/pkg/room"
	"github.com/skiffci/skiff/pkg/scaledown"
	"github.com/skiffci/skiff/pkg/scaledown/decide"
	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/userdata"
)

const warmPoolsYAML = `
version: 1
pools:
  - name: warm
    labels: [warm]
    image: {ssm: %s}
    instanceTypes: [c7i.large]
    subnets: [subnet-0aaaaaaaa]
    capacity: on-demand
    maxRunners: 3
    warm: {stopped: 1, hot: 1}
`

// warmRegistrations keeps the registration items the warm launches write.
type warmRegistrations struct {
	mu    sync.Mutex
	items map[string]userdata.Registration
}

func (r *warmRegistrations) Put(_ context.Context, reg userdata.Registration) error {
	if err := reg.Validate(); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.items[reg.InstanceARN] = reg
	return nil
}

// warmWorld is a reconciler over the EC2 fake with a warm pool.
type warmWorld struct {
	t      *testing.T
	clock  *ghsim.Clock
	fake   *ec2fake.Fake
	ledger *ledger.Memory
	regs   *warmRegistrations
	down   *scaledown.Service
	opts   scaledown.Options
}

func newWarmWorld(t *testing.T, image string) *warmWorld {
	t.Helper()
	w := &warmWorld{t: t, clock: ghsim.NewClock(time.Date(2026, 12, 4, 9, 0, 0, 0, time.UTC)), fake: ec2fake.New(),
		regs: &warmRegistrations{items: map[string]userdata.Registration{}}}
	w.fake.SetClock(w.clock.Now)
	key := testenv.Key()
	sim := ghsim.New(ghsim.Options{Now: w.clock.Now})
	t.Cleanup(sim.Close)
	sim.AddApp(ghsim.AppConfig{ID: 42, Slug: "skiff", PublicKey: &key.PublicKey})
	sim.AddOrg("acme")
	sim.Install(42, "acme")
	gh := appClient(t, sim, key, w.clock.Now)
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	prov, err := ec2.NewProvider(ec2.ProviderOptions{API: w.fake, Registrations: w.regs, Capacity: room.CapacityMemory{Store: room.NewMemory()},
		Partition: "aws", Region: "eu-west-1", Account: "123456789012", LaunchTemplatePrefix: "skiff-", Logger: log, Now: w.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	w.ledger = ledger.NewMemory(w.clock.Now)
	jobs := store.NewMemory()
	jobs.SetClock(w.clock.Now)
	w.opts = scaledown.Options{Ledger: w.ledger, Claims: ledger.NewLaunchMemory(), Jobs: jobs, Provider: prov, GitHub: gh,
		Queue: &queue.Memory{}, Logger: log, Now: w.clock.Now, Scopes: []github.Scope{github.OrgScope("acme")}}
	w.setImage(image)
	return w
}

// setImage (re)creates the reconciler with the pool's image.
func (w *warmWorld) setImage(image string) {
	w.t.Helper()
	w.opts.Pools = parsePools(w.t, fmt.Sprintf(warmPoolsYAML, image))
	var err error
	if w.down, err = scaledown.New(w.opts); err != nil {
		w.t.Fatal(err)
	}
}

func (w *warmWorld) pass() scaledown.Report {
	w.t.Helper()
	w.clock.Advance(time.Minute)
	rep, err := w.down.Reconcile(context.Background())
	if err != nil {
		w.t.Fatal(err)
	}
	return rep
}

// boot plays each warm machine's boot: running, then tagged ready as its
// boot script tags itself (CreateTags through the EC2 API).
func (w *warmWorld) boot() {
	for _, in := range w.fake.Instances() {
		if in.Tags[names.TagWarm] == "" || in.State != "pending" && in.State != "running" {
			continue
		}
		w.fake.SetState(in.ID, "running")
		if _, err := w.fake.CreateTags(context.Background(), &sdkec2.CreateTagsInput{Resources: []string{in.ID},
			Tags: []types.Tag{{Key: aws.String(names.TagWarmReady), Value: aws.String(w.clock.Now().Format(time.RFC3339))}}}); err != nil {
			w.t.Fatal(err)
		}
	}
}

// warm counts the pool's live warm records by kind and state.
func (w *warmWorld) warm() map[string]int {
	live, err := w.ledger.LiveRunners(context.Background(), "warm")
	if err != nil {
		w.t.Fatal(err)
	}
	out := map[string]int{}
	for _, r := range live {
		if ledger.IsWarm(r.Name) {
			out[ledger.WarmKindOf(r.Name)+"/"+r.State.String()]++
		}
	}
	return out
}

func (w *warmWorld) alive() map[string]string {
	out := map[string]string{}
	for _, in := range w.fake.Instances() {
		if in.State != "terminated" && in.State != "shutting-down" {
			out[in.ID] = in.State
		}
	}
	return out
}

const image1, image2 = "/skiff/image/one", "/skiff/image/two"

// TestWarmKeeper: the reconciler launches the pool's warm machines with
// their warm item, stops the stopped kind once it is ready, offers both,
// refreshes them when the image changes and replaces a lost one.
func TestWarmKeeper(t *testing.T) {
	w := newWarmWorld(t, image1)
	w.pass()
	if got := w.warm(); got["stopped/launched"] != 1 || got["hot/launched"] != 1 || len(got) != 2 {
		t.Fatalf("after the first pass: %v; want one stopped and one hot launched", got)
	}
	for arn, reg := range w.regs.items {
		if reg.Mode != userdata.ModeWarm || reg.JITConfig != "" || reg.WarmUntil.IsZero() {
			t.Errorf("warm item of %s = %+v; want mode warm, no secret, a wait bound", arn, reg)
		}
	}
	if rep := w.pass(); rep.Warm[decide.WarmLaunch] != 0 {
		t.Errorf("booting machines were launched again: %v", rep.Warm)
	}
	w.boot()
	w.pass()
	if got := w.warm(); got["hot/registered"] != 1 || got["stopped/launched"] != 1 {
		t.Fatalf("after the boot: %v; want the hot one ready and the stopped one still launched", got)
	}
	if n := w.fake.Calls("StopInstances"); n != 1 {
		t.Errorf("%d StopInstances calls; want 1 (the stopped kind, once ready)", n)
	}
	for id, st := range w.alive() {
		if st == "stopping" {
			w.fake.SetState(id, "stopped")
		}
	}
	w.pass()
	if got := w.warm(); got["hot/registered"] != 1 || got["stopped/registered"] != 1 {
		t.Fatalf("after the stop: %v; want both ready", got)
	}

	// A new image: both are retired, then replaced by machines of the new one.
	old := w.alive()
	w.setImage(image2)
	w.pass()
	for id := range old {
		if _, ok := w.alive()[id]; ok {
			t.Errorf("machine %s of the old image still alive", id)
		}
	}
	w.pass()
	if got := w.warm(); got["stopped/launched"] != 1 || got["hot/launched"] != 1 {
		t.Fatalf("after the refresh: %v; want two new machines", got)
	}

	// A lost stopped machine: its record ends and a new one is launched.
	w.boot()
	w.pass()
	for id, st := range w.alive() {
		if st == "stopping" {
			w.fake.SetState(id, "stopped")
		}
	}
	w.pass()
	var stopped string
	for id, st := range w.alive() {
		if st == "stopped" {
			stopped = id
		}
	}
	if stopped == "" {
		t.Fatalf("no stopped machine: %v", w.alive())
	}
	w.fake.SetState(stopped, "terminated")
	w.clock.Advance(3 * time.Minute) // past the listing lag
	w.pass()
	w.pass()
	if got := w.warm(); got["stopped/launched"] != 1 || got["hot/registered"] != 1 {
		t.Errorf("after losing the stopped machine: %v; want a replacement launched", got)
	}
	if live, _ := w.ledger.Live(context.Background(), "warm"); live > 3 {
		t.Errorf("live %d beyond maxRunners 3", live)
	}
}

// TestWarmUnderMaxRunners: warm machines fill only the room the pool's
// runners leave.
func TestWarmUnderMaxRunners(t *testing.T) {
	w := newWarmWorld(t, image1)
	ctx := context.Background()
	if n, err := w.ledger.Reserve(ctx, "warm", 3, []ledger.Runner{{Name: "skiff-1-1", Pool: "warm", JobID: 1, ReservedAt: w.clock.Now()},
		{Name: "skiff-2-1", Pool: "warm", JobID: 2, ReservedAt: w.clock.Now()}}); err != nil || n != 2 {
		t.Fatalf("Reserve = %d, %v", n, err)
	}
	w.pass()
	w.pass()
	if got := w.warm(); got["hot/launched"] != 1 || len(got) != 1 {
		t.Errorf("warm machines %v; want one (hot first) in the one free slot", got)
	}
	if live, _ := w.ledger.Live(ctx, "warm"); live != 3 {
		t.Errorf("live %d, want 3", live)
	}
}

// TestWarmTakenNotHanded: a job took a ready machine (ended its record)
// and its invocation died before the hand-over. The reconciler leaves the
// machine alone while the job may still be handing it over, then reaps it
// once the orphan grace has passed since the take, and replaces it.
func TestWarmTakenNotHanded(t *testing.T) {
	w := newWarmWorld(t, image1)
	w.pass()
	w.boot()
	w.pass()
	w.clock.Advance(30 * time.Minute) // long past its launch: only the take's time protects it
	w.pass()
	live, _ := w.ledger.LiveRunners(context.Background(), "warm")
	var hot ledger.Runner
	for _, r := range live {
		if ledger.WarmKindOf(r.Name) == "hot" && r.State == ledger.StateRegistered {
			hot = r
		}
	}
	if hot.Name == "" {
		t.Fatalf("no ready hot machine: %v", w.warm())
	}
	if ok, err := w.ledger.End(context.Background(), hot.Name, w.clock.Now(), "taken by skiff-9-1"); err != nil || !ok {
		t.Fatal(err)
	}
	w.pass()
	if _, ok := w.alive()[hot.InstanceID]; !ok {
		t.Fatal("the reconciler terminated a machine a job had just taken")
	}
	w.clock.Advance(16 * time.Minute)
	w.pass()
	if _, ok := w.alive()[hot.InstanceID]; ok {
		t.Errorf("a taken machine never handed over is still alive past the orphan grace")
	}
}
