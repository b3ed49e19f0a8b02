package decide_test

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/scaledown/decide"
)

var warmNow = time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)

// warmRec is a warm record of pool cpu with key k, launched ago on inst.
func warmRec(kind, key, id string, state ledger.State, ago time.Duration, inst string) ledger.Runner {
	return ledger.Runner{Name: names.WarmRunnerName("", kind, key, id), Pool: "cpu", State: state, InstanceID: inst,
		ReservedAt: warmNow.Add(-ago), LaunchedAt: warmNow.Add(-ago)}
}

func warmInst(id, kind string, st provider.State, ready bool, ago time.Duration) provider.Instance {
	tags := map[string]string{names.TagManaged: names.ManagedValue, names.TagWarm: kind,
		names.TagRunnerName: names.WarmRunnerName("", kind, "k1", strings.ReplaceAll(id, "-", ""))}
	if ready {
		tags[names.TagWarmReady] = warmNow.Format(time.RFC3339)
	}
	return provider.Instance{ID: id, Pool: "cpu", State: st, LaunchedAt: warmNow.Add(-ago), Tags: tags}
}

func warmPool(stopped, hot, maxRunners, live int) decide.WarmPool {
	return decide.WarmPool{Pool: "cpu", Key: "k1", Stopped: stopped, Hot: hot, MaxAge: 24 * time.Hour, MaxRunners: maxRunners,
		BootTimeout: 10 * time.Minute, Live: live}
}

