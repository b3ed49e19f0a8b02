package loadtest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skiffci/skiff/pkg/pool/poolfile"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/userdata"
)

// plainProvider keeps no warm machines; warmProvider does, and counts its
// handovers.
type plainProvider struct{ provider.Provider }

type warmProvider struct {
	provider.Provider
	hands *int
}

func (warmProvider) Stop(context.Context, []string) error { return nil }

func (p warmProvider) Hand(context.Context, provider.Handover) (provider.Instance, error) {
	*p.hands++
	return provider.Instance{}, nil
}

// TestWrappersKeepWarmer: scale-up and scale-down find warm support by
// type assertion, so every wrapper the harness puts around a provider
// keeps provider.Warmer reachable when the provider has it, and does not
// invent it when the provider has not.
func TestWrappersKeepWarmer(t *testing.T) {
	t.Parallel()
	hands := 0
	warm, plain := warmProvider{hands: &hands}, plainProvider{}
	wrappers := map[string]func(provider.Provider) provider.Provider{
		"stepped": stepped,
		"guard":   func(p provider.Provider) provider.Provider { return (&guard{Provider: p}).port() },
		"scale-up's": func(p provider.Provider) provider.Provider {
			return stepped((&guard{Provider: p}).port())
		},
	}
	for _, plant := range append([]string{""}, Plants...) {
		wrappers["scale-down's, plant "+plant] = func(p provider.Provider) provider.Provider {
			peers, err := plantScaleDown(plant, scaleDownPeers{provider: (&guard{Provider: p}).port()})
			if err != nil {
				t.Fatal(err)
			}
			return peers.provider
		}
	}
	for name, wrap := range wrappers {
		if _, ok := wrap(warm).(provider.Warmer); !ok {
			t.Errorf("%s: a wrapped provider.Warmer is no longer one", name)
		}
		if _, ok := wrap(plain).(provider.Warmer); ok {
			t.Errorf("%s: a wrapped provider without warm machines became a provider.Warmer", name)
		}
	}
	if wm, ok := stepped(warm).(provider.Warmer); ok {
		before := hands
		if _, err := wm.Hand(context.Background(), provider.Handover{}); err != nil || hands != before+1 {
			t.Errorf("stepped Hand: err %v, %d handovers reached the provider, want 1", err, hands-before)
		}
	}
}

// TestStepWarmerCrash: a crash planned at the handover's first step
// cancels the invocation before the provider hears of it.
func TestStepWarmerCrash(t *testing.T) {
	t.Parallel()
	hands := 0
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ctx = context.WithValue(ctx, invocationKey{}, &invocation{at: 1, cancel: cancel})
	wm, ok := stepped(warmProvider{hands: &hands}).(provider.Warmer)
	if !ok {
		t.Fatal("stepped hides provider.Warmer")
	}
	_, err := wm.Hand(ctx, provider.Handover{})
	if err == nil || hands != 0 {
		t.Errorf("Hand after a crash: err %v, %d handovers, want an error and none", err, hands)
	}
}