// warmSummary lists the actions as "do kind instance" lines, sorted.
func warmSummary(as []decide.WarmAction) string {
	var out []string
	for _, a := range as {
		out = append(out, fmt.Sprintf("%s %s %s", a.Do, a.Kind, a.InstanceID))
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}

func TestDecideWarm(t *testing.T) {
	for _, c := range []struct {
		name  string
		pool  decide.WarmPool
		recs  []ledger.Runner
		insts []provider.Instance
		want  string
	}{
		{name: "empty pool fills, hot first, within maxRunners", pool: warmPool(2, 1, 10, 0),
			want: "launch hot ; launch stopped ; launch stopped "},
		{name: "warm counts stop at maxRunners", pool: warmPool(4, 2, 5, 3),
			want: "launch hot ; launch hot "},
		{name: "a full pool launches none", pool: warmPool(4, 2, 5, 5), want: ""},
		{name: "ready hot is offered", pool: warmPool(0, 1, 10, 1),
			recs:  []ledger.Runner{warmRec("hot", "k1", "a", ledger.StateLaunched, 3*time.Minute, "i-1")},
			insts: []provider.Instance{warmInst("i-1", "hot", provider.Running, true, 3*time.Minute)},
			want:  "ready hot i-1"},
		{name: "ready stopped kind is stopped first, then offered", pool: warmPool(2, 0, 10, 2),
			recs: []ledger.Runner{warmRec("stopped", "k1", "a", ledger.StateLaunched, 3*time.Minute, "i-1"),
				warmRec("stopped", "k1", "b", ledger.StateLaunched, 3*time.Minute, "i-2")},
			insts: []provider.Instance{warmInst("i-1", "stopped", provider.Running, true, 3*time.Minute),
				warmInst("i-2", "stopped", provider.Stopped, true, 3*time.Minute)},
			want: "ready stopped i-2; stop stopped i-1"},
		{name: "booting machine waits", pool: warmPool(1, 0, 10, 1),
			recs:  []ledger.Runner{warmRec("stopped", "k1", "a", ledger.StateLaunched, 3*time.Minute, "i-1")},
			insts: []provider.Instance{warmInst("i-1", "stopped", provider.Running, false, 3*time.Minute)}, want: ""},
		{name: "never ready is retired", pool: warmPool(0, 1, 10, 1),
			recs:  []ledger.Runner{warmRec("hot", "k1", "a", ledger.StateLaunched, 11*time.Minute, "i-1")},
			insts: []provider.Instance{warmInst("i-1", "hot", provider.Running, false, 11*time.Minute)},
			want:  "launch hot ; retire hot i-1"},
		{name: "a lost stopped machine is ended and replaced", pool: warmPool(1, 0, 10, 1),
			recs:  []ledger.Runner{warmRec("stopped", "k1", "a", ledger.StateRegistered, time.Hour, "i-1")},
			insts: nil, want: "end stopped i-1; launch stopped "},
		{name: "a terminated stopped machine is ended and replaced", pool: warmPool(1, 0, 10, 1),
			recs:  []ledger.Runner{warmRec("stopped", "k1", "a", ledger.StateRegistered, time.Hour, "i-1")},
			insts: []provider.Instance{warmInst("i-1", "stopped", provider.Terminated, true, time.Hour)},
			want:  "end stopped i-1; launch stopped "},
		{name: "image change refreshes", pool: warmPool(0, 1, 10, 1),
			recs:  []ledger.Runner{warmRec("hot", "k0", "a", ledger.StateRegistered, time.Hour, "i-1")},
			insts: []provider.Instance{warmInst("i-1", "hot", provider.Running, true, time.Hour)},
			want:  "launch hot ; retire hot i-1"},
		{name: "past maxAge is replaced", pool: warmPool(1, 0, 10, 1),
			recs:  []ledger.Runner{warmRec("stopped", "k1", "a", ledger.StateRegistered, 25*time.Hour, "i-1")},
			insts: []provider.Instance{warmInst("i-1", "stopped", provider.Stopped, true, 25*time.Hour)},
			want:  "launch stopped ; retire stopped i-1"},
		{name: "outside the schedule every warm machine goes", pool: warmPool(0, 0, 10, 2),
			recs: []ledger.Runner{warmRec("stopped", "k1", "a", ledger.StateRegistered, time.Hour, "i-1"),
				warmRec("hot", "k1", "b", ledger.StateRegistered, time.Hour, "i-2")},
			insts: []provider.Instance{warmInst("i-1", "stopped", provider.Stopped, true, time.Hour),
				warmInst("i-2", "hot", provider.Running, true, time.Hour)},
			want: "retire hot i-2; retire stopped i-1"},
		{name: "a stopped warm machine without a record is reaped after the grace", pool: warmPool(0, 0, 10, 0),
			insts: []provider.Instance{warmInst("i-9", "stopped", provider.Stopped, true, time.Hour),
				warmInst("i-8", "stopped", provider.Stopped, true, time.Minute)},
			want: "orphan stopped i-9"},
		{name: "a taken machine waits out the grace from its record's end, then is reaped", pool: warmPool(0, 0, 10, 0),
			insts: []provider.Instance{warmInst("i-7", "hot", provider.Running, true, time.Hour),
				warmInst("i-6", "hot", provider.Running, true, time.Hour)},
			want: "orphan hot i-6"},
		{name: "a handed machine is the job's runner's, not an orphan", pool: warmPool(0, 0, 10, 0),
			insts: func() []provider.Instance {
				in := warmInst("i-5", "stopped", provider.Running, true, time.Hour)
				in.Tags[names.TagRunnerName] = names.RunnerName("", 42, 1)
				return []provider.Instance{in}
			}(), want: ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := decide.DecideWarm(decide.WarmInputs{Now: warmNow, Pools: []decide.WarmPool{c.pool}, Ledger: c.recs,
				Instances: c.insts, InstancesComplete: true, OrphanGrace: 15 * time.Minute,
				Ended: map[string]time.Time{"i-7": warmNow.Add(-time.Minute), "i-6": warmNow.Add(-20 * time.Minute)}})
			if s := warmSummary(got); s != c.want {
				t.Errorf("actions:\n got %q\nwant %q", s, c.want)
			}
		})
	}
}

// TestDecideWarmBoundsLaunches: a pool whose schedule turns on fills over
// passes, never in one burst beyond MaxLaunches.
func TestDecideWarmBoundsLaunches(t *testing.T) {
	got := decide.DecideWarm(decide.WarmInputs{Now: warmNow, Pools: []decide.WarmPool{warmPool(50, 0, 100, 0)}, MaxLaunches: 7})
	if len(got) != 7 {
		t.Errorf("%d launches, want 7", len(got))
	}
}

// TestDecideLeavesWarmMachinesToDecideWarm: the runner rules never reap a
// warm machine not handed to a job as an orphan (a job may be taking it);
// DecideWarm does, after the grace from its record's end.
func TestDecideLeavesWarmMachinesToDecideWarm(t *testing.T) {
	in := warmInst("i-1", "hot", provider.Running, true, 2*time.Hour)
	in.Pool = "cpu"
	d := decide.Decide(decide.Inputs{Now: warmNow, Instances: []provider.Instance{in}, InstancesComplete: true})
	if len(d.Actions) != 0 {
		t.Errorf("actions on an unheld warm machine: %+v", d.Actions)
	}
}