// TestPoolsYAML: the harness's pools file parses; the large pool keeps its
// warm machines from the world's start (10:00 in Berlin, 09:00 UTC, a
// Tuesday) to the end given, rounded up to the minute, and at most to
// the day's end.
func TestPoolsYAML(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	cases := []struct {
		name   string
		end    time.Time
		on     []time.Time
		off    []time.Time
		reads  string
		stHot  [2]int
		atTime time.Time
	}{
		{"ten minutes and a half", start.Add(10*time.Minute + 30*time.Second),
			[]time.Time{start, start.Add(10 * time.Minute), start.Add(10*time.Minute + 59*time.Second)},
			[]time.Time{start.Add(-time.Second), start.Add(11 * time.Minute), start.Add(24 * time.Hour)},
			`from: "10:00", to: "10:11"`, [2]int{3, 2}, start.Add(time.Minute)},
		{"a whole minute", start.Add(7 * time.Minute), []time.Time{start.Add(6 * time.Minute)},
			[]time.Time{start.Add(7 * time.Minute)}, `to: "10:07"`, [2]int{0, 0}, start.Add(8 * time.Minute)},
		{"past midnight", start.Add(20 * time.Hour), []time.Time{start.Add(14*time.Hour - time.Second)},
			[]time.Time{start.Add(14 * time.Hour)}, `to: "24:00"`, [2]int{3, 2}, start.Add(13 * time.Hour)},
	}
	for _, tc := range cases {
		y := poolsYAML(start, tc.end, 12)
		if !strings.Contains(y, tc.reads) || !strings.Contains(y, "days: [tue]") {
			t.Errorf("%s: the pools file has no %q on tue:\n%s", tc.name, tc.reads, y)
		}
		cfg, err := poolfile.Parse([]byte(y), "loadtest-pools.yaml")
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		p := cfg.Pool("large")
		for _, at := range tc.on {
			if !p.Warm.On(at) {
				t.Errorf("%s: warm off at %s, want on", tc.name, at)
			}
		}
		for _, at := range tc.off {
			if p.Warm.On(at) {
				t.Errorf("%s: warm on at %s, want off", tc.name, at)
			}
		}
		if s, h := p.Warm.Counts(tc.atTime); [2]int{s, h} != tc.stHot {
			t.Errorf("%s: counts at %s: %d stopped, %d hot; want %v", tc.name, tc.atTime, s, h, tc.stHot)
		}
		if cfg.Pool("standard").Warm.Total() != 0 || p.MaxRunners != 12 {
			t.Errorf("%s: the standard pool keeps warm machines, or the large pool's maxRunners is %d, want 12", tc.name, p.MaxRunners)
		}
	}
	for n, want := range map[int]int{60: 12, 100: 12, 200: 24, 1000: 80, 5000: 80} {
		if got := largeMaxRunners(n); got != want {
			t.Errorf("largeMaxRunners(%d) = %d, want %d", n, got, want)
		}
	}
}

// TestItemOf: a registration item read from DynamoDB as the boot script
// reads it: a job's JIT configuration, a warm machine's kind, name and end
// of its wait.
func TestItemOf(t *testing.T) {
	t.Parallel()
	until := time.Date(2026, 12, 2, 9, 30, 0, 0, time.UTC)
	s := func(v string) ddbtypes.AttributeValue { return &ddbtypes.AttributeValueMemberS{Value: v} }
	cases := []struct {
		name  string
		attrs map[string]ddbtypes.AttributeValue
		want  regItem
	}{
		{"jit", map[string]ddbtypes.AttributeValue{userdata.AttrMode: s("jit"), userdata.AttrJITConfig: s("c2VjcmV0")},
			regItem{Mode: "jit", JITConfig: "c2VjcmV0"}},
		{"warm", map[string]ddbtypes.AttributeValue{userdata.AttrMode: s("warm"), userdata.AttrWarmKind: s("stopped"),
			userdata.AttrRunnerName: s("skiff-warm-stopped-25a266d72f-0a1b2c3d"),
			userdata.AttrWarmUntil:  &ddbtypes.AttributeValueMemberN{Value: fmt.Sprint(until.Unix())}},
			regItem{Mode: "warm", WarmKind: "stopped", RunnerName: "skiff-warm-stopped-25a266d72f-0a1b2c3d", WarmUntil: until}},
		{"warm_until not a number", map[string]ddbtypes.AttributeValue{userdata.AttrMode: s("warm"),
			userdata.AttrWarmUntil: &ddbtypes.AttributeValueMemberN{Value: "soon"}}, regItem{Mode: "warm"}},
	}
	for _, tc := range cases {
		if got := itemOf(tc.attrs); got != tc.want {
			t.Errorf("%s: itemOf = %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
